package agent_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/cellstore/memstore/memstoretest"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/controllers/job"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// nextTimer waits for the code under test to start a timer of ts.
func nextTimer(ctx context.Context, t *testing.T, ts timers) timer {
	t.Helper()
	select {
	case tm := <-ts:
		return tm
	case <-ctx.Done():
		t.Fatalf("no timer started: %v", ctx.Err())
		return timer{}
	}
}

// An agent over the in-memory store, no server, with the simulated
// runtime whose runs end when the test fires their timers: it registers
// its machine and lease, runs what is bound to it and reports each run:
// RUNNING, then SUCCEEDED or FAILED with the exit; a task whose binding
// goes away is stopped and reported KILLED. Every wait is on the store's
// commits or on the runtime's timers.
func TestAgentOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := memstore.New(time.Now, time.Minute)
	commits := memstoretest.WatchCommits(s)
	runs := make(timers, 16)
	a, err := agent.New(s, agent.Config{Machine: "m", Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}, Labels: map[string]string{"zone": "a"},
		Runtime: &runtime.Sim{After: runs.After}, LeaseDuration: 2 * time.Hour, RenewInterval: time.Hour, StopGrace: time.Second,
		Now: time.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	commits.Until(ctx, t, "machine m registered with its lease", func() error {
		m, err := clientlib.Get(ctx, s, clientlib.Machines, "/machines/m")
		if err != nil {
			return err
		}
		if m.GetSpec().GetCapacity()["cpu"] != 1000 || m.GetMetadata().GetLabels()["zone"] != "a" ||
			m.GetStatus().GetPhase() != troupev1.MachinePhase_MACHINE_PHASE_READY {
			return fmt.Errorf("machine %v", m)
		}
		l, err := clientlib.Get(ctx, s, clientlib.Leases, "/leases/m")
		if err != nil {
			return err
		}
		if l.GetHolder() != "agent/m" || l.GetDuration().AsDuration() != 2*time.Hour {
			return fmt.Errorf("lease %v", l)
		}
		return nil
	})
	bind := func(job string, spec *troupev1.TaskSpec) *troupev1.Binding {
		t.Helper()
		spec.Job = job
		spec.Template.Command = "x"
		b, err := clientlib.Create(ctx, s, clientlib.Bindings, &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/" + job + "/0"}, Machine: "m", Task: spec})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	run := func(job string, want func(r *troupev1.Run) bool) *troupev1.Run {
		t.Helper()
		var r *troupev1.Run
		commits.Until(ctx, t, "run of "+job, func() error {
			var err error
			if r, err = clientlib.Get(ctx, s, clientlib.Runs, "/runs/m/ns/"+job+"/0"); err != nil {
				return err
			}
			if !want(r) {
				return fmt.Errorf("run %v", r)
			}
			return nil
		})
		return r
	}
	phase := func(p troupev1.RunPhase) func(*troupev1.Run) bool {
		return func(r *troupev1.Run) bool { return r.GetPhase() == p }
	}

	// A task that succeeds: RUNNING once its process runs, then SUCCEEDED.
	bind("ok", &troupev1.TaskSpec{Type: troupev1.JobType_JOB_TYPE_BATCH, Attempt: 2, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_NEVER,
		Template: &troupev1.TaskTemplate{}})
	end := nextTimer(ctx, t, runs)
	if r := run("ok", phase(troupev1.RunPhase_RUN_PHASE_RUNNING)); r.GetAttempt() != 2 || r.GetMachine() != "m" || r.GetStarted() == nil || r.GetFinished() != nil {
		t.Fatalf("running: %v", r)
	}
	end.fire <- time.Time{}
	if r := run("ok", phase(troupev1.RunPhase_RUN_PHASE_SUCCEEDED)); r.GetExitCode() != 0 || r.GetReason() != "completed" || r.GetFinished() == nil ||
		r.GetAttempt() != 2 {
		t.Fatalf("succeeded: %v", r)
	}

	// A task that fails, not restarted in place (NEVER): FAILED with its
	// exit at once.
	bind("bad", &troupev1.TaskSpec{Type: troupev1.JobType_JOB_TYPE_BATCH, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_NEVER,
		MaxRetries: 3, RetryBackoff: durationpb.New(time.Second), Template: &troupev1.TaskTemplate{SimExitCode: 3}})
	nextTimer(ctx, t, runs).fire <- time.Time{}
	if r := run("bad", phase(troupev1.RunPhase_RUN_PHASE_FAILED)); r.GetExitCode() != 3 || r.GetReason() != "exit status 3" || r.GetRestarts() != 0 {
		t.Fatalf("failed: %v", r)
	}

	// A service whose binding goes away while it runs is stopped: KILLED.
	web := bind("web", &troupev1.TaskSpec{Type: troupev1.JobType_JOB_TYPE_SERVICE, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ALWAYS,
		Template: &troupev1.TaskTemplate{}})
	nextTimer(ctx, t, runs) // started; never fired
	run("web", phase(troupev1.RunPhase_RUN_PHASE_RUNNING))
	if err := clientlib.Delete(ctx, s, clientlib.Bindings, web); err != nil {
		t.Fatal(err)
	}
	if r := run("web", phase(troupev1.RunPhase_RUN_PHASE_KILLED)); r.GetReason() != "stopped" || r.GetRestarts() != 0 {
		t.Fatalf("stopped: %v", r)
	}
	select {
	case tm := <-runs:
		t.Fatalf("a stopped task was started again (%v)", tm.d)
	default:
	}
}

// A task placed again on the machine, with the same attempt (a preempted
// task keeps its attempt), is a new placement: the agent runs it again,
// after the evicted placement has ended, and each Run names its placement
// by its binding's bound_at, so that the job controller never takes the
// evicted placement's for the new one's. A binding that changes to
// another placement without a deletion seen in between (a cache that
// relisted) replaces the placement it runs too; the replaced one reports
// nothing more. Every wait is on the store's commits or the runtime's
// timers.
func TestPlacedAgainOnTheSameMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := memstore.New(time.Now, time.Minute)
	commits := memstoretest.WatchCommits(s)
	runs := make(timers, 16)
	a, err := agent.New(s, agent.Config{Machine: "m", Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30},
		Runtime: &runtime.Sim{After: runs.After}, LeaseDuration: 2 * time.Hour, RenewInterval: time.Hour, StopGrace: time.Second,
		Now: time.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	binding := func(boundAt time.Duration) *troupev1.Binding {
		return &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/p/0"}, Machine: "m", BoundAt: timestamppb.New(epoch.Add(boundAt)),
			Task: &troupev1.TaskSpec{Job: "p", Type: troupev1.JobType_JOB_TYPE_BATCH, Template: &troupev1.TaskTemplate{Command: "x"}}}
	}
	run := func(what string, boundAt time.Duration, phase troupev1.RunPhase) {
		t.Helper()
		commits.Until(ctx, t, what, func() error {
			r, err := clientlib.Get(ctx, s, clientlib.Runs, "/runs/m/ns/p/0")
			if err != nil {
				return err
			}
			if !r.GetBoundAt().AsTime().Equal(epoch.Add(boundAt)) || r.GetPhase() != phase || r.GetAttempt() != 0 {
				return fmt.Errorf("run %v", r)
			}
			return nil
		})
	}

	// Placed at +0s, evicted: KILLED.
	b, err := clientlib.Create(ctx, s, clientlib.Bindings, binding(0))
	if err != nil {
		t.Fatal(err)
	}
	nextTimer(ctx, t, runs)
	run("the first placement runs", 0, troupev1.RunPhase_RUN_PHASE_RUNNING)
	if err := clientlib.Delete(ctx, s, clientlib.Bindings, b); err != nil {
		t.Fatal(err)
	}
	run("the first placement killed", 0, troupev1.RunPhase_RUN_PHASE_KILLED)

	// Placed again at +1s, the same attempt: it runs again.
	b, err = clientlib.Create(ctx, s, clientlib.Bindings, binding(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nextTimer(ctx, t, runs)
	run("the second placement runs", time.Second, troupev1.RunPhase_RUN_PHASE_RUNNING)

	// The binding becomes a third placement, at +2s, in one write: the
	// second is stopped and the third runs, to its end.
	next := binding(2 * time.Second)
	next.Metadata = b.GetMetadata()
	if _, err := clientlib.Update(ctx, s, clientlib.Bindings, next); err != nil {
		t.Fatal(err)
	}
	end := nextTimer(ctx, t, runs)
	run("the third placement runs", 2*time.Second, troupev1.RunPhase_RUN_PHASE_RUNNING)
	end.fire <- time.Time{}
	run("the third placement succeeded", 2*time.Second, troupev1.RunPhase_RUN_PHASE_SUCCEEDED)
	select {
	case tm := <-runs:
		t.Fatalf("a placement was started again (%v)", tm.d)
	default:
	}
}

// A cell without a server: the in-memory store, the batch scheduler, the
// job controller and two agents with the simulated runtime. A batch job
// runs to completion; the machines are free again. Every wait is on the
// store's commits.
func TestBatchJobOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := memstore.New(time.Now, time.Minute)
	commits := memstoretest.WatchCommits(s)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range 2 {
		a, err := agent.New(s, agent.Config{Machine: fmt.Sprintf("a%d", i), Capacity: map[string]int64{"cpu": 2000, "memory": 1 << 30},
			Runtime: &runtime.Sim{}, LeaseDuration: 2 * time.Hour, RenewInterval: time.Hour, StopGrace: time.Second,
			Now: time.Now, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { a.Run(ctx) })
	}
	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(s, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		Policy: scheduler.Policy{MaxAttempts: 3, Backoff: 50 * time.Millisecond, RetryBase: 5 * time.Millisecond, RetryMax: time.Second}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { sched.Run(ctx) })
	ctl, err := job.New(s, job.Config{Now: time.Now, Logger: zap.NewNop(), Queue: cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { ctl.Run(ctx) })

	if _, err := clientlib.Create(ctx, s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "sim", Namespace: "ns"},
		Spec: &troupev1.JobSpec{Count: 6, Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 500}}}}); err != nil {
		t.Fatal(err)
	}
	commits.Until(ctx, t, "the job succeeded", func() error {
		j, err := clientlib.Get(ctx, s, clientlib.Jobs, "/jobs/ns/sim")
		if st := j.GetStatus(); err != nil || st.GetPhase() != troupev1.JobPhase_JOB_PHASE_SUCCEEDED || st.GetSucceeded() != 6 {
			return fmt.Errorf("job %v (%v)", st, err)
		}
		return nil
	})
	tasks, _, err := clientlib.List(ctx, s, clientlib.Tasks, "ns/sim/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if st := tk.GetStatus(); st.GetPhase() != troupev1.TaskPhase_TASK_PHASE_SUCCEEDED || tk.GetBinding() != nil || st.GetReason() != "completed" ||
			(st.GetMachine() != "a0" && st.GetMachine() != "a1") {
			t.Fatalf("task %v", tk)
		}
	}
	commits.Until(ctx, t, "machines free", func() error {
		for _, m := range []string{"a0", "a1"} {
			if kv, err := s.Get(ctx, clientlib.AllocKey(m, "cpu")); err != nil || kv != nil && string(kv.GetValue()) != "0" {
				return fmt.Errorf("%s: %v %v", m, kv, err)
			}
		}
		return nil
	})
}

