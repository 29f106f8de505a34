package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// storeLog follows a memstore's commits: every value written to each Run
// of machine m, in order, and m's events.
type storeLog struct {
	follower
	runs   map[string][]*troupev1.Run // by task ref
	events map[string]*troupev1.Event // by key
}

func (l *storeLog) observe(cs *storev1.ChangeSet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.committed()
	for _, ev := range cs.GetEvents() {
		kv := ev.GetKv()
		if ev.GetType() != storev1.EventType_EVENT_TYPE_PUT {
			continue
		}
		if ref, ok := strings.CutPrefix(kv.GetKey(), clientlib.Runs.Prefix+"m/"); ok {
			if r, err := clientlib.Decode(clientlib.Runs, kv.GetValue(), kv.GetVersion()); err == nil {
				l.runs[ref] = append(l.runs[ref], r)
			}
		}
		if strings.HasPrefix(kv.GetKey(), clientlib.MachineEvents.Prefix+"m/") {
			if e, err := clientlib.Decode(clientlib.MachineEvents, kv.GetValue(), kv.GetVersion()); err == nil {
				l.events[kv.GetKey()] = e
			}
		}
	}
}

// healthCell is an agent of machine m over the in-memory store, running
// its tasks with rt, its timers (restart back-offs, health check
// intervals) fired by the test, its events recorded; every Run it writes
// is logged.
type healthCell struct {
	ctx    context.Context
	s      *memstore.Store
	timers timers
	events *clientlib.EventRecorder
	log    *storeLog
}

