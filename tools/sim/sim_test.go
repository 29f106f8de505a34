package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
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
	cfg := Config{MaxAttempts: 100, Backoff: 5 * time.Second, Seed: 7}
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
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(t.Context(), workload.FromJobs(jobs))
	if err != nil {
		t.Fatal(err)
	}
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
		placed += s.Placements - s.Preempted
		t.Logf("%s: %d jobs, %d tasks, %d decisions, %d placements, %d conflicts (%.3f), %d preempted, %d unscheduled, busy %.2f, wait p50 %v p90 %v",
			s.Name, s.Jobs, s.Tasks, s.Decisions, s.Placements, s.Conflicts, s.ConflictFraction, s.Preempted, s.Unscheduled, s.Busyness, s.WaitMedian, s.WaitP90)
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
	if st := run(t, cfg, jobs).Schedulers[0]; st.Conflicts != 0 || st.Placements == 0 {
		t.Fatalf("one scheduler: %d conflicts, %d placements", st.Conflicts, st.Placements)
	}
	jobs = testWorkload(3, 400)
	conflicts := func(mode framework.ConflictMode) int {
		n := 0
		for _, s := range run(t, testConfig(4, mode), jobs).Schedulers {
			n += s.Conflicts
		}
		return n
	}
	fine, coarse := conflicts(framework.Fine), conflicts(framework.Coarse)
	t.Logf("conflicts: fine %d, coarse %d", fine, coarse)
	if coarse < fine || coarse == 0 {
		t.Fatalf("coarse %d conflicts, fine %d", coarse, fine)
	}
}
