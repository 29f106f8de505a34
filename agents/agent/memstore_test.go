package agent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/controllers/job"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// commits wakes a test at every commit to a memstore, so that it waits
// for a condition on the store's contents without sleeping or polling:
// the contents change only by commits.
type commits struct {
	mu   sync.Mutex
	next chan struct{} // closed by the next commit
}

func watchCommits(s *memstore.Store) *commits {
	c := &commits{next: make(chan struct{})}
	s.Observe(func(*storev1.ChangeSet) {
		c.mu.Lock()
		defer c.mu.Unlock()
		close(c.next)
		c.next = make(chan struct{})
	})
	return c
}

// until returns once cond holds, looking at it now and after each
// commit; it fails the test with what cond saw last if ctx ends first.
func (c *commits) until(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	for {
		c.mu.Lock()
		next := c.next
		c.mu.Unlock()
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-next:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (%v)", what, err, ctx.Err())
		}
	}
}

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
	commits := watchCommits(s)
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

	commits.until(ctx, t, "machine m registered with its lease", func() error {
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
		commits.until(ctx, t, "run of "+job, func() error {
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

// A cell without a server: the in-memory store, the batch scheduler, the
// job controller and two agents with the simulated runtime. A batch job
// runs to completion; the machines are free again. Every wait is on the
// store's commits.
func TestBatchJobOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := memstore.New(time.Now, time.Minute)
	commits := watchCommits(s)
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
	commits.until(ctx, t, "the job succeeded", func() error {
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
	commits.until(ctx, t, "machines free", func() error {
		for _, m := range []string{"a0", "a1"} {
			if kv, err := s.Get(ctx, clientlib.AllocKey(m, "cpu")); err != nil || kv != nil && string(kv.GetValue()) != "0" {
				return fmt.Errorf("%s: %v %v", m, kv, err)
			}
		}
		return nil
	})
}
