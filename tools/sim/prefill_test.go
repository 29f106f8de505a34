package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// prefillCell is n machines of 4 cores and 16 GiB, with a batch and a
// service scheduler.
func prefillCell(n int) Config {
	cfg := Config{Policy: scheduler.Policy{MaxAttempts: 5, Backoff: 5 * time.Second, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second,
		AbandonAfter: 100}, Seed: 3}
	for i := range n {
		cfg.Machines = append(cfg.Machines, workload.Machine{Name: fmt.Sprintf("m%03d", i), CPU: 4000, Memory: 16 << 30,
			Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%2)}})
	}
	cfg.Schedulers = []SchedulerConfig{
		{Name: "batch-0", Kind: profiles.Batch, Serves: workload.Batch, Decision: framework.DecisionTime{Job: 100 * time.Millisecond, Task: 5 * time.Millisecond}},
		{Name: "service-0", Kind: profiles.Service, Serves: workload.Service, Decision: framework.DecisionTime{Job: time.Second, Task: 5 * time.Millisecond}},
	}
	return cfg
}

// prefillJobs is an endless source of prefill jobs: services of 1-9
// tasks whose requests shape draws (seeded).
type prefillJobs struct {
	rng   *rand.Rand
	n     int
	typ   workload.Type
	prio  int32
	shape func(r *rand.Rand) (cpu, memory int64)
	dur   time.Duration
}

func (p *prefillJobs) Next() (workload.Job, error) {
	p.n++
	j := workload.Job{ID: fmt.Sprintf("prefill-%d", p.n), Type: p.typ, Priority: p.prio}
	cpu, mem := p.shape(p.rng)
	for i := range 1 + p.rng.IntN(9) {
		j.Tasks = append(j.Tasks, workload.Task{Index: int32(i), CPU: cpu, Memory: mem, Duration: p.dur})
	}
	return j, nil
}

func fixedShape(cpu, memory int64) func(*rand.Rand) (int64, int64) {
	return func(*rand.Rand) (int64, int64) { return cpu, memory }
}

func services(shape func(*rand.Rand) (int64, int64)) *prefillJobs {
	return &prefillJobs{rng: rand.New(rand.NewPCG(5, 6)), typ: workload.Service, prio: 100, shape: shape}
}

// prefillRun runs cfg on jobs, with the cell prefilled as p says.
func prefillRun(t *testing.T, cfg Config, p *workload.Prefill, jobs []workload.Job) (*Stats, *Simulator) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var src workload.Source = workload.FromJobs(jobs)
	if p != nil {
		src = workload.WithPrefill(src, p)
	}
	st, err := s.Run(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	return st, s
}

// allocated sums the cell's counters of resource r in the machine view.
func allocated(s *Simulator, r string) (sum int64, per []int64) {
	for _, m := range s.cfg.Machines {
		v := s.view.Machine(m.Name).Allocated[r]
		sum += v
		per = append(per, v)
	}
	return sum, per
}

// TestPrefillReachesTarget: the prefill stops before the first task that
// would pass the target, so it ends within one task's requests of it;
// the store's counters are the prefilled tasks' requests.
func TestPrefillReachesTarget(t *testing.T) {
	const machines = 100 // 400 cores, 1,600 GiB
	for _, tc := range []struct {
		name        string
		cpu, memory float64
		shape       func(*rand.Rand) (int64, int64)
		largest     int64 // the largest task's CPU
		wantTasks   int   // if known
	}{
		{"1-core tasks to 60% of cores", 0.6, 0, fixedShape(1000, 2<<30), 1000, 240},
		{"2 GiB tasks to 30% of memory", 0, 0.3, fixedShape(500, 2<<30), 500, 240},
		{"tasks of 0.25-2 cores to 75%", 0.75, 0, func(r *rand.Rand) (int64, int64) { return 250 * (1 + r.Int64N(8)), 1 << 30 }, 2000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, s := prefillRun(t, prefillCell(machines), &workload.Prefill{CPU: tc.cpu, Memory: tc.memory, Jobs: services(tc.shape)}, nil)
			got := s.Prefilled()
			t.Logf("%+v", got)
			if tc.wantTasks > 0 && got.Tasks != tc.wantTasks {
				t.Errorf("%d tasks prefilled, want %d", got.Tasks, tc.wantTasks)
			}
			reached, target := got.CPUUtilisation, tc.cpu
			if tc.cpu == 0 {
				reached, target = got.MemoryUtilisation, tc.memory
			}
			if step := float64(tc.largest) / float64(machines*4000); reached > target || (tc.cpu > 0 && reached <= target-step) {
				t.Errorf("reached %v of the target %v (a task is at most %v)", reached, target, step)
			}
			if tc.cpu == 0 && reached != target {
				t.Errorf("memory reached %v, want %v (2 GiB tasks fill it exactly)", reached, target)
			}
			cpu, _ := allocated(s, "cpu")
			mem, _ := allocated(s, "memory")
			if float64(cpu)/(machines*4000) != got.CPUUtilisation || float64(mem)/float64(machines*16<<30) != got.MemoryUtilisation {
				t.Errorf("the cell's counters: %d millicores, %d bytes; the prefill says %+v", cpu, mem, got)
			}
			audit(t, s)
			if st.Schedulers[0].Jobs+st.Schedulers[1].Jobs != 0 || st.Schedulers[0].Decisions+st.Schedulers[1].Decisions != 0 {
				t.Errorf("the prefill counts in the measures: %+v", st.Schedulers)
			}
		})
	}
}

