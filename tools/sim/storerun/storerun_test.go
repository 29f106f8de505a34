package storerun

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// experiment is a small synthetic experiment: 20 machines of 8 cores,
// about 30 batch jobs of 1-6 tasks (20-60 s each) from two batch
// schedulers, and three services (three tasks on distinct machines, run
// until the end) from a service scheduler; the cell stays below half
// full, so every task fits at once.
func experiment(t testing.TB) (sim.Config, []workload.Job) {
	t.Helper()
	wc := workload.Config{Seed: 3, HorizonSeconds: 90,
		Cell: workload.CellConfig{Zones: 2, Shapes: []workload.ShapeConfig{{Name: "m", Count: 20, CPUCores: 8, MemoryGiB: 32}}},
		Classes: []workload.ClassConfig{
			{Name: "batch", Arrival: workload.ArrivalConfig{Process: "poisson", IntervalSeconds: 3},
				JobShape: workload.JobShape{Type: "batch",
					Tasks: workload.Dist{Dist: "uniform", Min: 1, Max: 6}, DurationSeconds: workload.Dist{Dist: "uniform", Min: 20, Max: 60},
					CPUCores: workload.Dist{Dist: "choice", Values: []float64{0.5, 1, 2}}, MemoryGiB: workload.Dist{Dist: "uniform", Min: 1, Max: 4},
					Priority: workload.Dist{Dist: "fixed", Value: 0}}},
			{Name: "service", Arrival: workload.ArrivalConfig{Process: "fixed", IntervalSeconds: 30},
				JobShape: workload.JobShape{Type: "service",
					Tasks: workload.Dist{Dist: "fixed", Value: 3}, DurationSeconds: workload.Dist{Dist: "fixed", Value: 0},
					CPUCores: workload.Dist{Dist: "fixed", Value: 1}, MemoryGiB: workload.Dist{Dist: "fixed", Value: 4},
					Priority: workload.Dist{Dist: "fixed", Value: 100}}, DistinctMachines: 1},
		}}
	jobs, err := workload.Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	policy := scheduler.DefaultPolicy(5 * time.Second)
	policy.AbandonAfter = 100
	cfg := sim.Config{Machines: wc.Cell.Machines(), Policy: policy, Seed: 7}
	batch := framework.DecisionTime{Job: 100 * time.Millisecond, Task: 10 * time.Millisecond}
	for _, name := range []string{"batch-0", "batch-1"} {
		cfg.Schedulers = append(cfg.Schedulers, sim.SchedulerConfig{Name: name, Kind: profiles.Batch, Serves: workload.Batch, Decision: batch})
	}
	cfg.Schedulers = append(cfg.Schedulers, sim.SchedulerConfig{Name: "service-0", Kind: profiles.Service, Serves: workload.Service,
		Decision: framework.DecisionTime{Job: time.Second, Task: 100 * time.Millisecond}})
	return cfg, jobs
}

// compress is the store run's speed-up of virtual time.
const compress = 20

// runBoth runs the experiment in memory and against an embedded store,
// logs both runs' measures side by side, and checks only what holds
// whatever the timing of the store run:
//
//   - per scheduler, the same number of jobs and of tasks in both runs
//     (the workload and the job-to-scheduler hash are fixed), and as
//     many placements committed as tasks, in both;
//   - in both runs, no job left unscheduled or abandoned, no task found
//     unschedulable (no decision without room), none preempted, every
//     job decided and wholly placed: the cell stays below half full, so
//     every task fits at once whenever its decision runs;
//   - the in-memory run, deterministic in virtual time, has at most 0.1
//     conflicts per placement;
//   - against the store, the machines' counters never go over a
//     machine's capacity and add up to the tasks bound at the end, and
//     each instance's own counts agree with the decisions it reported
//     (Run checks these and fails otherwise).
//
// It does not compare which machine each task went to: against the store
// a decision reads the cell as of the wall-clock moment it runs (which
// tasks have ended, what the other batch scheduler has committed), so
// the machines chosen, the conflicts, the decisions and the waits depend
// on timing. BenchmarkAgainstMemory reports those differences.
func runBoth(tb testing.TB) (mem, store *sim.Stats) {
	tb.Helper()
	cfg, jobs := experiment(tb)
	s, err := sim.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	mem, err = s.Run(tb.Context(), workload.FromJobs(jobs))
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	store, err = Options{Compress: compress}.Run(tb.Context(), cfg, workload.FromJobs(jobs))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d jobs: %.1fs of virtual time in memory, %.1fs against the store, in %v; utilisation %.3f/%.3f (memory/store)", len(jobs),
		mem.DurationSeconds, store.DurationSeconds, time.Since(start).Round(time.Millisecond), mem.CPUUtilisation, store.CPUUtilisation)
	for i, m := range mem.Schedulers {
		s := store.Schedulers[i]
		tb.Logf("%s: jobs %d/%d, tasks %d/%d, decisions %d/%d, transactions %d/%d (failed %d/%d), placements %d/%d, conflicted %d/%d, "+
			"busy %.3f/%.3f, wait p50 %.3fs/%.3fs p90 %.3fs/%.3fs, until placed p90 %.3fs/%.3fs (memory/store)",
			m.Name, m.Jobs, s.Jobs, m.Tasks, s.Tasks, m.Decisions, s.Decisions, m.Transactions, s.Transactions, m.FailedTransactions,
			s.FailedTransactions, m.Placements, s.Placements, m.ConflictedPlacements, s.ConflictedPlacements, m.BusynessFraction,
			s.BusynessFraction, m.WaitMedianSeconds, s.WaitMedianSeconds, m.WaitP90Seconds, s.WaitP90Seconds, m.WaitUntilPlacedP90Seconds,
			s.WaitUntilPlacedP90Seconds)
		for _, st := range []struct {
			run string
			sim.SchedulerStats
		}{{"memory", m}, {"store", s}} {
			if st.UnscheduledJobs != 0 || st.AbandonedJobs != 0 || st.UnschedulableTaskDecisions != 0 || st.NoRoomDecisions != 0 ||
				st.PreemptedTasks != 0 || st.Placements != st.Tasks || st.PlacedJobs != st.Jobs || st.DecidedJobs != st.Jobs {
				tb.Errorf("%s in %s: %d unscheduled, %d abandoned, %d unschedulable, %d decisions without room, %d preempted; "+
					"%d placements of %d tasks; %d jobs decided and %d placed of %d",
					st.Name, st.run, st.UnscheduledJobs, st.AbandonedJobs, st.UnschedulableTaskDecisions, st.NoRoomDecisions,
					st.PreemptedTasks, st.Placements, st.Tasks, st.DecidedJobs, st.PlacedJobs, st.Jobs)
			}
		}
		if m.ConflictedPlacementsPerPlacement > 0.1 {
			tb.Errorf("%s in memory: %.2f conflicted placements per placement, want at most 0.1", m.Name, m.ConflictedPlacementsPerPlacement)
		}
		if s.Jobs != m.Jobs || s.Tasks != m.Tasks {
			tb.Errorf("%s: %d jobs, %d tasks in the store; %d, %d in memory", m.Name, s.Jobs, s.Tasks, m.Jobs, m.Tasks)
		}
	}
	return mem, store
}

