package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// testWorkload is a small mixed workload: batch jobs every 2.5 s on
// average and a service job (production priority, distinct machines)
// every 20 jobs, loading the test cell to about 80%; every 50th batch job
// is urgent (priority 50) and may preempt.
func testWorkload(seed uint64, jobs int) []workload.Job {
	r := rand.New(rand.NewPCG(seed, 99))
	var out []workload.Job
	var at time.Duration
	for j := range jobs {
		at += time.Duration(r.IntN(5000)) * time.Millisecond
		job := workload.Job{ID: fmt.Sprintf("j%04d", j), Submit: at}
		switch {
		case j%20 == 0:
			job.Type, job.Priority, job.DistinctMachines = workload.Service, 100, true
		case j%50 == 1:
			job.Priority = 50
		}
		for i := range 1 + r.IntN(8) {
			job.Tasks = append(job.Tasks, workload.Task{Index: int32(i), CPU: 250 * int64(1+r.IntN(8)), Memory: int64(1+r.IntN(4)) << 30,
				Duration: time.Duration(30+r.IntN(90)) * time.Second})
		}
		out = append(out, job)
	}
	return out
}

func testConfig(batch int, conflict framework.ConflictMode) Config {
	cfg := Config{Policy: scheduler.Policy{MaxAttempts: 5, Backoff: 5 * time.Second, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second, AbandonAfter: 100}, Seed: 7}
	for i := range 20 {
		cfg.Machines = append(cfg.Machines, workload.Machine{Name: fmt.Sprintf("m%02d", i), CPU: 8000, Memory: 32 << 30,
			Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%2)}})
	}
	modes := framework.Modes{Conflict: conflict}
	for i := range batch {
		cfg.Schedulers = append(cfg.Schedulers, SchedulerConfig{Name: fmt.Sprintf("batch-%d", i), Kind: profiles.Batch, Serves: workload.Batch,
			Modes: &modes, Decision: framework.DecisionTime{Job: 100 * time.Millisecond, Task: 50 * time.Millisecond}})
	}
	cfg.Schedulers = append(cfg.Schedulers, SchedulerConfig{Name: "service-0", Kind: profiles.Service, Serves: workload.Service,
		Modes: &modes, Decision: framework.DecisionTime{Job: time.Second, Task: 100 * time.Millisecond}})
	return cfg
}

func run(t *testing.T, cfg Config, jobs []workload.Job) *Stats {
	t.Helper()
	st, _ := runSim(t, cfg, jobs)
	return st
}

// The same seed gives the same run, bit for bit; every submitted task is
// placed or its job counted unscheduled; no machine goes over capacity
// (the simulator fails the run the moment one would).
func TestDeterministicAndConserving(t *testing.T) {
	jobs := testWorkload(1, 400)
	a := run(t, testConfig(3, framework.Fine), jobs)
	b := run(t, testConfig(3, framework.Fine), jobs)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of one seed differ:\n%+v\n%+v", a, b)
	}
	tasks, placed := 0, 0
	for _, s := range a.Schedulers {
		tasks += s.Tasks
		placed += s.Placements - s.PreemptedTasks
		t.Logf("%s: %d jobs, %d tasks, %d decisions (%d transactions, %d failed, %d no room), %d placements, %d conflicted (%.3f), "+
			"%d preempted, %d unscheduled, busy %.2f, wait p50 %.2fs p90 %.2fs",
			s.Name, s.Jobs, s.Tasks, s.Decisions, s.Transactions, s.FailedTransactions, s.NoRoomDecisions, s.Placements, s.ConflictedPlacements,
			s.ConflictedPlacementsPerPlacement, s.PreemptedTasks, s.UnscheduledJobs, s.BusynessFraction, s.WaitMedianSeconds, s.WaitP90Seconds)
	}
	if a.CPUUtilisation < 0.3 {
		t.Errorf("utilisation %.2f: the test cell is not loaded", a.CPUUtilisation)
	}
	if placed < tasks/2 || a.CPUUtilisation <= 0 || a.CPUUtilisation > 1 {
		t.Fatalf("%d of %d tasks placed, utilisation %.2f", placed, tasks, a.CPUUtilisation)
	}
	c := run(t, testConfig(3, framework.Fine), testWorkload(2, 400))
	if reflect.DeepEqual(a, c) {
		t.Fatal("another workload gave the same run")
	}
}

// Known answers: one scheduler never conflicts (fine-grained, without
// preemption: otherwise the tasks it read can end or be evicted under
// it); coarse-grained detection never conflicts less than fine-grained on
// the same seed.
func TestConflictKnownAnswers(t *testing.T) {
	jobs := testWorkload(3, 400)
	cfg := testConfig(1, framework.Fine)
	cfg.Schedulers = cfg.Schedulers[:1] // the batch scheduler alone
	for i := range jobs {
		jobs[i].Type, jobs[i].Priority = workload.Batch, 0
	}
	if st := run(t, cfg, jobs).Schedulers[0]; st.ConflictedPlacements != 0 || st.Placements == 0 {
		t.Fatalf("one scheduler: %d conflicts, %d placements", st.ConflictedPlacements, st.Placements)
	}
	jobs = testWorkload(3, 400)
	conflicts := func(mode framework.ConflictMode) int {
		n := 0
		for _, s := range run(t, testConfig(4, mode), jobs).Schedulers {
			n += s.ConflictedPlacements
		}
		return n
	}
	fine, coarse := conflicts(framework.Fine), conflicts(framework.Coarse)
	t.Logf("conflicts: fine %d, coarse %d", fine, coarse)
	if coarse < fine || coarse == 0 {
		t.Fatalf("coarse %d conflicts, fine %d", coarse, fine)
	}
}

