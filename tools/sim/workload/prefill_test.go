package workload

import (
	"reflect"
	"strconv"
	"testing"
	"time"
)

func drawPrefill(t *testing.T, src Source, n int) []Job {
	t.Helper()
	p := PrefillOf(src)
	if p == nil {
		t.Fatal("no prefill")
	}
	var jobs []Job
	for range n {
		j, err := p.Jobs.Next()
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// TestPrefillLike: prefill jobs drawn like a class, with the
// distributions given in its place, from a stream of their own.
func TestPrefillLike(t *testing.T) {
	c := testConfig()
	g, err := NewGenerator(c)
	if err != nil {
		t.Fatal(err)
	}
	if PrefillOf(g) != nil {
		t.Fatal("a prefill without one in the config")
	}
	without := generate(t, c)
	c.Prefill = &PrefillConfig{CPUUtilisation: 0.6, MemoryUtilisation: 0.5, Like: "service", JobShape: JobShape{CPUCores: Dist{Dist: "fixed", Value: 2}}}
	if !reflect.DeepEqual(generate(t, c), without) {
		t.Fatal("a prefill changed the classes' jobs")
	}
	g, err = NewGenerator(c)
	if err != nil {
		t.Fatal(err)
	}
	p := g.Prefill()
	if p.CPU != 0.6 || p.Memory != 0.5 {
		t.Fatalf("targets %v, %v", p.CPU, p.Memory)
	}
	jobs := drawPrefill(t, g, 50)
	for i, j := range jobs {
		if want := "prefill-" + strconv.Itoa(i+1); j.ID != want || j.Submit != 0 || j.Type != Service || j.Priority != 100 || !j.DistinctMachines || len(j.Tasks) != 3 {
			t.Fatalf("job %d: %+v, want %s, a service at 0 like the class", i, j, want)
		}
		for _, task := range j.Tasks {
			if task.CPU != 2000 || task.Memory != 4<<30 || task.Duration != 0 {
				t.Fatalf("job %s: task %+v, want 2 cores (given), 4 GiB (the class's), until the end", j.ID, task)
			}
		}
	}
	if !reflect.DeepEqual(drawPrefill(t, g, 50), jobs) {
		t.Fatal("a second Prefill gave other jobs")
	}
}

// TestPrefillOwn: a prefill of its own distributions, with durations;
// Window and ScaleArrivals keep it, Compress divides its durations.
func TestPrefillOwn(t *testing.T) {
	c := testConfig()
	c.Prefill = &PrefillConfig{CPUUtilisation: 0.5, JobShape: JobShape{
		Tasks:           Dist{Dist: "exponential", Mean: 10, Round: RoundCeil},
		CPUCores:        Dist{Dist: "fixed", Value: 1},
		MemoryGiB:       Dist{Dist: "fixed", Value: 2},
		Priority:        Dist{Dist: "fixed", Value: 50},
		DurationSeconds: Dist{Dist: "exponential", Mean: 1000}, DurationPer: DurationPerJob}}
	g, err := NewGenerator(c)
	if err != nil {
		t.Fatal(err)
	}
	jobs := drawPrefill(t, g, 100)
	sizes := map[int]bool{}
	for _, j := range jobs {
		sizes[len(j.Tasks)] = true
		if j.Type != Service || j.Priority != 50 || j.DistinctMachines || j.MatchLabels != nil {
			t.Fatalf("job %+v", j)
		}
		for _, task := range j.Tasks {
			if task.CPU != 1000 || task.Memory != 2<<30 || task.Duration != j.Tasks[0].Duration || task.Duration == 0 {
				t.Fatalf("job %s: task %+v", j.ID, task)
			}
		}
	}
	if len(sizes) < 10 {
		t.Errorf("%d sizes of jobs: tasks not drawn", len(sizes))
	}
	scaled, err := ScaleArrivals(Window(mustGenerator(t, c), time.Minute, 0), Batch, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(drawPrefill(t, scaled, 100), jobs) {
		t.Error("Window and ScaleArrivals changed the prefill")
	}
	compressed, err := Compress(mustGenerator(t, c), 10, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range drawPrefill(t, compressed, 100) {
		if got, want := j.Tasks[0].Duration, scaleDown(jobs[i].Tasks[0].Duration, 4); got != want {
			t.Fatalf("compressed job %s runs %v, want %v", j.ID, got, want)
		}
	}
	if PrefillOf(Window(FromJobs(nil), 0, 0)) != nil {
		t.Error("a window of a source without a prefill has one")
	}
	w := WithPrefill(FromJobs(nil), &Prefill{CPU: 0.3, Jobs: FromJobs(jobs)})
	if p := PrefillOf(w); p == nil || p.CPU != 0.3 {
		t.Errorf("WithPrefill: %+v", p)
	}
}

func mustGenerator(t *testing.T, c Config) *Generator {
	t.Helper()
	g, err := NewGenerator(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