// Deleting a job while its tasks are being placed and started stops its
// work at once: from the deletion's commit on, no task of it is created,
// bound or started (no new Binding, no first RUNNING report, which an
// agent commits before it starts a process, on condition that the job
// still runs); its running tasks are killed and its tasks deleted, and the
// machines' capacity comes back.
func TestDeleteStopsAJobBeingPlaced(t *testing.T) {
	cleanup := endWhilePlacing(t, inMemory(t), 20_000, 20, deleteJob)
	t.Logf("cleanup of 20,000 tasks took %v", cleanup)
}

// Stopping a job (troupe job stop) while its tasks are being placed and
// started stops its work as its deletion does: from the stop's commit
// on, no task of it is created, bound or started; its running tasks are
// killed, its tasks kept, stopped, and the machines' capacity comes back.
func TestStopStopsAJobBeingPlaced(t *testing.T) {
	cleanup := endWhilePlacing(t, inMemory(t), 20_000, 20, stopJob)
	t.Logf("stopping 20,000 tasks took %v", cleanup)
}

// BenchmarkDeleteLargeJob measures how long the cleanup of a 100,000-task
// job takes, from the deletion's commit until its tasks are deleted and
// its machines' counters are back to zero: over the in-memory store, and
// over a one-node store served over TLS in this process (its fsync is
// this machine's).
//
//	go test -run '^$' -bench DeleteLargeJob -benchtime 3x ./agents/agent
func BenchmarkDeleteLargeJob(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(testing.TB) followed
	}{{"memory", inMemory}, {"store", inAStore}} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += endWhilePlacing(b, c.open(b), 100_000, 50, deleteJob)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "cleanup-s")
		})
	}
}