// runSim runs cfg on jobs and returns the simulator too, for audits.
func runSim(t *testing.T, cfg Config, jobs []workload.Job) (*Stats, *Simulator) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(t.Context(), workload.FromJobs(jobs))
	if err != nil {
		t.Fatal(err)
	}
	return st, s
}

// audit checks the store at the end of a run: every machine's counters
// are the requests of the tasks bound to it, a failed machine has none,
// and the simulator's own account of each machine's tasks agrees.
func audit(t *testing.T, s *Simulator) {
	t.Helper()
	tasks, _, err := clientlib.List(t.Context(), s.store, clientlib.Tasks, "")
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]map[string]int64{}
	count := map[string]int{}
	for _, task := range tasks {
		m := task.GetBinding().GetMachine()
		if m == "" {
			continue
		}
		if bound[m] == nil {
			bound[m] = map[string]int64{}
		}
		for r, q := range task.GetSpec().GetTemplate().GetRequests() {
			bound[m][r] += q
		}
		count[m]++
	}
	for _, m := range s.machines {
		for _, r := range []string{"cpu", "memory"} {
			var v int64
			kv, err := s.store.Get(t.Context(), clientlib.AllocKey(m.name, r))
			if err != nil {
				t.Fatal(err)
			}
			if kv != nil {
				c, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
				if err != nil {
					t.Fatal(err)
				}
				v = c.GetValue()
			}
			if v != bound[m.name][r] {
				t.Errorf("%s: counter %s is %d, its tasks request %d", m.name, r, v, bound[m.name][r])
			}
		}
		if m.down && count[m.name] > 0 {
			t.Errorf("%s failed but %d tasks are bound to it", m.name, count[m.name])
		}
		if len(m.tasks) != count[m.name] {
			t.Errorf("%s: the simulator counts %d tasks on it, the store %d", m.name, len(m.tasks), count[m.name])
		}
	}
}

// With machine failures, the same seed still gives the same run; tasks
// are lost and placed again; the store's counters stay those of the
// tasks bound, and no failed machine keeps any.
func TestMachineFailures(t *testing.T) {
	jobs := testWorkload(1, 400)
	cfg := testConfig(3, framework.Fine)
	cfg.Failures = &Failures{MTBF: 20 * time.Minute, Repair: workload.Dist{Dist: "exponential", Mean: 120}}
	a, s := runSim(t, cfg, jobs)
	b, _ := runSim(t, cfg, jobs)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of one seed differ:\n%+v\n%+v", a, b)
	}
	audit(t, s)
	lost, tasks, placed := 0, 0, 0
	for _, st := range a.Schedulers {
		lost, tasks, placed = lost+st.LostTasks, tasks+st.Tasks, placed+st.Placements-st.PreemptedTasks-st.LostTasks
	}
	t.Logf("%d machine failures over %.0fs, %d tasks lost; %d of %d tasks placed", a.Failures, a.DurationSeconds, lost, placed, tasks)
	if a.Failures == 0 || lost == 0 || placed < tasks/2 {
		t.Fatalf("%d failures, %d tasks lost, %d of %d placed", a.Failures, lost, placed, tasks)
	}
	if c := run(t, testConfig(3, framework.Fine), jobs); reflect.DeepEqual(a.Schedulers, c.Schedulers) {
		t.Fatal("failures changed nothing")
	}
}

// A task on a machine that fails runs again on another, as its next
// attempt: one task on a cell of two machines, where (seed 3) m00 fails
// at 25m36s with the task on it and m01 not before 1h32m.
func TestLostTaskRunsElsewhere(t *testing.T) {
	cfg := testConfig(1, framework.Fine)
	cfg.Machines, cfg.Schedulers, cfg.Seed = cfg.Machines[:2], cfg.Schedulers[:1], 3
	cfg.Horizon = time.Hour
	cfg.Failures = &Failures{MTBF: time.Hour, Repair: workload.Dist{Dist: "fixed", Value: 3600}}
	job := workload.Job{ID: "forever", Tasks: []workload.Task{{CPU: 1000, Memory: 1 << 30, Duration: cfg.Horizon}}}
	st, s := runSim(t, cfg, []workload.Job{job})
	audit(t, s)
	task := s.jobs["sim/forever"].tasks[0]
	if st.Failures != 1 || st.Schedulers[0].LostTasks != 1 || st.Schedulers[0].Placements != 2 ||
		task.GetBinding().GetMachine() != "m01" || task.GetSpec().GetAttempt() != 1 || !s.byName["m00"].down {
		t.Fatalf("%d failures, %+v; the task is on %q, attempt %d", st.Failures, st.Schedulers[0], task.GetBinding().GetMachine(),
			task.GetSpec().GetAttempt())
	}
}