// measured is a light workload that fits the test cell whether it is
// prefilled to half or not: a batch job every 2 s and a service every
// 10, of 1-4 tasks of a quarter core.
func measured() []workload.Job {
	var jobs []workload.Job
	r := rand.New(rand.NewPCG(8, 9))
	for j := range 60 {
		job := workload.Job{ID: fmt.Sprintf("j%02d", j), Submit: time.Duration(j) * 2 * time.Second, Priority: 100}
		if j%5 == 0 {
			job.Type = workload.Service
		}
		for i := range 1 + r.IntN(4) {
			job.Tasks = append(job.Tasks, workload.Task{Index: int32(i), CPU: 250, Memory: 1 << 30, Duration: time.Duration(5+r.IntN(30)) * time.Second})
		}
		jobs = append(jobs, job)
	}
	return jobs
}

// TestPrefillNotMeasured: a prefilled cell gives the schedulers' measures
// of the same workload on an empty cell, bit for bit (decisions,
// transactions, busyness, waits: nothing of the prefill counts); only
// the cell's CPU utilisation grows.
func TestPrefillNotMeasured(t *testing.T) {
	cfg := prefillCell(20)
	empty, _ := prefillRun(t, cfg, nil, measured())
	full, s := prefillRun(t, cfg, &workload.Prefill{CPU: 0.5, Jobs: services(fixedShape(1000, 2<<30))}, measured())
	if got := s.Prefilled(); got.Tasks != 40 || got.CPUUtilisation != 0.5 {
		t.Fatalf("prefilled %+v, want 40 tasks, half the cell", got)
	}
	if !reflect.DeepEqual(empty.Schedulers, full.Schedulers) {
		t.Errorf("the prefill changed the schedulers' measures:\nempty %+v\nfull  %+v", empty.Schedulers, full.Schedulers)
	}
	if full.CPUUtilisation <= empty.CPUUtilisation+0.45 {
		t.Errorf("CPU utilisation %v prefilled, %v empty: the prefill's half is missing", full.CPUUtilisation, empty.CPUUtilisation)
	}
	audit(t, s)
}

// TestPrefillDeterministic: a seed places the prefill the same way every
// time; another seed places it elsewhere.
func TestPrefillDeterministic(t *testing.T) {
	cfg := prefillCell(50)
	p := func() *workload.Prefill { return &workload.Prefill{CPU: 0.6, Jobs: services(fixedShape(1000, 2<<30))} }
	a, s1 := prefillRun(t, cfg, p(), measured())
	b, s2 := prefillRun(t, cfg, p(), measured())
	_, per1 := allocated(s1, "cpu")
	_, per2 := allocated(s2, "cpu")
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(per1, per2) || s1.Prefilled() != s2.Prefilled() {
		t.Fatal("two runs of one seed differ")
	}
	cfg.Seed++
	_, s3 := prefillRun(t, cfg, p(), nil)
	_, per3 := allocated(s3, "cpu")
	if reflect.DeepEqual(per1, per3) {
		t.Error("another seed placed the prefill on the same machines")
	}
}

