package scheduler_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// The loop the simulator measures is the loop that runs: the same
// workload through the simulator and through a production Scheduler
// over the in-memory store, under a virtual clock, makes the same
// decisions at the same virtual times with the same placements and the
// same verdicts of the policy (placed, waiting for room, woken by a task
// ending, abandoned). Decisions take no virtual time in both, so the
// one scheduler's decisions never overlap and nothing conflicts; the
// retry of conflicts is the policy's (TestPolicy) and is exercised in a
// cell by TestConflictsRetryOnlyTheFailedUpToTheBound.
func TestLoopMatchesSimulator(t *testing.T) {
	jobs, machines := loopWorkload(t)
	policy := scheduler.DefaultPolicy(20 * time.Second)
	policy.AbandonAfter = 4
	cfg := sim.Config{Machines: machines, Policy: policy, Seed: 11,
		Schedulers: []sim.SchedulerConfig{{Name: "batch-0", Kind: profiles.Batch, Serves: workload.Batch}}}

	var simulated []string
	cfg.Observe = func(at time.Duration, _ string, d scheduler.Decision) { simulated = append(simulated, describe(at, d)) }
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(t.Context(), workload.FromJobs(jobs)); err != nil {
		t.Fatal(err)
	}
	ran := runLoop(t, cfg, jobs)

	for i := range min(len(simulated), len(ran)) {
		if simulated[i] != ran[i] {
			t.Fatalf("decision %d differs:\nsimulator: %s\nscheduler: %s", i, simulated[i], ran[i])
		}
	}
	if len(simulated) != len(ran) {
		t.Fatalf("the simulator made %d decisions, the scheduler %d", len(simulated), len(ran))
	}
	verdicts := map[string]int{}
	for _, d := range ran {
		verdicts[d[strings.LastIndex(d, "-> ")+3:]]++
	}
	t.Logf("%d jobs, %d decisions, verdicts %v", len(jobs), len(ran), verdicts)
	for _, want := range []string{"done", "wait", "abandon"} {
		if verdicts[want] == 0 {
			t.Errorf("no decision ended in %q: the workload does not exercise the policy", want)
		}
	}
}

// loopWorkload is a cell of four 4-core machines and a minute of batch
// jobs that fill it: tasks of half a core to two cores for 10-40 s, and
// now and then one of 6 cores that fits no machine and is abandoned.
func loopWorkload(t *testing.T) ([]workload.Job, []workload.Machine) {
	t.Helper()
	wc := workload.Config{Seed: 5, HorizonSeconds: 60,
		Cell: workload.CellConfig{Shapes: []workload.ShapeConfig{{Name: "m", Count: 4, CPUCores: 4, MemoryGiB: 64}}},
		Classes: []workload.ClassConfig{{Name: "batch", Arrival: workload.ArrivalConfig{Process: "poisson", IntervalSeconds: 2},
			JobShape: workload.JobShape{Type: "batch",
				Tasks: workload.Dist{Dist: "uniform", Min: 1, Max: 4}, DurationSeconds: workload.Dist{Dist: "uniform", Min: 10, Max: 40},
				CPUCores: workload.Dist{Dist: "choice", Values: []float64{0.5, 1, 2, 2, 2, 6}}, MemoryGiB: workload.Dist{Dist: "fixed", Value: 1},
				Priority: workload.Dist{Dist: "fixed", Value: 0}}}}}
	jobs, err := workload.Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	return jobs, wc.Cell.Machines()
}

// describe is one decision as both runs report it.
func describe(at time.Duration, d scheduler.Decision) string {
	var placed []string
	for _, p := range d.Result.Committed {
		placed = append(placed, p.Task.Key+"@"+p.Machine.Name)
	}
	return fmt.Sprintf("%v %s #%d placed [%s] conflicted %d unfit %d -> %s", at, d.Job, d.Attempt, strings.Join(placed, " "),
		len(d.Result.Conflicted), len(d.Plan.Failures), d.Action.Step)
}