// followed is a store and how to follow its commits in order.
type followed struct {
	clientlib.Store
	follow func(ctx context.Context, observe func(*storev1.ChangeSet))
}

func inMemory(testing.TB) followed {
	s := memstore.New(time.Now, time.Minute)
	return followed{s, func(_ context.Context, observe func(*storev1.ChangeSet)) { s.Observe(observe) }}
}

// inAStore is a one-node store in this process, followed by a watch of
// every key.
func inAStore(tb testing.TB) followed {
	c := clienttest.Start(tb.Context(), tb).Client()
	return followed{c, func(ctx context.Context, observe func(*storev1.ChangeSet)) {
		w := c.Watch(ctx, "", nil)
		go func() {
			for {
				resp, err := w.Next()
				if err != nil {
					return
				}
				observe(&storev1.ChangeSet{Events: resp.GetEvents()})
			}
		}()
	}}
}

// An ending is how a test ends a job while it is being placed.
type ending struct {
	name string
	// keeps: the job's tasks stay, ended (stopped), rather than being
	// deleted.
	keeps bool
	end   func(ctx context.Context, s clientlib.Store, j *troupev1.Job) error
}

var (
	// deleteJob deletes the job, whatever its status says now.
	deleteJob = ending{name: "deletion", end: func(ctx context.Context, s clientlib.Store, j *troupev1.Job) error {
		j.Metadata.Version = 0
		return clientlib.Delete(ctx, s, clientlib.Jobs, j)
	}}
	// stopJob marks the job stopped, as troupe job stop does: read, set,
	// update, again when the job controller's status write came between.
	stopJob = ending{name: "stop", keeps: true, end: func(ctx context.Context, s clientlib.Store, j *troupev1.Job) error {
		key, err := clientlib.Jobs.Key(j)
		if err != nil {
			return err
		}
		for {
			cur, err := clientlib.Get(ctx, s, clientlib.Jobs, key)
			if err != nil {
				return err
			}
			cur.Spec.Stopped = true
			_, err = clientlib.Update(ctx, s, clientlib.Jobs, cur)
			if ce := (*clientlib.ConflictError)(nil); !errors.As(err, &ce) {
				return err
			}
		}
	}}
)

