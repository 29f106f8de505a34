package agent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// A cell in one process: store, batch scheduler, job controller, and two
// exec agents running real processes.
func TestBatchJobOfRealProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	lc := clienttest.Start(ctx, t)
	runtimes := map[string]*runtime.Exec{}
	for i := range 2 {
		m := fmt.Sprintf("a%d", i)
		rt := &runtime.Exec{Dir: runtimetest.Dir(t)}
		runtimes[m] = rt
		a, err := agent.New(lc.Client(), agent.Config{Machine: m, Capacity: map[string]int64{"cpu": 2000, "memory": 1 << 30},
			Runtime: rt, LeaseDuration: 10 * time.Second, RenewInterval: time.Second, StopGrace: time.Second,
			RestartBackoff: 10 * time.Millisecond, Now: time.Now, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		go a.Run(ctx)
	}
	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(lc.Client(), scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		Policy: scheduler.Policy{MaxAttempts: 3, Backoff: 50 * time.Millisecond, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	ctl, err := job.New(lc.Client(), job.Config{Now: time.Now, Logger: zap.NewNop(), Queue: cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go ctl.Run(ctx)

	c := lc.Client()
	submit := func(name, script string, count, retries int32, policy troupev1.RestartPolicy) {
		if _, err := clientlib.Create(ctx, c, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: &troupev1.JobSpec{Count: count, MaxRetries: retries, RetryBackoff: durationpb.New(0), RestartPolicy: policy,
				Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", script}, Env: map[string]string{"GREETING": "hello"},
					Requests: map[string]int64{"cpu": 500}}}}); err != nil {
			t.Fatal(err)
		}
	}
	submit("ok", `echo "$GREETING from $TROUPE_TASK"; echo warn >&2`, 6, 0, troupev1.RestartPolicy_RESTART_POLICY_UNSPECIFIED)
	// A failing task is restarted in place by its agent (ON_FAILURE, the
	// batch default), or replaced by the job controller (NEVER).
	submit("bad", `exit 3`, 1, 1, troupev1.RestartPolicy_RESTART_POLICY_UNSPECIFIED)
	submit("worse", `exit 4`, 1, 1, troupev1.RestartPolicy_RESTART_POLICY_NEVER)
	waitPhase := func(name string, want troupev1.JobPhase) *troupev1.Job {
		t.Helper()
		var j *troupev1.Job
		wait.Until(ctx, t, fmt.Sprintf("job %s %v", name, want), func() (bool, string) {
			var err error
			j, err = clientlib.Get(ctx, c, clientlib.Jobs, "/jobs/ns/"+name)
			return err == nil && j.GetStatus().GetPhase() == want, fmt.Sprintf("%v (%v)", j.GetStatus(), err)
		})
		return j
	}
	if j := waitPhase("ok", troupev1.JobPhase_JOB_PHASE_SUCCEEDED); j.GetStatus().GetSucceeded() != 6 {
		t.Fatalf("ok: %v", j.GetStatus())
	}
	// Every task's output is in its log on the machine that ran it.
	tasks, _, err := clientlib.List(ctx, c, clientlib.Tasks, "ns/ok/")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, tk := range tasks {
		ref := clientlib.TaskRef("ns", "ok", tk.GetSpec().GetIndex())
		for _, rt := range runtimes {
			if b, err := os.ReadFile(filepath.Join(rt.TaskDir(ref), "stdout.log")); err == nil {
				if !strings.Contains(string(b), "hello from "+ref) {
					t.Fatalf("stdout of %s: %q", ref, b)
				}
				found++
			}
		}
	}
	if found != 6 {
		t.Fatalf("found the logs of %d tasks, want 6", found)
	}
	for _, f := range []struct {
		job                         string
		exit, attempt, restarts, re int32
	}{{"bad", 3, 0, 1, 0}, {"worse", 4, 1, 0, 1}} {
		j := waitPhase(f.job, troupev1.JobPhase_JOB_PHASE_FAILED)
		tk, err := clientlib.Get(ctx, c, clientlib.Tasks, "/tasks/ns/"+f.job+"/0")
		if err != nil || tk.GetStatus().GetExitCode() != f.exit || tk.GetSpec().GetAttempt() != f.attempt ||
			tk.GetStatus().GetRestarts() != f.restarts || j.GetStatus().GetRetries() != f.re {
			t.Fatalf("%s: failed task %v (%v), job %v; want attempt %d, restarts %d, replacements %d", f.job, tk, err, j.GetStatus(), f.attempt, f.restarts, f.re)
		}
	}
	// Machines are free again.
	for m := range runtimes {
		if kv, _ := c.Get(ctx, clientlib.AllocKey(m, "cpu")); kv != nil && string(kv.GetValue()) != "0" {
			t.Fatalf("%s still has %s cpu allocated", m, kv.GetValue())
		}
	}
}

// A task whose binding goes away is stopped: SIGTERM, then SIGKILL.
func TestExecStop(t *testing.T) {
	rt := &runtime.Exec{Dir: runtimetest.Dir(t)}
	b := &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/j/0"}, Machine: "m",
		Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: "/bin/sh",
			Args: []string{"-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}}}}
	p, err := rt.Start(context.Background(), b, runtime.DefaultTaskUser())
	if err != nil {
		t.Fatal(err)
	}
	// Stop once the task ignores SIGTERM.
	stdout := filepath.Join(rt.TaskDir("ns/j/0"), "stdout.log")
	wait.Until(t.Context(), t, "the task to start", func() (bool, string) {
		out, err := os.ReadFile(stdout)
		return string(out) == "ready\n", fmt.Sprintf("stdout %q (%v)", out, err)
	})
	p.Stop(100 * time.Millisecond)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("process survived SIGKILL")
	}
	if e := p.Exit(); !e.Killed || e.Code != 128+9 {
		t.Fatalf("exit %+v, want killed by SIGKILL", e)
	}
}

// timers stands in for a clock's timer: each After is handed to the test,
// which fires it.
type timers chan timer

type timer struct {
	d    time.Duration
	fire chan time.Time
}

func (ts timers) After(d time.Duration) <-chan time.Time {
	tm := timer{d: d, fire: make(chan time.Time, 1)}
	ts <- tm
	return tm.fire
}

func (ts timers) next(t *testing.T) timer {
	t.Helper()
	select {
	case tm := <-ts:
		return tm
	case <-time.After(10 * time.Second):
		t.Fatal("no timer started")
		return timer{}
	}
}

// An agent restarts a task's process in place as its restart policy says,
// backing off, keeping its Run RUNNING with the restarts counted; a batch
// task gives up after max_retries - attempt restarts and its Run fails; a
// task stopped in its back-off is not restarted. Simulated tasks; the
// runs' ends and the back-offs are fired by the test.
func TestRestartInPlace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c := clienttest.Start(ctx, t).Client()
	runs, backoffs := make(timers, 16), make(timers, 16)
	a, err := agent.New(c, agent.Config{Machine: "m", Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}, Runtime: &runtime.Sim{After: runs.After},
		LeaseDuration: 10 * time.Second, RenewInterval: time.Second, StopGrace: time.Second, After: backoffs.After, Now: time.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := a.Run(ctx); ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
	}()
	bind := func(job string, spec *troupev1.TaskSpec) *troupev1.Binding {
		spec.Job, spec.Template.Command = job, "x"
		b, err := clientlib.Create(ctx, c, clientlib.Bindings, &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/" + job + "/0"}, Machine: "m", Task: spec})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	run := func(job string) *troupev1.Run {
		r, err := clientlib.Get(ctx, c, clientlib.Runs, "/runs/m/ns/"+job+"/0")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	waitRun := func(job string, phase troupev1.RunPhase) *troupev1.Run {
		t.Helper()
		var r *troupev1.Run
		wait.Until(ctx, t, fmt.Sprintf("run of %s %v", job, phase), func() (bool, string) {
			var err error
			r, err = clientlib.Get(ctx, c, clientlib.Runs, "/runs/m/ns/"+job+"/0")
			return err == nil && r.GetPhase() == phase, fmt.Sprintf("%v (%v)", r, err)
		})
		return r
	}

	// A batch task failing every time, attempt 1 of max_retries 3: two
	// restarts, 200 ms then 400 ms after its retry_backoff.
	bind("crash", &troupev1.TaskSpec{Type: troupev1.JobType_JOB_TYPE_BATCH, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE,
		MaxRetries: 3, Attempt: 1, RetryBackoff: durationpb.New(200 * time.Millisecond), Template: &troupev1.TaskTemplate{SimExitCode: 3}})
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		runs.next(t).fire <- time.Time{} // the process exits 3
		b := backoffs.next(t)
		// The back-off is reported before it starts.
		if r := run("crash"); b.d != want || r.GetPhase() != troupev1.RunPhase_RUN_PHASE_RUNNING || r.GetRestarts() != int32(i+1) ||
			r.GetExitCode() != 3 || !strings.Contains(r.GetReason(), "back-off") || r.GetAttempt() != 1 {
			t.Fatalf("restart %d: back-off %v (want %v), run %v", i+1, b.d, want, r)
		}
		b.fire <- time.Time{}
	}
	runs.next(t).fire <- time.Time{}
	if r := waitRun("crash", troupev1.RunPhase_RUN_PHASE_FAILED); r.GetRestarts() != 2 || r.GetExitCode() != 3 || r.GetFinished() == nil {
		t.Fatalf("given up: %v", r)
	}

	// A service that exits 0 is restarted too (ALWAYS); stopped in its
	// back-off, it is not restarted.
	web := bind("web", &troupev1.TaskSpec{Type: troupev1.JobType_JOB_TYPE_SERVICE, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ALWAYS,
		Template: &troupev1.TaskTemplate{}})
	runs.next(t).fire <- time.Time{}
	if b := backoffs.next(t); b.d != time.Second {
		t.Fatalf("default back-off %v", b.d)
	}
	if err := clientlib.Delete(ctx, c, clientlib.Bindings, web); err != nil {
		t.Fatal(err)
	}
	if r := waitRun("web", troupev1.RunPhase_RUN_PHASE_KILLED); r.GetRestarts() != 1 {
		t.Fatalf("stopped in back-off: %v", r)
	}
	select {
	case tm := <-runs:
		t.Fatalf("a stopped task was started again (%v)", tm.d)
	default:
	}
}