// Known answer: machines that fail after a mean MTBF up and return after
// a fixed repair R go through a cycle every MTBF+R on average, so 200
// machines fail about 200·20h/(1h+20m) = 3,000 times in 20 hours; and
// when they fail does not depend on the schedulers.
func TestFailureRate(t *testing.T) {
	cfg := testConfig(1, framework.Fine)
	cfg.Machines = nil
	for i := range 200 {
		cfg.Machines = append(cfg.Machines, workload.Machine{Name: fmt.Sprintf("m%03d", i), CPU: 8000, Memory: 32 << 30})
	}
	cfg.Failures = &Failures{MTBF: time.Hour, Repair: workload.Dist{Dist: "fixed", Value: 1200}}
	// One long task keeps the run going to its horizon (a lost task
	// starts again from the beginning).
	cfg.Horizon = 20 * time.Hour
	jobs := []workload.Job{{ID: "long", Tasks: []workload.Task{{CPU: 1000, Memory: 1 << 30, Duration: cfg.Horizon}}}}
	st := run(t, cfg, jobs)
	if st.DurationSeconds < (19*time.Hour).Seconds() || st.Failures < 2850 || st.Failures > 3150 {
		t.Fatalf("%d failures in %.0fs, want about 3,000 in 20h", st.Failures, st.DurationSeconds)
	}
	cfg.Schedulers = testConfig(3, framework.Fine).Schedulers
	if other := run(t, cfg, jobs); other.Failures != st.Failures {
		t.Fatalf("%d failures with 3 batch schedulers, %d with 1", other.Failures, st.Failures)
	}
	t.Logf("%d failures in %.0fs", st.Failures, st.DurationSeconds)
}

// Failures are checked.
func TestFailuresValidate(t *testing.T) {
	for _, f := range []*Failures{
		{MTBF: 0, Repair: workload.Dist{Dist: "fixed", Value: 1}},
		{MTBF: time.Hour, Repair: workload.Dist{Dist: "exponential"}},
		{MTBF: time.Hour},
	} {
		cfg := testConfig(1, framework.Fine)
		cfg.Failures = f
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

// A job all of whose tasks ran to their end is forgotten: its tasks leave
// the store and the simulator keeps no state of it, so that a run's
// memory follows what runs. At the end of a drained run (no horizon)
// only jobs with tasks never placed are left, and the store holds their
// tasks alone.
func TestFinishedJobsAreForgotten(t *testing.T) {
	st, s := runSim(t, testConfig(2, framework.Fine), testWorkload(1, 200))
	unscheduled := 0
	for _, sc := range st.Schedulers {
		unscheduled += sc.UnscheduledJobs
	}
	if len(s.jobs) != unscheduled {
		t.Errorf("%d jobs kept after the run, want the %d unscheduled", len(s.jobs), unscheduled)
	}
	tasks, _, err := clientlib.List(t.Context(), s.store, clientlib.Tasks, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if js := s.jobs["sim/"+task.GetSpec().GetJob()]; js == nil || len(js.pending()) == 0 {
			t.Errorf("task %s of a finished job left in the store", task.GetMetadata().GetName())
		}
	}
	audit(t, s)
}

// A machine counter over its machine's capacity fails the run at once
// (conservation), in a cell of machines of different sizes: one within
// the small machines' capacity is not looked up, one above it is.
func TestCounterOverCapacityFails(t *testing.T) {
	cfg := testConfig(1, framework.Fine)
	cfg.Machines[1].CPU = 4000
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		machine string
		add     int64
		over    bool
	}{{"m00", 3000, false}, {"m00", 3000, false}, {"m01", 3000, false}, {"m01", 3000, true}} {
		tx := clientlib.NewTxn(s.store)
		tx.Group().Add(clientlib.AllocKey(c.machine, "cpu"), c.add, 0, math.MaxInt64)
		if out, err := tx.Commit(context.Background()); err != nil || out.Err() != nil {
			t.Fatal(err, out.Err())
		}
		if (s.err != nil) != c.over {
			t.Fatalf("%s cpu %+d: the run's error is %v", c.machine, c.add, s.err)
		}
	}
}

// Work sent to the encoder is done exactly once, by the encoder or by
// whoever waits for it first (or sends it to a full queue), and what it
// wrote is seen by the waiter.
func TestWorkIsDoneOnce(t *testing.T) {
	s := &Simulator{encoder: make(chan *work, 2)}
	go encode(s.encoder)
	defer close(s.encoder)
	var runs [500]atomic.Int32
	wrote := make([]int, len(runs))
	works := make([]*work, len(runs))
	for i := range works {
		works[i] = newWork(func() {
			runs[i].Add(1)
			wrote[i] = i + 1
		})
		s.send(works[i])
	}
	for i, w := range works {
		w.wait()
		if wrote[i] != i+1 {
			t.Fatalf("work %d: read %d after waiting", i, wrote[i])
		}
	}
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("work %d ran %d times", i, n)
		}
	}
}