// endWhilePlacing runs a job of count tiny tasks on machines sim agents
// with the scheduler and the job controller over memstore (the cell's
// job limits raised to let it in), checks that its status counts every
// task once a tenth of them are bound, ends it then (deletes or stops
// it), checks that nothing of it is created, bound or started after
// that, and returns how long the cleanup took: until its tasks are
// deleted (or stopped) and its machines free.
func endWhilePlacing(tb testing.TB, fs followed, count, machines int, e ending) time.Duration {
	ctx, cancel := context.WithTimeout(tb.Context(), 5*time.Minute)
	defer cancel()
	s := fs.Store
	w := &jobWatch{follower: newFollower(), tasks: map[string]bool{}, started: map[string]bool{}, alloc: map[string]int64{}}
	fs.follow(ctx, w.observe)
	// The job controller holds jobs to the cell's job limits
	// (DefaultJobLimits: 10,000 tasks); this cell allows more.
	if _, err := clientlib.Create(ctx, s, clientlib.ValidationPolicies, &troupev1.ValidationPolicy{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.JobLimitsPolicy},
		Spec: &troupev1.ValidationPolicySpec{Kinds: []string{clientlib.Jobs.Name}, Rules: []*troupev1.ValidationRule{{
			Expression: fmt.Sprintf("object.spec.count <= %d", count), FieldPath: "spec.count"}}},
	}); err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range machines {
		a, err := agent.New(s, agent.Config{Machine: fmt.Sprintf("a%d", i), Capacity: map[string]int64{"cpu": 1 << 40, "memory": 1 << 50},
			Runtime: &runtime.Sim{DefaultDuration: time.Hour}, LeaseDuration: 2 * time.Hour, RenewInterval: time.Hour, StopGrace: time.Second,
			Now: time.Now, Logger: zap.NewNop()})
		if err != nil {
			tb.Fatal(err)
		}
		wg.Go(func() { a.Run(ctx) })
	}
	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		tb.Fatal(err)
	}
	sched, err := scheduler.New(s, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		Policy: scheduler.DefaultPolicy(50 * time.Millisecond), Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() { sched.Run(ctx) })
	ctl, err := job.New(s, job.Config{Now: time.Now, Logger: zap.NewNop(), Queue: cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond}})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() { ctl.Run(ctx) })

	big, err := clientlib.Create(ctx, s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "big", Namespace: "ns"},
		Spec: &troupev1.JobSpec{Count: int32(count), Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 1, "memory": 1}}}})
	if err != nil {
		tb.Fatal(err)
	}
	w.until(ctx, tb, "a tenth of the tasks bound", func() error {
		if w.bindings < count/10 {
			return fmt.Errorf("%d bound", w.bindings)
		}
		return nil
	})
	// Its status counts every task while they are still being created
	// and placed: the job controller writes it before the tasks.
	if j, err := clientlib.Get(ctx, s, clientlib.Jobs, "/jobs/ns/big"); err != nil ||
		j.GetStatus().GetPending()+j.GetStatus().GetRunning() != int32(count) {
		tb.Fatalf("status of the job being placed: %v (%v), want its %d tasks counted", j.GetStatus(), err, count)
	}
	if err := e.end(ctx, s, big); err != nil {
		tb.Fatal(err)
	}
	ended := time.Now()
	what := "the job's tasks deleted and its machines free"
	if e.keeps {
		what = "the job's tasks stopped and its machines free"
	}
	w.until(ctx, tb, what, func() error {
		allocated := int64(0)
		for _, v := range w.alloc {
			allocated += v
		}
		tasks := len(w.tasks)
		if e.keeps {
			tasks = w.live()
		}
		if tasks > 0 || w.bindings > 0 || allocated > 0 {
			return fmt.Errorf("%d tasks, %d bindings, %dm cpu allocated", tasks, w.bindings, allocated)
		}
		return nil
	})
	cleanup := time.Since(ended)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		tb.Fatalf("after the %s: %d violations, first %v", e.name, len(w.violations), w.violations[:min(5, len(w.violations))])
	}
	if w.killed == 0 {
		tb.Errorf("no running task was killed: the job's %s came before any started", e.name)
	}
	if e.keeps && len(w.tasks) < count/10 {
		tb.Errorf("%d tasks kept, want at least the %d bound before the %s", len(w.tasks), count/10, e.name)
	}
	return cleanup
}

