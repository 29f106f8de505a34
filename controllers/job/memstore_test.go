package job_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/cellstore/memstore/memstoretest"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// memCell is an in-memory store with machine m1, an event recorder and
// a job controller over it, for tests that play the scheduler (bind)
// and m1's agent (report) around the controller.
type memCell struct {
	t       *testing.T
	ctx     context.Context
	s       *memstore.Store
	commits *memstoretest.Commits
	ctl     *job.Controller
	machine *troupev1.Machine
	now     func() time.Time
}

func newMemCell(ctx context.Context, t *testing.T, now func() time.Time, queue cache.QueueConfig) *memCell {
	t.Helper()
	s := memstore.New(now, time.Minute)
	c := &memCell{t: t, ctx: ctx, s: s, commits: memstoretest.WatchCommits(s), now: now}
	var err error
	c.machine, err = clientlib.Create(ctx, s, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientlib.DefaultEventRecorderConfig("job-controller")
	cfg.Now = now
	events, err := clientlib.NewEventRecorder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(ctx)
	c.ctl, err = job.New(s, job.Config{Now: now, Logger: zap.NewNop(), Events: events, Workers: 2, Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// until waits, commit by commit, for cond.
func (c *memCell) until(what string, cond func() error) {
	c.t.Helper()
	c.commits.Until(c.ctx, c.t, what, cond)
}

// startCaches starts the controller's caches for a test that syncs the
// queued jobs itself (syncAll), and waits until their watches are open.
func (c *memCell) startCaches() {
	c.t.Helper()
	if err := c.ctl.StartCaches(c.ctx); err != nil {
		c.t.Fatal(err)
	}
	if err := c.s.WaitForWatches(c.ctx, 5); err != nil { // jobs, tasks, runs, quotas, policies
		c.t.Fatal(err)
	}
}

// settle waits until the caches hold every commit so far.
func (c *memCell) settle() {
	c.t.Helper()
	if err := c.s.Quiesce(c.ctx); err != nil {
		c.t.Fatal(err)
	}
}

// syncAll syncs the queued jobs, each from settled caches, until none is
// queued, and checks that the next delayed sync is wantDelayed away by
// the cell's clock (0: none).
func (c *memCell) syncAll(wantDelayed time.Duration) {
	c.t.Helper()
	c.settle()
	c.ctl.Drain(c.ctx, c.settle)
	due, ok := c.ctl.NextDelayed()
	if got := due.Sub(c.now()); ok != (wantDelayed > 0) || ok && got != wantDelayed {
		c.t.Fatalf("next delayed sync in %v (%v), want %v", got, ok, wantDelayed)
	}
}

// check fails the test unless cond holds now.
func (c *memCell) check(what string, cond func() error) {
	c.t.Helper()
	if err := cond(); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

func (c *memCell) tasks(job string) []*troupev1.Task {
	c.t.Helper()
	ts, _, err := clientlib.List(c.ctx, c.s, clientlib.Tasks, "ns/"+job+"/")
	if err != nil {
		c.t.Fatal(err)
	}
	return ts
}

// status is a condition on job's status, in the form "PHASE pending=N
// running=N succeeded=N failed=N retries=N".
func (c *memCell) status(job, want string) func() error {
	return func() error {
		j, err := clientlib.Get(c.ctx, c.s, clientlib.Jobs, "/jobs/ns/"+job)
		if err != nil {
			return err
		}
		st := j.GetStatus()
		if got := fmt.Sprintf("%s pending=%d running=%d succeeded=%d failed=%d retries=%d", strings.TrimPrefix(st.GetPhase().String(), "JOB_PHASE_"),
			st.GetPending(), st.GetRunning(), st.GetSucceeded(), st.GetFailed(), st.GetRetries()); got != want {
			return fmt.Errorf("status %s, want %s", got, want)
		}
		return nil
	}
}

// counter is a condition on m1's cpu counter: the requests of the tasks
// bound to it.
func (c *memCell) counter(want string) func() error {
	return func() error {
		kv, err := c.s.Get(c.ctx, clientlib.AllocKey("m1", "cpu"))
		if got := string(kv.GetValue()); err != nil || got != want {
			return fmt.Errorf("m1's cpu counter %q (%v), want %q", got, err, want)
		}
		return nil
	}
}

// event is a condition: an event of job (or its task involved) with
// reason and a message containing text.
func (c *memCell) event(job, involved, reason, text string) func() error {
	return func() error {
		es, _, err := clientlib.List(c.ctx, c.s, clientlib.Events, "ns/"+job+"/")
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range es {
			if e.GetInvolvedName() == involved && e.GetReason() == reason && strings.Contains(e.GetMessage(), text) {
				return nil
			}
			seen = append(seen, e.GetInvolvedName()+" "+e.GetReason()+": "+e.GetMessage())
		}
		return fmt.Errorf("events: %s", strings.Join(seen, "; "))
	}
}

// bind plays the scheduler (the framework's commit path: the task, its
// Binding and m1's counters): job's tasks at indexes are bound to m1.
func (c *memCell) bind(job string, indexes ...int32) {
	c.t.Helper()
	var fts []*framework.Task
	for _, tk := range c.tasks(job) {
		if slices.Contains(indexes, tk.GetSpec().GetIndex()) {
			key, _ := clientlib.Tasks.Key(tk)
			fts = append(fts, framework.NewTask(key, tk))
		}
	}
	snap := &framework.Snapshot{Machines: []*framework.Machine{{Name: "m1", Object: c.machine, Capacity: c.machine.GetSpec().GetCapacity()}}}
	res, err := framework.CommitPlan(c.ctx, c.s, framework.Schedule(framework.Profile{}, snap, fts), framework.Modes{}, "test", c.now())
	if err != nil || len(res.Committed) != len(indexes) {
		c.t.Fatalf("bind %v: %v %v", indexes, res, err)
	}
}

// report plays m1's agent: the Run of the current attempt of job's task
// index.
func (c *memCell) report(job string, index int32, phase troupev1.RunPhase, exit int32) {
	c.t.Helper()
	tk, err := clientlib.Get(c.ctx, c.s, clientlib.Tasks, fmt.Sprintf("/tasks/ns/%s/%d", job, index))
	if err != nil {
		c.t.Fatal(err)
	}
	run := &troupev1.Run{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskRef("ns", job, index)}, Machine: "m1", Phase: phase,
		ExitCode: exit, Attempt: tk.GetSpec().GetAttempt()}
	if phase != troupev1.RunPhase_RUN_PHASE_RUNNING {
		run.Finished = timestamppb.New(c.now())
	}
	key, _ := clientlib.Runs.Key(run)
	if old, err := clientlib.Get(c.ctx, c.s, clientlib.Runs, key); err == nil {
		run.Metadata = old.GetMetadata()
		_, err = clientlib.Update(c.ctx, c.s, clientlib.Runs, run)
	} else {
		_, err = clientlib.Create(c.ctx, c.s, clientlib.Runs, run)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// The real job controller (informers, work queue, workers, event
// recorder) over the in-memory store, no server: the test plays the
// scheduler and the agent. A batch job's tasks are created in one
// request; a task whose run fails under NEVER is unbound, its machine's
// counter given back, and replaced by its next attempt; once every task
// has succeeded the job has, and the machine is free again. Every wait
// is on the store's commits.
func TestControllerOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newMemCell(ctx, t, time.Now, cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- c.ctl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("controller: %v", err)
		}
	}()

	j := newJob("b", troupev1.JobType_JOB_TYPE_BATCH, 2, 1)
	j.Spec.RestartPolicy = troupev1.RestartPolicy_RESTART_POLICY_NEVER
	if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, j); err != nil {
		t.Fatal(err)
	}
	// The status goes first (a large job shows its counts while its
	// tasks are written), so the tasks are waited for on their own.
	c.until("2 tasks counted", c.status("b", "PENDING pending=2 running=0 succeeded=0 failed=0 retries=0"))
	c.until("2 tasks created", func() error {
		if n := len(c.tasks("b")); n != 2 {
			return fmt.Errorf("%d tasks", n)
		}
		return nil
	})
	ts := c.tasks("b")
	if len(ts) != 2 || ts[0].GetMetadata().GetVersion() != ts[1].GetMetadata().GetVersion() {
		t.Fatalf("tasks %v: want 2, created in one request", ts)
	}
	for _, tk := range ts {
		if sp := tk.GetSpec(); sp.GetAttempt() != 0 || sp.GetScheduler() != "batch" || sp.GetRestartPolicy() != troupev1.RestartPolicy_RESTART_POLICY_NEVER ||
			sp.GetMaxRetries() != 1 || tk.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_PENDING {
			t.Fatalf("created %v", tk)
		}
	}
	c.until("TasksCreated", c.event("b", "b", "TasksCreated", "Created 2 task(s) of 2"))

	c.bind("b", 0, 1)
	c.until("both bound", c.counter("2000"))
	c.report("b", 0, troupev1.RunPhase_RUN_PHASE_RUNNING, 0)
	c.report("b", 1, troupev1.RunPhase_RUN_PHASE_FAILED, 3)
	c.until("task 1 replaced", func() error {
		ts := c.tasks("b")
		if t0, t1 := ts[0], ts[1]; t0.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_RUNNING ||
			t1.GetSpec().GetAttempt() != 1 || t1.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_PENDING || t1.GetBinding() != nil {
			return fmt.Errorf("tasks %v", ts)
		}
		return nil
	})
	c.until("the failed task's resources given back", c.counter("1000"))
	if kv, err := c.s.Get(ctx, "/bindings/m1/ns/b/1"); err != nil || kv != nil {
		t.Fatalf("binding of the failed attempt: %v %v", kv, err)
	}
	c.until("Failed", c.event("b", "b-1", "Failed", "Attempt 0 failed on m1 with exit code 3"))
	c.until("Retrying", c.event("b", "b-1", "Retrying", "Retry 1 of 1 after 0s backoff; attempt 0 failed with exit code 3"))

	c.bind("b", 1)
	c.until("attempt 1 bound", c.counter("2000"))
	c.report("b", 0, troupev1.RunPhase_RUN_PHASE_SUCCEEDED, 0)
	c.report("b", 1, troupev1.RunPhase_RUN_PHASE_SUCCEEDED, 0)
	// The job's retries are not compared here: a sync whose status write
	// conflicts (its job cache behind the status it wrote last) loses the
	// count of the replacements it made. TestSyncsOverMemstore syncs from
	// settled caches, and counts them.
	c.until("the job succeeded", func() error {
		j, err := clientlib.Get(ctx, c.s, clientlib.Jobs, "/jobs/ns/b")
		if st := j.GetStatus(); err != nil || st.GetPhase() != troupev1.JobPhase_JOB_PHASE_SUCCEEDED || st.GetSucceeded() != 2 {
			return fmt.Errorf("job status %v (%v)", st, err)
		}
		return nil
	})
	c.until("m1 free", c.counter("0"))
	c.until("Succeeded", c.event("b", "b", "Succeeded", "All 2 task(s) succeeded"))
}

// The job controller over the in-memory store, step by step on a manual
// clock: the test syncs the queued jobs itself (Drain), each sync from
// caches that hold every commit before it (memstore Quiesce), so every
// step's outcome is exact: the retry back-off is a delayed requeue due
// when the clock reaches it, no sync conflicts (nothing is rate-limited),
// and the job counts its retry.
func TestSyncsOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	clock := cachetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newMemCell(ctx, t, clock.Now, cache.QueueConfig{BaseDelay: time.Second, MaxDelay: time.Minute, Clock: clock})
	c.startCaches()

	j := newJob("r", troupev1.JobType_JOB_TYPE_BATCH, 2, 1)
	j.Spec.RestartPolicy = troupev1.RestartPolicy_RESTART_POLICY_NEVER
	j.Spec.RetryBackoff = durationpb.New(10 * time.Second)
	if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, j); err != nil {
		t.Fatal(err)
	}
	c.syncAll(0)
	c.check("created", c.status("r", "PENDING pending=2 running=0 succeeded=0 failed=0 retries=0"))

	c.bind("r", 0, 1)
	c.report("r", 0, troupev1.RunPhase_RUN_PHASE_RUNNING, 0)
	c.report("r", 1, troupev1.RunPhase_RUN_PHASE_FAILED, 3)
	c.syncAll(10 * time.Second) // the failed task's back-off
	c.check("task 1 failed, waiting for its back-off", c.status("r", "RUNNING pending=0 running=1 succeeded=0 failed=1 retries=0"))
	c.check("task 1 unbound", c.counter("1000"))
	if t1 := c.tasks("r")[1]; t1.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_FAILED || t1.GetStatus().GetExitCode() != 3 ||
		t1.GetStatus().GetMachine() != "m1" || !t1.GetStatus().GetFinished().AsTime().Equal(clock.Now()) {
		t.Fatalf("failed task %v", t1)
	}

	clock.Advance(9 * time.Second)
	c.syncAll(time.Second) // not due yet
	clock.Advance(time.Second)
	c.syncAll(0)
	c.check("task 1 replaced", c.status("r", "RUNNING pending=1 running=1 succeeded=0 failed=0 retries=1"))
	if t1 := c.tasks("r")[1]; t1.GetSpec().GetAttempt() != 1 || t1.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_PENDING ||
		!t1.GetSpec().GetSubmitted().AsTime().Equal(clock.Now()) {
		t.Fatalf("replacement %v", t1)
	}

	c.bind("r", 1)
	clock.Advance(time.Minute)
	c.report("r", 0, troupev1.RunPhase_RUN_PHASE_SUCCEEDED, 0)
	c.report("r", 1, troupev1.RunPhase_RUN_PHASE_SUCCEEDED, 0)
	c.syncAll(0)
	c.check("succeeded", c.status("r", "SUCCEEDED pending=0 running=0 succeeded=2 failed=0 retries=1"))
	c.check("m1 free", c.counter("0"))
	if j, err := clientlib.Get(ctx, c.s, clientlib.Jobs, "/jobs/ns/r"); err != nil || !j.GetStatus().GetFinished().AsTime().Equal(clock.Now()) {
		t.Fatalf("job %v (%v): want finished now", j, err)
	}
	// The events are written in the background.
	for _, e := range [][3]string{
		{"r", "TasksCreated", "Created 2 task(s) of 2"},
		{"r-1", "Failed", "Attempt 0 failed on m1 with exit code 3"},
		{"r-1", "Retrying", "Retry 1 of 1 after 10s backoff; attempt 0 failed with exit code 3"},
		{"r", "Succeeded", "All 2 task(s) succeeded"},
	} {
		c.until(e[1]+" event", c.event("r", e[0], e[1], e[2]))
	}
}