// TestPrefillRandomFirstFit is a known answer: tasks go only where they
// fit, a job keeps the tasks placed before one fits nowhere, and the
// prefill stops after prefillMisses jobs in a row place nothing. Nine
// machines have 1 core, one has 8: tasks of 2 cores can only go on the
// big one, four of them; distinct-machine jobs put one there.
func TestPrefillRandomFirstFit(t *testing.T) {
	for _, distinct := range []bool{false, true} {
		cfg := prefillCell(10)
		for i := range 9 {
			cfg.Machines[i].CPU = 1000
		}
		cfg.Machines[9].CPU = 8000
		jobs := services(fixedShape(2000, 1<<30))
		src := workload.Source(jobs)
		if distinct {
			src = distinctJobs{jobs}
		}
		_, s := prefillRun(t, cfg, &workload.Prefill{CPU: 1, Jobs: src}, nil)
		_, per := allocated(s, "cpu")
		if per[9] != 8000 || sum(per[:9]) != 0 {
			t.Errorf("distinct %v: cores allocated per machine %v, want only the big machine's 8", distinct, per)
		}
		got := s.Prefilled()
		// Distinct machines: one task a job.
		if got.Tasks != 4 || (distinct && got.Jobs != 4) || (!distinct && got.Jobs > 4) {
			t.Errorf("distinct %v: %+v, want 4 tasks", distinct, got)
		}
		// The jobs read: the ones placed, then prefillMisses placing
		// nothing.
		if jobs.n != got.Jobs+prefillMisses {
			t.Errorf("distinct %v: %d jobs read, want %d placed and %d missed", distinct, jobs.n, got.Jobs, prefillMisses)
		}
		audit(t, s)
	}
}

type distinctJobs struct{ src workload.Source }

func (d distinctJobs) Next() (workload.Job, error) {
	j, err := d.src.Next()
	j.DistinctMachines = true
	return j, err
}

