package storerun

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// prefilledYAML is a small synthetic workload whose cell starts half
// full (as omega-lightweight.yaml starts at 60%): 10 machines of 4
// cores, prefilled with services of 1-core tasks like the service class
// that run for 60 s, then 20 s of batch and service jobs that each end
// within 35 s, the cell below full throughout, so that every task of
// the workload fits at once.
const prefilledYAML = `
seed: 4
horizon_seconds: 20
cell:
  shapes:
    - {name: m, count: 10, cpu_cores: 4, memory_gib: 16}
prefill:
  cpu_utilisation: 0.5
  like: service
  duration_seconds: {dist: fixed, value: 60}
classes:
  - name: batch
    type: batch
    arrival: {process: poisson, interval_seconds: 3}
    tasks: {dist: uniform, min: 1, max: 3}
    duration_seconds: {dist: uniform, min: 5, max: 15}
    cpu_cores: {dist: fixed, value: 0.5}
    memory_gib: {dist: fixed, value: 1}
    priority: {dist: fixed, value: 0}
  - name: service
    type: service
    arrival: {process: fixed, interval_seconds: 10}
    tasks: {dist: fixed, value: 2}
    duration_seconds: {dist: fixed, value: 10}
    cpu_cores: {dist: fixed, value: 1}
    memory_gib: {dist: fixed, value: 2}
    priority: {dist: fixed, value: 100}
`

// prefillConfig is a cell of the given machines with a batch and a
// service scheduler.
func prefillConfig(machines []workload.Machine) sim.Config {
	policy := scheduler.DefaultPolicy(5 * time.Second)
	policy.AbandonAfter = 100
	return sim.Config{Machines: machines, Policy: policy, Seed: 7, Schedulers: []sim.SchedulerConfig{
		{Name: "batch-0", Kind: profiles.Batch, Serves: workload.Batch, Decision: framework.DecisionTime{Job: 100 * time.Millisecond, Task: 10 * time.Millisecond}},
		{Name: "service-0", Kind: profiles.Service, Serves: workload.Service, Decision: framework.DecisionTime{Job: time.Second, Task: 100 * time.Millisecond}},
	}}
}