// runLoop runs jobs through a production Scheduler over memstore under
// a virtual clock, and returns its decisions. It plays the simulator's
// part around the scheduler: jobs are submitted at their times as the
// simulator submits them, and tasks end after their durations with the
// simulator's write; the clock moves from one event (a submission, an
// end, a delayed job falling due) to the next, and at each the caches
// apply everything committed before the scheduler decides.
func runLoop(t *testing.T, cfg sim.Config, jobs []workload.Job) []string {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	clock := cachetest.NewClock(sim.Epoch())
	store := memstore.New(clock.Now, time.Minute)
	cc := scheduler.NewCellCache(store, zap.NewNop())
	sc := cfg.Schedulers[0]
	prof, modes, err := profiles.New(sc.Kind, rand.New(rand.NewPCG(cfg.Seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	durations := map[string]time.Duration{} // a task without one runs until the end
	for _, j := range jobs {
		for i, task := range sim.Tasks(j, sc.Kind, 0) {
			key, err := clientlib.Tasks.Key(task)
			if err != nil {
				t.Fatal(err)
			}
			durations[key] = j.Tasks[i].Duration
		}
	}
	var decisions []string
	var ends []event
	s, err := scheduler.New(store, scheduler.Config{Name: sc.Name, Kind: sc.Kind, Profile: prof, Modes: modes, Policy: cfg.Policy,
		Cache: cc, Clock: clock, Logger: zap.NewNop(), Observe: func(d scheduler.Decision) {
			at := clock.Now().Sub(sim.Epoch())
			decisions = append(decisions, describe(at, d))
			for _, p := range d.Result.Committed {
				if dur := durations[p.Task.Key]; dur > 0 {
					ends = append(ends, event{at: at + dur, key: p.Task.Key})
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.WaitForWatches(ctx, 3); err != nil {
		t.Fatal(err)
	}
	settle := func() {
		if err := store.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(what string, build func(tx *clientlib.Txn)) {
		tx := clientlib.NewTxn(store)
		build(tx)
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		settle()
	}
	commit("register machines", func(tx *clientlib.Txn) {
		for _, m := range cfg.Machines {
			clientlib.PutObject(tx.Group(), clientlib.Machines, sim.MachineObject(m))
		}
	})
	for steps := 0; ; steps++ {
		if steps > 100_000 {
			t.Fatal("the run did not end")
		}
		s.Drain(ctx, settle)
		slices.SortStableFunc(ends, func(a, b event) int { return cmp.Compare(a.at, b.at) })
		next, kind := time.Duration(-1), ""
		consider := func(at time.Duration, k string) {
			if next < 0 || at < next {
				next, kind = at, k
			}
		}
		if len(jobs) > 0 {
			consider(jobs[0].Submit, "submit")
		}
		if len(ends) > 0 {
			consider(ends[0].at, "end")
		}
		if due, ok := s.NextDelayed(); ok {
			consider(due.Sub(sim.Epoch()), "due")
		}
		if next < 0 {
			return decisions
		}
		clock.Set(sim.Epoch().Add(next))
		switch kind {
		case "submit":
			j := jobs[0]
			jobs = jobs[1:]
			commit("submit "+j.ID, func(tx *clientlib.Txn) {
				for _, task := range sim.Tasks(j, sc.Kind, next) {
					clientlib.PutObject(tx.Group(), clientlib.Tasks, task)
				}
			})
		case "end":
			key := ends[0].key
			ends = ends[1:]
			task, err := clientlib.Get(ctx, store, clientlib.Tasks, key)
			if err != nil {
				t.Fatal(err)
			}
			if task.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_BOUND {
				continue
			}
			commit("end "+key, func(tx *clientlib.Txn) {
				if err := sim.End(tx.Group(), task); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// event is a task's end at a virtual time.
type event struct {
	at  time.Duration
	key string
}