// follower wakes those waiting for a condition on what its embedder
// follows, which it keeps under mu, at every commit it is told of.
type follower struct {
	mu   sync.Mutex
	next chan struct{} // closed by the next commit
}

func newFollower() follower { return follower{next: make(chan struct{})} }

// committed, with mu held, wakes the waiters: a commit was followed.
func (f *follower) committed() {
	close(f.next)
	f.next = make(chan struct{})
}

// until returns once cond, called with mu held, holds, looking at it now
// and after each commit; it fails the test if ctx ends first.
func (f *follower) until(ctx context.Context, tb testing.TB, what string, cond func() error) {
	tb.Helper()
	for {
		f.mu.Lock()
		next, err := f.next, cond()
		f.mu.Unlock()
		if err == nil {
			return
		}
		select {
		case <-next:
		case <-ctx.Done():
			tb.Fatalf("waiting for %s: %v (%v)", what, err, ctx.Err())
		}
	}
}

// jobWatch follows a memstore's commits of job ns/big: its tasks and
// bindings, the CPU allocated, and from its stop or deletion on (its
// stop key set), every creation, binding or first start of one of its
// tasks (violations).
type jobWatch struct {
	follower
	stopped    bool
	tasks      map[string]bool  // task keys: whether the task has not ended
	started    map[string]bool  // runs reported RUNNING
	alloc      map[string]int64 // cpu counters
	bindings   int
	killed     int
	violations []string
}

