package workload

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

// testConfig is a small two-class workload over 10 minutes.
func testConfig() Config {
	return Config{
		Seed:           7,
		HorizonSeconds: 600,
		Cell: CellConfig{Zones: 2, Shapes: []ShapeConfig{
			{Name: "small", Count: 8, CPUCores: 8, MemoryGiB: 32},
			{Name: "big", Count: 2, CPUCores: 32, MemoryGiB: 128, Labels: map[string]string{"ssd": "true"}},
		}},
		Classes: []ClassConfig{
			{Name: "batch", Arrival: ArrivalConfig{Process: "poisson", IntervalSeconds: 2},
				JobShape: JobShape{Type: "batch",
					Tasks:           Dist{Dist: "uniform", Min: 1, Max: 10},
					DurationSeconds: Dist{Dist: "lognormal", Median: 60, Sigma: 1, Max: 3600},
					CPUCores:        Dist{Dist: "exponential", Mean: 0.5, Max: 8},
					MemoryGiB:       Dist{Dist: "choice", Values: []float64{0.5, 2}, Weights: []float64{3, 1}},
					Priority:        Dist{Dist: "uniform", Min: 10, Max: 90}},
				DistinctMachines: 0.25,
				Selectors:        []SelectorConfig{{Fraction: 0.1, Labels: map[string]string{"ssd": "true"}}}},
			{Name: "service", Arrival: ArrivalConfig{Process: "fixed", IntervalSeconds: 60},
				JobShape: JobShape{Type: "service",
					Tasks:           Dist{Dist: "fixed", Value: 3},
					DurationSeconds: Dist{Dist: "fixed", Value: 0},
					CPUCores:        Dist{Dist: "fixed", Value: 1},
					MemoryGiB:       Dist{Dist: "fixed", Value: 4},
					Priority:        Dist{Dist: "fixed", Value: 100}},
				DistinctMachines: 1},
		},
	}
}

func generate(t *testing.T, c Config) []Job {
	t.Helper()
	g, err := NewGenerator(c)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Collect(g)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func TestGeneratorDeterministic(t *testing.T) {
	c := testConfig()
	a, b := generate(t, c), generate(t, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same config gave different jobs")
	}
	c.Seed++
	if reflect.DeepEqual(a, generate(t, c)) {
		t.Fatal("another seed gave the same jobs")
	}
	// Editing one class leaves the other's jobs alone.
	c.Seed--
	c.Classes[1].Arrival.IntervalSeconds = 30
	batch := func(jobs []Job) []Job {
		return slices.DeleteFunc(slices.Clone(jobs), func(j Job) bool { return j.Type == Service })
	}
	if !reflect.DeepEqual(batch(a), batch(generate(t, c))) {
		t.Fatal("changing the service class changed the batch jobs")
	}
}

func TestGeneratorShape(t *testing.T) {
	jobs := generate(t, testConfig())
	var batch, service []Job
	for i, j := range jobs {
		if i > 0 && j.Submit < jobs[i-1].Submit {
			t.Fatalf("job %s at %v after %s at %v", j.ID, j.Submit, jobs[i-1].ID, jobs[i-1].Submit)
		}
		if j.Submit >= 600*time.Second {
			t.Fatalf("job %s at %v, past the horizon", j.ID, j.Submit)
		}
		if j.Type == Service {
			service = append(service, j)
		} else {
			batch = append(batch, j)
		}
	}
	// Fixed arrivals: one job a minute from the first minute.
	if len(service) != 9 || service[0].Submit != time.Minute || service[8].Submit != 9*time.Minute || service[8].ID != "service-9" {
		t.Fatalf("service jobs %d, first at %v, last %s at %v", len(service), service[0].Submit, service[8].ID, service[8].Submit)
	}
	for _, j := range service {
		if len(j.Tasks) != 3 || !j.DistinctMachines || j.Priority != 100 || j.Tasks[2] != (Task{Index: 2, CPU: 1000, Memory: 4 << 30}) {
			t.Fatalf("service job %+v", j)
		}
	}
	if n := len(batch); n < 250 || n > 350 {
		t.Errorf("%d batch jobs in 600 s at one per 2 s", n)
	}
}

// TestGeneratorDistributions draws many jobs and checks their statistics
// against the configured ones (with margins far above the sampling
// error).
func TestGeneratorDistributions(t *testing.T) {
	c := testConfig()
	c.HorizonSeconds = 40000
	var gaps, tasks, lnDur, cpu []float64
	var small, distinct, selected, jobs int
	var last time.Duration
	for _, j := range generate(t, c) {
		if j.Type != Batch {
			continue
		}
		jobs++
		gaps = append(gaps, (j.Submit - last).Seconds())
		last = j.Submit
		tasks = append(tasks, float64(len(j.Tasks)))
		cpu = append(cpu, float64(j.Tasks[0].CPU)/1000)
		for _, task := range j.Tasks {
			lnDur = append(lnDur, math.Log(task.Duration.Seconds()))
			if task.Memory != 512<<20 && task.Memory != 2<<30 {
				t.Fatalf("memory %d not a choice", task.Memory)
			}
		}
		if j.Tasks[0].Memory == 512<<20 {
			small++
		}
		if j.Priority < 10 || j.Priority > 90 {
			t.Fatalf("priority %d outside [10, 90]", j.Priority)
		}
		if j.DistinctMachines {
			distinct++
		}
		if j.MatchLabels["ssd"] == "true" {
			selected++
		}
	}
	near := func(what string, got, want, tolerance float64) {
		t.Helper()
		if math.Abs(got-want) > tolerance {
			t.Errorf("%s %.3f, want %.3f ± %.3f", what, got, want, tolerance)
		}
	}
	frac := func(n int) float64 { return float64(n) / float64(jobs) }
	near("mean gap (s)", mean(gaps), 2, 0.1)
	near("mean tasks", mean(tasks), 5.5, 0.15)
	near("median duration (s)", math.Exp(median(lnDur)), 60, 3)
	near("mean cpu (cores)", mean(cpu), 0.5, 0.03)
	near("small memory fraction", frac(small), 0.75, 0.03)
	near("distinct fraction", frac(distinct), 0.25, 0.03)
	near("selected fraction", frac(selected), 0.1, 0.02)
	if slices.Min(tasks) != 1 || slices.Max(tasks) != 10 {
		t.Errorf("tasks in [%v, %v], want [1, 10]", slices.Min(tasks), slices.Max(tasks))
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