func sum(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// TestPrefillPreempted: prefill tasks are the cell's like any other's
// once placed. Batch prefill at a low priority fills the cell; a
// production service preempts some of it; the preempted tasks go back to
// the batch scheduler, which counts them (and their placements, if any
// room comes back), and the store stays consistent.
func TestPrefillPreempted(t *testing.T) {
	cfg := prefillCell(10)
	jobs := &prefillJobs{rng: rand.New(rand.NewPCG(1, 1)), typ: workload.Batch, prio: 10, shape: fixedShape(1000, 1<<30)}
	web := workload.Job{ID: "web", Submit: time.Second, Type: workload.Service, Priority: 100}
	for i := range 5 {
		web.Tasks = append(web.Tasks, workload.Task{Index: int32(i), CPU: 2000, Memory: 1 << 30, Duration: time.Minute})
	}
	st, s := prefillRun(t, cfg, &workload.Prefill{CPU: 1, Jobs: jobs}, []workload.Job{web})
	if got := s.Prefilled(); got.CPUUtilisation != 1 {
		t.Fatalf("prefilled %+v, want the whole cell", got)
	}
	batch, service := st.Schedulers[0], st.Schedulers[1]
	if service.Placements != 5 || service.UnscheduledJobs != 0 {
		t.Errorf("service: %+v, want the 5 tasks placed by preemption", service)
	}
	if batch.PreemptedTasks != 10 || batch.Jobs != 0 || batch.Decisions == 0 {
		t.Errorf("batch: %+v, want 10 prefill tasks preempted and tried again", batch)
	}
	if st.CPUUtilisation < 0.99 {
		t.Errorf("CPU utilisation %v: the cell stays full, but for the preempted tasks' moments pending", st.CPUUtilisation)
	}
	audit(t, s)
	// A prefill needs a scheduler for its type.
	cfg.Schedulers = cfg.Schedulers[1:]
	s2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Run(t.Context(), workload.WithPrefill(workload.FromJobs(nil), &workload.Prefill{CPU: 0.5, Jobs: jobs})); err == nil {
		t.Error("a batch prefill without a batch scheduler ran")
	}
}

// TestPrefillTraceWindow is a known answer: a trace's window starts with
// the tasks running at its start placed at 0 (a list, no targets), each
// ending when what remained of its run is over, the clock at 0 the
// window's start. Four tasks of a core: 50 s left, until the end (two),
// 60 s left; no job arrives, so the run ends at 60 s with the cell's
// CPU allocated (50 + 3×60) core-seconds of 4 cores × 4 machines × 60 s.
func TestPrefillTraceWindow(t *testing.T) {
	task := func(i int32, d time.Duration) workload.Task {
		return workload.Task{Index: i, CPU: 1000, Memory: 1 << 30, Duration: d}
	}
	tr := &workload.Trace{Running: []workload.Job{
		{ID: "1", Type: workload.Service, Priority: 100, Tasks: []workload.Task{task(0, 50*time.Second), task(1, 0)}},
		{ID: "3", Type: workload.Batch, Priority: 10, Tasks: []workload.Task{task(1, 0)}},
		{ID: "7", Type: workload.Batch, Priority: 10, Tasks: []workload.Task{task(0, 60*time.Second)}},
	}}
	s, err := New(prefillCell(4))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(t.Context(), tr.Source())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Prefilled(), (PrefillStats{Jobs: 3, Tasks: 4, CPUUtilisation: 0.25, MemoryUtilisation: 4.0 / 64}); got != want {
		t.Errorf("prefilled %+v, want %+v", got, want)
	}
	if st.DurationSeconds != 60 {
		t.Errorf("run ended at %v s, want 60 (the last task's end)", st.DurationSeconds)
	}
	if want := (50.0 + 3*60) / (16 * 60); math.Abs(st.CPUUtilisation-want) > 1e-12 {
		t.Errorf("CPU allocated %v of the cell over the run, want %v", st.CPUUtilisation, want)
	}
	cpu, _ := allocated(s, "cpu")
	if cpu != 2000 {
		t.Errorf("%d millicores allocated at the end, want the two tasks running until the end", cpu)
	}
	for _, sc := range st.Schedulers {
		if sc.Jobs+sc.Decisions != 0 {
			t.Errorf("%s: %+v: the window's running tasks count in its measures", sc.Name, sc)
		}
	}
	audit(t, s)
}

// TestPrefillList: a list's tasks are each placed if they fit, a job's
// tasks of another shape are tried on the whole cell, distinct machines
// hold, and the tasks that fit nowhere are counted. Two machines of 4
// cores: job a's tasks of 3, 3, 3, 1, 1 cores place all but the third;
// job b (1 core) finds the cell full. Then three machines: job d's
// distinct tasks of 2, 1, 1, 1 cores place three, one a machine.
func TestPrefillList(t *testing.T) {
	tasks := func(cores ...int64) []workload.Task {
		var ts []workload.Task
		for i, c := range cores {
			ts = append(ts, workload.Task{Index: int32(i), CPU: c * 1000, Memory: 1 << 30})
		}
		return ts
	}
	run := func(machines int, jobs ...workload.Job) (PrefillStats, []int64, *Simulator) {
		_, s := prefillRun(t, prefillCell(machines), &workload.Prefill{Jobs: workload.FromJobs(jobs)}, nil)
		_, per := allocated(s, "cpu")
		audit(t, s)
		return s.Prefilled(), per, s
	}
	got, per, _ := run(2, workload.Job{ID: "a", Type: workload.Service, Priority: 100, Tasks: tasks(3, 3, 3, 1, 1)},
		workload.Job{ID: "b", Type: workload.Service, Priority: 100, Tasks: tasks(1)})
	if got.Tasks != 4 || got.Jobs != 1 || got.NotPlaced != 2 || per[0] != 4000 || per[1] != 4000 {
		t.Errorf("prefilled %+v, cores per machine %v: want a's 4 tasks placed, 2 left out, the cell full", got, per)
	}
	got, per, s := run(3, workload.Job{ID: "d", Type: workload.Batch, Priority: 10, DistinctMachines: true, Tasks: tasks(2, 1, 1, 1)})
	if got.Tasks != 3 || got.NotPlaced != 1 || sum(per) != 4000 {
		t.Errorf("prefilled %+v, cores per machine %v: want 3 distinct tasks, 1 left out", got, per)
	}
	for _, m := range s.machines {
		if len(m.tasks) > 1 {
			t.Errorf("machine %s holds %d tasks of a distinct job", m.name, len(m.tasks))
		}
	}
	// A list is read to its end, however many of its jobs fit nowhere.
	var many []workload.Job
	for i := range 2 * prefillMisses {
		many = append(many, workload.Job{ID: fmt.Sprintf("big-%d", i), Type: workload.Batch, Tasks: tasks(8)})
	}
	many = append(many, workload.Job{ID: "small", Type: workload.Batch, Tasks: tasks(1)})
	if got, _, _ := run(2, many...); got.Tasks != 1 || got.NotPlaced != 2*prefillMisses {
		t.Errorf("prefilled %+v: want the last job's task placed after %d that fit nowhere", got, 2*prefillMisses)
	}
}