func (w *jobWatch) observe(cs *storev1.ChangeSet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.committed()
	for _, ev := range cs.GetEvents() {
		kv, put := ev.GetKv(), ev.GetType() == storev1.EventType_EVENT_TYPE_PUT
		switch k := kv.GetKey(); {
		case k == clientlib.JobStopKey("ns", "big") && put && string(kv.GetValue()) == "1":
			w.stopped = true // stopped or deleted: the same commit
		case strings.HasPrefix(k, "/tasks/ns/big/"):
			if _, known := w.tasks[k]; put && !known && w.stopped {
				w.violations = append(w.violations, "created "+k)
			}
			if !put {
				delete(w.tasks, k)
				continue
			}
			// Its tasks run for an hour: none ends before the stop.
			live := true
			if w.stopped {
				t, err := clientlib.Decode(clientlib.Tasks, kv.GetValue(), kv.GetVersion())
				live = err != nil || !ended(t)
			}
			w.tasks[k] = live
		case strings.HasPrefix(k, clientlib.Bindings.Prefix):
			if put {
				w.bindings++
				if w.stopped {
					w.violations = append(w.violations, "bound "+k)
				}
			} else {
				w.bindings--
			}
		case strings.HasPrefix(k, clientlib.AllocPrefix) && strings.HasSuffix(k, "/cpu"):
			if c, err := clientlib.DecodeCounter(k, kv.GetValue(), kv.GetVersion()); err == nil {
				w.alloc[k] = c.GetValue()
			}
		case strings.HasPrefix(k, clientlib.Runs.Prefix) && put:
			run, err := clientlib.Decode(clientlib.Runs, kv.GetValue(), kv.GetVersion())
			if err != nil {
				continue
			}
			switch run.GetPhase() {
			case troupev1.RunPhase_RUN_PHASE_RUNNING:
				if !w.started[k] && w.stopped {
					w.violations = append(w.violations, "started "+k)
				}
				w.started[k] = true
			case troupev1.RunPhase_RUN_PHASE_KILLED:
				w.killed++
			}
		}
	}
}

// live counts the job's tasks that have not ended; w.mu is held.
func (w *jobWatch) live() int {
	n := 0
	for _, l := range w.tasks {
		if l {
			n++
		}
	}
	return n
}

// ended reports whether t is in a final phase.
func ended(t *troupev1.Task) bool {
	switch t.GetStatus().GetPhase() {
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED,
		troupev1.TaskPhase_TASK_PHASE_STOPPED, troupev1.TaskPhase_TASK_PHASE_LOST:
		return true
	}
	return false
}
