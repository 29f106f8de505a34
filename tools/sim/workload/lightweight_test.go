package workload

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRound: each mode on values that tell them apart.
func TestRound(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []float64
	}{
		{"", []float64{2, 2, 3, 3}},
		{RoundNearest, []float64{2, 2, 3, 3}},
		{RoundFloor, []float64{2, 2, 2, 2}},
		{RoundCeil, []float64{2, 3, 3, 3}},
	} {
		for i, v := range []float64{2, 2.1, 2.5, 2.9} {
			if got := (Dist{Round: tc.mode}).round(v); got != tc.want[i] {
				t.Errorf("round %q of %v: %v, want %v", tc.mode, v, got, tc.want[i])
			}
		}
	}
}

// TestRoundCeilSample is a known answer: the first draws of
// ceil(exponential(mean 100)) from a fixed stream are the ceilings of
// the raw draws (the Omega lightweight simulator's number of tasks),
// and nearest and floor round the same draws their way.
func TestRoundCeilSample(t *testing.T) {
	raw := rand.New(rand.NewPCG(1, 2))
	var want []float64
	for range 5 {
		want = append(want, 100*raw.ExpFloat64())
	}
	for _, mode := range []struct {
		name string
		f    func(float64) float64
	}{{RoundCeil, math.Ceil}, {RoundFloor, math.Floor}, {RoundNearest, math.Round}} {
		d := Dist{Dist: "exponential", Mean: 100, Round: mode.name}
		if err := d.validate(fieldTasks.whole, fieldTasks.limit); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for i, w := range want {
			if got := d.sample(rng, true); got != mode.f(w) {
				t.Errorf("%s: draw %d is %v, want %v (of %v)", mode.name, i, got, mode.f(w), w)
			}
		}
	}
	// The sample itself, for the record: these are the tasks of the
	// first five jobs of such a class drawn from stream (1, 2).
	rng := rand.New(rand.NewPCG(1, 2))
	d := Dist{Dist: "exponential", Mean: 100, Round: RoundCeil}
	var got []float64
	for range 5 {
		got = append(got, d.sample(rng, true))
	}
	// (The raw draws: 59.31, 6.80, 3.65, 246.03, 157.92.)
	if want := []float64{60, 7, 4, 247, 158}; !slices.Equal(got, want) {
		t.Errorf("ceil sample %v, want %v", got, want)
	}
}

// TestCeilTasks: a class whose tasks are ceil(exponential(mean 0.5))
// has a mean of 1/(1-e^-2) ≈ 1.157 tasks a job; rounded to nearest it
// would have about 1.05 (a 0 becomes 1).
func TestCeilTasks(t *testing.T) {
	c := testConfig()
	c.HorizonSeconds = 40000
	c.Classes[0].Tasks = Dist{Dist: "exponential", Mean: 0.5, Round: RoundCeil}
	var tasks []float64
	for _, j := range generate(t, c) {
		if j.Type == Batch {
			tasks = append(tasks, float64(len(j.Tasks)))
		}
	}
	if got, want := mean(tasks), 1/(1-math.Exp(-2)); math.Abs(got-want) > 0.02 {
		t.Errorf("mean tasks %.3f over %d jobs, want %.3f", got, len(tasks), want)
	}
}

// TestDurationPer: per job, a job's tasks all run as long; per task (the
// default), each draws its own.
func TestDurationPer(t *testing.T) {
	c := testConfig()
	c.Classes[0].Tasks = Dist{Dist: "uniform", Min: 2, Max: 10}
	c.Classes[0].DurationSeconds = Dist{Dist: "exponential", Mean: 100}
	perTask := generate(t, c)
	c.Classes[0].DurationPer = DurationPerJob
	perJob := generate(t, c)
	distinct := map[time.Duration]bool{}
	for _, j := range perJob {
		if j.Type != Batch {
			continue
		}
		for _, task := range j.Tasks {
			if task.Duration != j.Tasks[0].Duration {
				t.Fatalf("job %s: task %d runs %v, task 0 %v", j.ID, task.Index, task.Duration, j.Tasks[0].Duration)
			}
		}
		distinct[j.Tasks[0].Duration] = true
	}
	if len(distinct) < 100 {
		t.Errorf("%d distinct durations over the jobs: not drawn per job", len(distinct))
	}
	differ := 0
	for _, j := range perTask {
		if j.Type == Batch && j.Tasks[0].Duration != j.Tasks[1].Duration {
			differ++
		}
	}
	if differ < 100 {
		t.Errorf("per task: only %d jobs' first two tasks run for different times", differ)
	}
	// The first job is otherwise the same: the draws before the
	// durations are in the same order (the streams part after it).
	a, b := perJob[0], perTask[0]
	if a.ID != b.ID || a.Submit != b.Submit || len(a.Tasks) != len(b.Tasks) || a.Tasks[0] != b.Tasks[0] {
		t.Errorf("drawing durations per job changed the first job otherwise: %+v, per task %+v", a, b)
	}
}

// TestLightweightExample loads deploy/sim/omega-lightweight.yaml: the
// Omega lightweight simulator's example cell and workload.
func TestLightweightExample(t *testing.T) {
	c, err := LoadConfig("../../../deploy/sim/omega-lightweight.yaml")
	if err != nil {
		t.Fatal(err)
	}
	machines := c.Cell.Machines()
	if len(machines) != 10000 || machines[0].CPU != 4000 || machines[0].Memory != 16<<30 {
		t.Fatalf("%d machines, the first %+v; want 10,000 of 4 cores and 16 GiB", len(machines), machines[0])
	}
	if c.Prefill == nil || c.Prefill.CPUUtilisation != 0.6 {
		t.Fatalf("prefill %+v, want the cell 60%% full", c.Prefill)
	}
	c.HorizonSeconds = 3600
	for _, j := range generate(t, c) {
		for _, task := range j.Tasks {
			if task.CPU != 1000 || task.Memory != 2<<30 || task.Duration != j.Tasks[0].Duration || task.Duration == 0 {
				t.Fatalf("job %s: task %+v, want 1 core, 2 GiB and the job's duration", j.ID, task)
			}
		}
	}
}
