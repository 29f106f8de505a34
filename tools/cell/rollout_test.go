package cell_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// runningWatch follows a job's tasks from a watch and checks, at every
// committed change, that at least min of them run.
type runningWatch struct {
	mu      sync.Mutex
	tasks   map[string]*troupev1.Task
	min     int
	lowest  int // the fewest running seen
	changes int
	bad     string   // the first change that left too few running
	log     []string // the changes, for a failure's message
	done    chan error
}

func watchRunning(e *env, job string, min int) *runningWatch {
	e.t.Helper()
	ts, cursor, err := clientlib.List(e.ctx, e.c.Client, clientlib.Tasks, "e2e/"+job+"/")
	if err != nil {
		e.t.Fatal(err)
	}
	rw := &runningWatch{tasks: map[string]*troupev1.Task{}, min: min, done: make(chan error, 1)}
	for _, t := range ts {
		rw.tasks[t.GetMetadata().GetName()] = t
	}
	rw.lowest = rw.running()
	ctx, cancel := context.WithCancel(e.ctx)
	w := e.c.Client.Watch(ctx, clientlib.Tasks.Prefix+"e2e/"+job+"/", cursor)
	e.t.Cleanup(func() { cancel(); w.Close() })
	go func() {
		for {
			resp, err := w.Next()
			if err != nil {
				rw.done <- err
				return
			}
			if err := rw.apply(resp); err != nil {
				rw.done <- err
				return
			}
		}
	}()
	return rw
}

func (rw *runningWatch) apply(resp *storev1.WatchResponse) error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, ev := range resp.GetEvents() {
		kv := ev.GetKv()
		if ev.GetType() == storev1.EventType_EVENT_TYPE_DELETE {
			return fmt.Errorf("task %s deleted", kv.GetKey())
		}
		t, err := clientlib.Decode(clientlib.Tasks, kv.GetValue(), kv.GetVersion())
		if err != nil {
			return err
		}
		rw.tasks[t.GetMetadata().GetName()] = t
		rw.changes++
		rw.log = append(rw.log, fmt.Sprintf("%s v%d attempt %d %s restarts=%d -> %d running", t.GetMetadata().GetName(), t.GetSpec().GetJobVersion(),
			t.GetSpec().GetAttempt(), t.GetStatus().GetPhase(), t.GetStatus().GetRestarts(), rw.running()))
		if n := rw.running(); n < rw.lowest {
			rw.lowest = n
			if n < rw.min && rw.bad == "" {
				rw.bad = fmt.Sprintf("%d running after %s became %s", n, t.GetMetadata().GetName(), t.GetStatus().GetPhase())
			}
		}
	}
	return nil
}

func (rw *runningWatch) running() int {
	n := 0
	for _, t := range rw.tasks {
		if t.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_RUNNING {
			n++
		}
	}
	return n
}

// check fails the test if a change left fewer than min running, or the
// watch ended.
func (rw *runningWatch) check(t *testing.T) {
	t.Helper()
	select {
	case err := <-rw.done:
		t.Fatalf("task watch ended: %v", err)
	default:
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.bad != "" || rw.changes == 0 {
		t.Fatalf("running tasks: %s (fewest %d, want at least %d, over %d changes):\n%s", rw.bad, rw.lowest, rw.min, rw.changes,
			strings.Join(rw.log, "\n"))
	}
	t.Logf("fewest running tasks over %d changes: %d (at least %d)", rw.changes, rw.lowest, rw.min)
}

// change rewrites the job's spec (read, change, write; again if its
// controller wrote it meanwhile).
func (e *env) change(name string, f func(*troupev1.Job)) {
	e.t.Helper()
	wait.Until(e.ctx, e.t, "job "+name+" changed", func() (bool, string) {
		j, err := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, clientlib.Jobs.Prefix+"e2e/"+name)
		if err != nil {
			return false, err.Error()
		}
		f(j)
		_, err = clientlib.Update(e.ctx, e.c.Client, clientlib.Jobs, j)
		var ce *clientlib.ConflictError
		if errors.As(err, &ce) {
			return false, err.Error()
		}
		if err != nil {
			e.t.Fatal(err)
		}
		return true, ""
	})
}

// rollout waits until the job's update reaches state with its tasks:
// running of version, and want returns "" for them.
func (e *env) rollout(name string, state troupev1.RolloutState, version int32, want func(j *troupev1.Job, running map[int32]int) string) {
	e.t.Helper()
	last := ""
	wait.Until(e.ctx, e.t, fmt.Sprintf("job %s: update to version %d %s", name, version, state), func() (bool, string) {
		j, err := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, clientlib.Jobs.Prefix+"e2e/"+name)
		if err != nil {
			return false, last + "; then " + err.Error()
		}
		ts, _, err := clientlib.List(e.ctx, e.c.Client, clientlib.Tasks, "e2e/"+name+"/")
		if err != nil {
			return false, last + "; then " + err.Error()
		}
		last = fmt.Sprintf("status %v; tasks:", j.GetStatus())
		for _, t := range ts {
			last += fmt.Sprintf("\n  %s v%d attempt %d %s restarts=%d", t.GetMetadata().GetName(), t.GetSpec().GetJobVersion(), t.GetSpec().GetAttempt(),
				t.GetStatus().GetPhase(), t.GetStatus().GetRestarts())
		}
		running := map[int32]int{} // by version
		for _, t := range ts {
			if t.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_RUNNING {
				running[max(1, t.GetSpec().GetJobVersion())]++
			}
		}
		r := j.GetStatus().GetRollout()
		if r.GetState() != state || r.GetToVersion() != version {
			return false, fmt.Sprintf("rollout %v, running by version %v", r, running)
		}
		if why := want(j, running); why != "" {
			return false, fmt.Sprintf("%s; rollout %v, running by version %v", why, r, running)
		}
		return true, ""
	})
}