func startHealthCell(t *testing.T, rt runtime.Runtime) *healthCell {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	c := &healthCell{ctx: ctx, s: memstore.New(time.Now, time.Minute), timers: make(timers, 16),
		log: &storeLog{follower: newFollower(), runs: map[string][]*troupev1.Run{}, events: map[string]*troupev1.Event{}}}
	c.s.Observe(c.log.observe)
	events, err := clientlib.NewEventRecorder(c.s, clientlib.DefaultEventRecorderConfig("agent"))
	if err != nil {
		t.Fatal(err)
	}
	c.events = events
	a, err := agent.New(c.s, agent.Config{Machine: "m", Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}, Runtime: rt, Events: events,
		LeaseDuration: 2 * time.Hour, RenewInterval: time.Hour, StopGrace: time.Second, After: c.timers.After, Now: time.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { events.Run(ctx) })
	wg.Go(func() { a.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return c
}

// bind binds task ns/<job>/0, a service restarted ALWAYS after a minute's
// back-off, to m.
func (c *healthCell) bind(t *testing.T, job string, tmpl *troupev1.TaskTemplate) string {
	t.Helper()
	ref := clientlib.TaskRef("ns", job, 0)
	if _, err := clientlib.Create(c.ctx, c.s, clientlib.Bindings, &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: ref}, Machine: "m",
		Task: &troupev1.TaskSpec{Job: job, Type: troupev1.JobType_JOB_TYPE_SERVICE, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ALWAYS,
			RetryBackoff: durationpb.New(time.Minute), Template: tmpl}}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// next waits for the agent's next timer: of a task's next health check,
// once its last one has ended and been reported (or of a restart's
// back-off). It fails the test unless it lasts d.
func (c *healthCell) next(t *testing.T, d time.Duration) timer {
	t.Helper()
	tm := nextTimer(c.ctx, t, c.timers)
	if tm.d != d {
		t.Fatalf("the agent's next timer is of %v, want %v", tm.d, d)
	}
	return tm
}

// runs is what the agent wrote of ref's Run: its healthy field in each
// write, and the last write.
func (c *healthCell) runs(ref string) ([]bool, *troupev1.Run) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	var healthy []bool
	var last *troupev1.Run
	for _, r := range c.log.runs[ref] {
		healthy, last = append(healthy, r.GetHealthy()), r
	}
	return healthy, last
}

// wantRuns fails the test unless the agent wrote ref's Run once per
// element of healthy, each RUNNING with that health; it returns the last
// write.
func (c *healthCell) wantRuns(t *testing.T, ref string, healthy ...bool) *troupev1.Run {
	t.Helper()
	got, last := c.runs(ref)
	if !slices.Equal(got, healthy) || last.GetPhase() != troupev1.RunPhase_RUN_PHASE_RUNNING {
		t.Fatalf("writes of the run of %s: healthy %v, last %v; want healthy %v, RUNNING", ref, got, last, healthy)
	}
	return last
}

// untilHealthy fires the checks of ref until the last one passed, and
// returns the timer of the next.
func (c *healthCell) untilHealthy(t *testing.T, ref string) timer {
	t.Helper()
	tm := c.next(t, checkInterval)
	for _, last := c.runs(ref); !last.GetHealthy(); _, last = c.runs(ref) {
		tm.fire <- time.Time{}
		tm = c.next(t, checkInterval)
	}
	return tm
}

// untilRuns waits until the agent wrote ref's Run with healthy, in order.
func (c *healthCell) untilRuns(t *testing.T, ref string, healthy ...bool) {
	t.Helper()
	c.log.until(c.ctx, t, "the writes of the run of "+ref, func() error {
		var got []bool
		for _, r := range c.log.runs[ref] {
			got = append(got, r.GetHealthy())
		}
		if !slices.Equal(got, healthy) {
			return fmt.Errorf("healthy %v, want %v", got, healthy)
		}
		return nil
	})
}

// unhealthy returns the messages of the Unhealthy events recorded so far,
// one per recording (an event repeated within the recorder's window is
// counted, not written again). It waits until they are written: after
// an event it records last.
func (c *healthCell) unhealthy(t *testing.T) []string {
	t.Helper()
	marker := fmt.Sprintf("recorded after the events of %s", t.Name())
	c.events.Record(clientlib.Machines.Name, "", "m", "m", clientlib.EventNormal, "Marker", marker)
	var out []string
	c.log.until(c.ctx, t, "the events written", func() error {
		out = nil
		marked := false
		for _, e := range c.log.events {
			marked = marked || e.GetMessage() == marker
			if e.GetReason() == "Unhealthy" {
				for range e.GetCount() {
					out = append(out, e.GetMessage())
				}
			}
		}
		if !marked {
			return fmt.Errorf("no event %q", marker)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// wantUnhealthy fails the test unless the Unhealthy events recorded so
// far are one per element of want (in any order), each containing it.
func (c *healthCell) wantUnhealthy(t *testing.T, ref string, want ...string) {
	t.Helper()
	got := c.unhealthy(t)
	want = slices.Sorted(slices.Values(want))
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = strings.HasPrefix(got[i], "Task "+ref+" (attempt 0): health check failed: ") && strings.Contains(got[i], want[i])
	}
	if !ok {
		t.Fatalf("Unhealthy events %q, want one each saying %q", got, want)
	}
}

// checked is the template of a task running /bin/sh -c script with the
// health check /bin/sh -c check, every 7s, timing out after timeout.
func checked(script, check string, timeout time.Duration) *troupev1.TaskTemplate {
	return &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", script}, HealthCheck: &troupev1.HealthCheck{Command: "/bin/sh",
		Args: []string{"-c", check}, Interval: durationpb.New(checkInterval), Timeout: durationpb.New(timeout)}}
}

const checkInterval = 7 * time.Second

// An exec agent runs a task's health check beside its process, as the
// task (see runtime.TestExecHealthCheck): at once, then an interval after
// each check. The Run is written when its health changes, and only then;
// the first failure, and each after a pass, is recorded as an Unhealthy
// event saying why. A check that cannot start fails, and so does one
// past its timeout, which is killed with what it started. A process
// restarted in place is unhealthy until its check passes again. The
// checks' intervals are fired by the test; their timeouts are real.
func TestExecHealthChecks(t *testing.T) {
	const forever = "exec sleep 600"
	t.Run("passes", func(t *testing.T) {
		t.Parallel()
		c := startHealthCell(t, &runtime.Exec{Dir: runtimetest.Dir(t)})
		ref := c.bind(t, "ok", checked(forever, "true", time.Minute))
		for range 3 {
			c.next(t, checkInterval).fire <- time.Time{}
		}
		c.next(t, checkInterval)
		// RUNNING (before the process starts), then healthy after the
		// first check: no write for the three checks since.
		c.wantRuns(t, ref, false, true)
		c.wantUnhealthy(t, ref)
	})
	t.Run("fails", func(t *testing.T) {
		t.Parallel()
		c := startHealthCell(t, &runtime.Exec{Dir: runtimetest.Dir(t)})
		ref := c.bind(t, "bad", checked(forever, "echo not ready; false", time.Minute))
		for range 3 {
			c.next(t, checkInterval).fire <- time.Time{}
		}
		c.next(t, checkInterval)
		c.wantRuns(t, ref, false)
		c.wantUnhealthy(t, ref, "exit status 1: not ready")
	})
	t.Run("cannot start", func(t *testing.T) {
		t.Parallel()
		c := startHealthCell(t, &runtime.Exec{Dir: runtimetest.Dir(t)})
		tmpl := checked(forever, "", time.Minute)
		tmpl.HealthCheck.Command, tmpl.HealthCheck.Args = "/nonexistent/check", nil
		ref := c.bind(t, "missing", tmpl)
		c.next(t, checkInterval).fire <- time.Time{}
		c.next(t, checkInterval)
		c.wantRuns(t, ref, false)
		c.wantUnhealthy(t, ref, "/nonexistent/check: no such file or directory")
	})
	t.Run("flips", func(t *testing.T) {
		t.Parallel()
		c := startHealthCell(t, &runtime.Exec{Dir: runtimetest.Dir(t)})
		ok := filepath.Join(runtimetest.Dir(t), "ok")
		ref := c.bind(t, "flips", checked(forever, "test -f "+ok, time.Minute))
		tm := c.next(t, checkInterval)
		c.wantRuns(t, ref, false)
		healthy := []bool{false}
		for _, pass := range []bool{true, false, true, true} {
			if pass {
				if err := os.WriteFile(ok, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(ok); err != nil {
				t.Fatal(err)
			}
			tm.fire <- time.Time{}
			tm = c.next(t, checkInterval)
			if pass != healthy[len(healthy)-1] {
				healthy = append(healthy, pass)
			}
			c.wantRuns(t, ref, healthy...)
		}
		if !slices.Equal(healthy, []bool{false, true, false, true}) {
			t.Fatalf("the test flipped the check %v", healthy)
		}
		c.wantUnhealthy(t, ref, "exit status 1", "exit status 1")
	})
	t.Run("times out", func(t *testing.T) {
		t.Parallel()
		rt := &runtime.Exec{Dir: runtimetest.Dir(t)}
		c := startHealthCell(t, rt)
		slow := filepath.Join(runtimetest.Dir(t), "slow")
		ref := c.bind(t, "slow", checked(forever, "if test -f "+slow+"; then sleep 600 & echo $! > sleep.pid; wait; fi", time.Second))
		tm := c.next(t, checkInterval)
		c.wantRuns(t, ref, false, true)
		if err := os.WriteFile(slow, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		tm.fire <- time.Time{}
		c.next(t, checkInterval)
		c.wantRuns(t, ref, false, true, false)
		c.wantUnhealthy(t, ref, "killed: timed out after 1s")
		// The check was killed with the sleep it started (in the task's
		// working directory).
		runtimetest.Ended(t, filepath.Join(rt.TaskDir(ref), "work", "sleep.pid"), 10*time.Second)
	})
	t.Run("restarts", func(t *testing.T) {
		t.Parallel()
		rt := &runtime.Exec{Dir: runtimetest.Dir(t)}
		c := startHealthCell(t, rt)
		// Healthy once the process has written its pid (the check runs
		// in the task's working directory).
		ref := c.bind(t, "restarts", checked("echo $$ > task.pid; "+forever, "test -s task.pid", time.Minute))
		c.untilHealthy(t, ref)
		c.wantRuns(t, ref, false, true)
		pid, err := os.ReadFile(filepath.Join(rt.TaskDir(ref), "work", "task.pid"))
		if err != nil {
			t.Fatal(err)
		}
		var p int
		if _, err := fmt.Sscan(string(pid), &p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Unhealthy in the back-off, and once restarted until it passes
		// again, at once.
		backoff := c.next(t, time.Minute)
		if r := c.wantRuns(t, ref, false, true, false); r.GetRestarts() != 1 || !strings.HasPrefix(r.GetReason(), "back-off") {
			t.Fatalf("in back-off: %v", r)
		}
		backoff.fire <- time.Time{}
		c.untilHealthy(t, ref)
		if r := c.wantRuns(t, ref, false, true, false, false, true); r.GetRestarts() != 1 || !strings.HasPrefix(r.GetReason(), "restarted after") {
			t.Fatalf("restarted: %v", r)
		}
	})
}

// A hollow machine's task has no process to check: with a health check,
// it is healthy whenever it is reported RUNNING and its process runs (not
// in a restart's back-off); without one, never.
func TestHollowHealth(t *testing.T) {
	ends := make(timers, 16)
	c := startHealthCell(t, &runtime.Sim{After: ends.After})
	tmpl := &troupev1.TaskTemplate{Command: "x", HealthCheck: &troupev1.HealthCheck{Command: "/nonexistent/check"}}
	ref := c.bind(t, "checked", tmpl)
	end := nextTimer(c.ctx, t, ends)
	c.untilRuns(t, ref, false, true)
	end.fire <- time.Time{} // the process exits
	c.next(t, time.Minute).fire <- time.Time{}
	nextTimer(c.ctx, t, ends)
	c.untilRuns(t, ref, false, true, false, true)
	if _, r := c.runs(ref); r.GetRestarts() != 1 || r.GetPhase() != troupev1.RunPhase_RUN_PHASE_RUNNING {
		t.Fatalf("restarted: %v", r)
	}

	plain := c.bind(t, "plain", &troupev1.TaskTemplate{Command: "x"})
	nextTimer(c.ctx, t, ends)
	c.untilRuns(t, plain, false)
	c.wantUnhealthy(t, ref)
}