// TestPrefill: a workload that prefills the cell runs against the store
// as in memory. The prefill places what it places in memory (the same
// seed, the same plan: jobs, tasks, the fraction reached, within one
// task below the target), before the clock starts; its tasks count in
// no scheduler's measures (each scheduler's jobs, tasks and placements
// are the workload's alone, in both runs); they hold the cell's CPU
// until their 60 s are over, counted from virtual time 0 (the run ends
// then, not before, the workload's jobs having ended), and the store is
// audited at the end (Run).
func TestPrefill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prefilled.yaml")
	if err := os.WriteFile(path, []byte(prefilledYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	wc, err := workload.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	src := func() workload.Source {
		g, err := workload.NewGenerator(wc)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	var jobs, tasks int
	for _, j := range drain(t, src()) {
		jobs, tasks = jobs+1, tasks+len(j.Tasks)
	}
	mem, store := bothWays(t, prefillConfig(wc.Cell.Machines()), src)
	p := store.Prefill
	t.Logf("prefill %+v; %d jobs, %d tasks; %.1fs of virtual time, utilisation %.3f/%.3f (memory/store)", p, jobs, tasks,
		store.DurationSeconds, mem.CPUUtilisation, store.CPUUtilisation)
	if p == nil || mem.Prefill == nil || *p != *mem.Prefill {
		t.Fatalf("prefill against the store %+v, in memory %+v: want the same", p, mem.Prefill)
	}
	// 1-core tasks of 40 cores: 20 of them reach 50% exactly.
	if p.Tasks != 20 || p.TargetCPU != 0.5 || p.CPUUtilisation > p.TargetCPU || p.CPUUtilisation <= p.TargetCPU-1.0/40 {
		t.Errorf("prefill %+v: want 20 tasks, within one task below the target 0.5", p)
	}
	var measuredJobs, measuredTasks int
	for i, m := range mem.Schedulers {
		st := store.Schedulers[i]
		measuredJobs, measuredTasks = measuredJobs+st.Jobs, measuredTasks+st.Tasks
		if st.Jobs != m.Jobs || st.Tasks != m.Tasks || st.Placements != st.Tasks || m.Placements != m.Tasks ||
			st.PlacedJobs != st.Jobs || st.UnscheduledJobs != 0 || st.PreemptedTasks != 0 {
			t.Errorf("%s: %+v against the store, %+v in memory: want the workload's jobs and tasks, each placed once", m.Name, st, m)
		}
	}
	if measuredJobs != jobs || measuredTasks != tasks {
		t.Errorf("the schedulers measured %d jobs and %d tasks, the workload has %d and %d: the prefill counts in them",
			measuredJobs, measuredTasks, jobs, tasks)
	}
	if mem.DurationSeconds != 60 || store.DurationSeconds < 60 || store.DurationSeconds > 90 {
		t.Errorf("the runs ended at %.1fs (memory), %.1fs (store): want 60 s, when the prefill's tasks end", mem.DurationSeconds, store.DurationSeconds)
	}
	if store.CPUUtilisation < 0.4 {
		t.Errorf("CPU utilisation %.3f against the store: the prefill's half of the cell is missing", store.CPUUtilisation)
	}
}

// bothWays runs cfg on src's jobs in memory, then against an embedded
// store.
func bothWays(t *testing.T, cfg sim.Config, src func() workload.Source) (mem, store *sim.Stats) {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if mem, err = s.Run(t.Context(), src()); err != nil {
		t.Fatal(err)
	}
	if store, err = (Options{Compress: compress}).Run(t.Context(), cfg, src()); err != nil {
		t.Fatal(err)
	}
	return mem, store
}

// drain reads src to its end.
func drain(t *testing.T, src workload.Source) []workload.Job {
	t.Helper()
	var jobs []workload.Job
	for {
		j, err := src.Next()
		if errors.Is(err, io.EOF) {
			return jobs
		}
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
}

// TestPrefillList: a list prefill (a trace window's running tasks) runs
// against the store as in memory, and its tasks are the cell's like any
// other's. Four machines of 4 cores: the list fills their cores with
// low-priority batch tasks of 1 core that run until the end, one job's
// of two memory shapes (two Jobs in the store), but for a task of 8
// cores that fits nowhere; a production service of two 2-core tasks
// then preempts four of them, which go back to the batch scheduler
// (preempted and decided again, in its measures, though its jobs are
// not). In both runs they are placed again once the service has ended,
// each once, some of them on the machine they were evicted from (where
// the Run their eviction ended, KILLED, of the same attempt, is not the
// new placement's: see job.OfPlacement). Only memory's
// batch placements are checked: against the store the run ends as soon
// as its monitor sees the last of them bound, which can be before the
// batch scheduler has counted the decision that bound it (its commit's
// reply cut off by the run's end), so one placement may go uncounted.
func TestPrefillList(t *testing.T) {
	var machines []workload.Machine
	for i := range 4 {
		machines = append(machines, workload.Machine{Name: fmt.Sprintf("m%d", i), CPU: 4000, Memory: 16 << 30})
	}
	task := func(i int32, cores, gib int64, d time.Duration) workload.Task {
		return workload.Task{Index: i, CPU: cores * 1000, Memory: gib << 30, Duration: d}
	}
	src := func() workload.Source {
		jobs := []workload.Job{{ID: "mixed", Type: workload.Batch, Priority: 10,
			Tasks: []workload.Task{task(0, 1, 1, 0), task(1, 8, 1, 0), task(2, 1, 2, 0), task(3, 1, 1, 0), task(4, 1, 2, 0)}}}
		for j := range 6 {
			jobs = append(jobs, workload.Job{ID: fmt.Sprintf("b%d", j), Type: workload.Batch, Priority: 10,
				Tasks: []workload.Task{task(0, 1, 1, 0), task(1, 1, 1, 0)}})
		}
		web := workload.Job{ID: "web", Submit: 2 * time.Second, Type: workload.Service, Priority: 100,
			Tasks: []workload.Task{task(0, 2, 1, 20*time.Second), task(1, 2, 1, 20*time.Second)}}
		return workload.WithPrefill(workload.FromJobs([]workload.Job{web}), &workload.Prefill{Jobs: workload.FromJobs(jobs)})
	}
	mem, store := bothWays(t, prefillConfig(machines), src)
	t.Logf("prefill %+v; %.1fs of virtual time; store %+v; memory %+v", store.Prefill, store.DurationSeconds, store.Schedulers, mem.Schedulers)
	want := sim.PrefillStats{Jobs: 7, Tasks: 16, NotPlaced: 1, CPUUtilisation: 1, MemoryUtilisation: 18.0 / 64}
	if p := store.Prefill; p == nil || *p != want || mem.Prefill == nil || *mem.Prefill != want {
		t.Fatalf("prefill against the store %+v, in memory %+v: want %+v", p, mem.Prefill, want)
	}
	for _, run := range []struct {
		name string
		*sim.Stats
	}{{"store", store}, {"memory", mem}} {
		batch, service := run.Schedulers[0], run.Schedulers[1]
		if service.Jobs != 1 || service.Placements != 2 || service.PlacedJobs != 1 || service.PreemptedTasks != 0 {
			t.Errorf("service in %s: %+v, want web's 2 tasks placed by preemption", run.name, service)
		}
		if batch.Jobs != 0 || batch.Tasks != 0 || batch.PreemptedTasks != 4 || batch.Decisions == 0 || batch.Placements == 0 ||
			batch.UnscheduledJobs != 0 || batch.DecidedJobs != 0 || batch.PlacedJobs != 0 {
			t.Errorf("batch in %s: %+v, want 4 prefill tasks preempted and decided again, in no job of its measures", run.name, batch)
		}
	}
	for _, run := range []*sim.Stats{store, mem} {
		if b := run.Schedulers[0]; b.Placements != 4 {
			t.Errorf("batch: %d placements, want the 4 preempted tasks placed again once the service has ended (store %+v, memory %+v)",
				b.Placements, store.Schedulers[0], mem.Schedulers[0])
		}
	}
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