// The experiment in memory and against an embedded store agrees on what
// does not depend on timing (runBoth says what that is);
// BenchmarkAgainstMemory measures how far the timing-dependent measures
// differ.
func TestAgainstMemory(t *testing.T) { runBoth(t) }

// BenchmarkAgainstMemory reports how far the store run's timing-dependent
// measures are from the in-memory run's: the store, its watches and the
// job controller take milliseconds of wall time that count compress
// times in virtual time, and when decisions run decides what they see.
// Reported as the store's minus memory's (virtual seconds for times;
// decisions summed over the schedulers), as a ratio for busyness, and as
// the store run's largest conflicts per placement of any scheduler;
// deltas and the decisions are means over the runs, the others the
// largest of any run. It fails only as TestAgainstMemory does.
//
//	go test -run '^$' -bench AgainstMemory -benchtime 3x ./tools/sim/storerun
func BenchmarkAgainstMemory(b *testing.B) {
	var durDelta, utilDelta, decisionsDelta, waitP90Delta, busyRatio, conflictFraction float64
	for range b.N {
		mem, store := runBoth(b)
		durDelta += store.DurationSeconds - mem.DurationSeconds
		utilDelta += store.CPUUtilisation - mem.CPUUtilisation
		for i, m := range mem.Schedulers {
			s := store.Schedulers[i]
			decisionsDelta += float64(s.Decisions - m.Decisions)
			waitP90Delta = max(waitP90Delta, s.WaitP90Seconds-m.WaitP90Seconds)
			if m.BusynessFraction > 0 {
				busyRatio = max(busyRatio, s.BusynessFraction/m.BusynessFraction)
			}
			conflictFraction = max(conflictFraction, s.ConflictedPlacementsPerPlacement)
		}
	}
	n := float64(b.N)
	b.ReportMetric(durDelta/n, "duration-delta-s")
	b.ReportMetric(utilDelta/n, "utilisation-delta")
	b.ReportMetric(decisionsDelta/n, "decisions-delta")
	b.ReportMetric(waitP90Delta, "max-wait-p90-delta-s")
	b.ReportMetric(busyRatio, "max-busy-ratio")
	b.ReportMetric(conflictFraction, "max-store-conflict-fraction")
}

// The audit finds counters over a machine's capacity, counters that
// disagree with the tasks bound to their machine, and bound tasks whose
// machine has no counter.
func TestAudit(t *testing.T) {
	ms := memstore.New(time.Now, time.Minute)
	put := func(build func(g *clientlib.Group)) {
		t.Helper()
		tx := clientlib.NewTxn(ms)
		build(tx.Group())
		out, err := tx.Commit(t.Context())
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	task := func(job, machine string) *troupev1.Task {
		return &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, 0), Namespace: namespace},
			Spec:    &troupev1.TaskSpec{Job: job, Template: &troupev1.TaskTemplate{Command: "sim", Requests: map[string]int64{"cpu": 1000}}},
			Binding: &troupev1.TaskBinding{Machine: machine}}
	}
	put(func(g *clientlib.Group) {
		clientlib.PutObject(g, clientlib.Tasks, task("a", "m1"))
		g.Add(clientlib.AllocKey("m1", "cpu"), 1000, 0, 1000)
	})
	capacity := map[string]int64{clientlib.AllocKey("m1", "cpu"): 1000, clientlib.AllocKey("m2", "cpu"): 1000}
	if err := audit(t.Context(), ms, capacity, namespace); err != nil {
		t.Fatalf("a consistent cell: %v", err)
	}
	capacity[clientlib.AllocKey("m1", "cpu")] = 500
	if err := audit(t.Context(), ms, capacity, namespace); err == nil || !strings.Contains(err.Error(), "over the machine's capacity 500") {
		t.Fatalf("over capacity: %v", err)
	}
	put(func(g *clientlib.Group) {
		clientlib.PutObject(g, clientlib.Tasks, task("b", "m2"))
		g.Add(clientlib.AllocKey("m1", "cpu"), -500, 0, 1000)
	})
	err := audit(t.Context(), ms, capacity, namespace)
	for _, want := range []string{"/alloc/m1/cpu is 500, the tasks bound there request 1000", "no counter /alloc/m2/cpu"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("audit says %v, not %q", err, want)
		}
	}
}