// A 10-replica service on 20 hollow machines is updated, its canaries
// are promoted, and an update that fails reverts by itself; through all
// of it, a watch of its tasks sees at least count - max_unavailable of
// them running at every committed change.
func TestServiceRollingUpdates(t *testing.T) {
	e := start(t, cell.Config{Hollow: 20, HollowCapacity: map[string]int64{"cpu": 2000, "memory": 4 << 30}})
	template := func(command string) *troupev1.TaskTemplate {
		return &troupev1.TaskTemplate{Command: command, SimDuration: durationpb.New(24 * time.Hour), Requests: map[string]int64{"cpu": 1000}}
	}
	e.submit("web", tolerating(&troupev1.JobSpec{Type: troupev1.JobType_JOB_TYPE_SERVICE, Count: 10, Template: template("/srv/v1"),
		Update: &troupev1.UpdateStrategy{MaxUnavailable: 2, MaxSurge: 1}}))
	wait.Until(e.ctx, t, "10 replicas running, version 1 stable", func() (bool, string) {
		j, err := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, clientlib.Jobs.Prefix+"e2e/web")
		if err != nil {
			return false, err.Error()
		}
		return j.GetStatus().GetRunning() == 10 && j.GetStatus().GetStableVersion() == 1, fmt.Sprint(j.GetStatus())
	})
	rw := watchRunning(e, "web", 8)
	onlyVersion := func(v int32) func(*troupev1.Job, map[int32]int) string {
		return func(j *troupev1.Job, running map[int32]int) string {
			if running[v] != 10 || len(running) != 1 || j.GetStatus().GetStableVersion() != v {
				return fmt.Sprintf("want 10 running of version %d alone, stable", v)
			}
			return ""
		}
	}

	// A new command: version 2, rolled out two at a time at most.
	e.change("web", func(j *troupev1.Job) { j.Spec.Template.Command = "/srv/v2" })
	e.rollout("web", troupev1.RolloutState_ROLLOUT_STATE_COMPLETE, 2, onlyVersion(2))
	rw.check(t)

	// Two canaries run beside the ten, and the update pauses there.
	e.change("web", func(j *troupev1.Job) {
		j.Spec.Template.Command = "/srv/v3"
		j.Spec.Update.Canary = 2
	})
	e.rollout("web", troupev1.RolloutState_ROLLOUT_STATE_PAUSED, 3, func(j *troupev1.Job, running map[int32]int) string {
		if running[2] != 10 || running[3] != 2 || j.GetStatus().GetRollout().GetHealthy() != 2 {
			return "want the 10 of version 2 and 2 healthy canaries of version 3"
		}
		return ""
	})
	e.change("web", func(j *troupev1.Job) { j.Status.Rollout.Promoted = true })
	e.rollout("web", troupev1.RolloutState_ROLLOUT_STATE_COMPLETE, 3, onlyVersion(3))
	rw.check(t)

	// Version 4 fails (its tasks exit 1 after 100ms, and their agents
	// restart them, well before they are healthy at 2s): the job reverts
	// by itself to version 3's tasks, as version 5. The tasks of version
	// 3 stay (they run what version 5 runs); those of version 4 go.
	e.change("web", func(j *troupev1.Job) {
		j.Spec.Template = template("/srv/v4-broken")
		j.Spec.Template.SimDuration, j.Spec.Template.SimExitCode = durationpb.New(100*time.Millisecond), 1
		j.Spec.Update = &troupev1.UpdateStrategy{MaxUnavailable: 2, MaxSurge: 1, AutoRevert: true, MinHealthy: durationpb.New(2 * time.Second)}
	})
	e.rollout("web", troupev1.RolloutState_ROLLOUT_STATE_COMPLETE, 5, func(j *troupev1.Job, running map[int32]int) string {
		st := j.GetStatus()
		if len(st.GetHistory()) != 5 || !st.GetHistory()[3].GetFailed() || st.GetHistory()[4].GetTemplate().GetCommand() != "/srv/v3" {
			return fmt.Sprintf("want version 4 failed and version 5 running /srv/v3: history %v", st.GetHistory())
		}
		if running[3]+running[5] != 10 || st.GetStableVersion() != 5 {
			return "want 10 running of versions 3 and 5, 5 stable"
		}
		return ""
	})
	rw.check(t)
	// The spec still asks for version 4's tasks: nothing starts again.
	j, err := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, clientlib.Jobs.Prefix+"e2e/web")
	if err != nil || j.GetStatus().GetVersion() != 5 || !proto.Equal(j.GetSpec().GetTemplate().GetSimDuration(), durationpb.New(100*time.Millisecond)) {
		t.Fatalf("job %v (%v)", j, err)
	}
}
