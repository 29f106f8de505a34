package job_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// gate is a store through which the writes of one key wait while the gate
// is shut: the test holds an agent's reports of one task's Run. When it
// opens, the held writes go one at a time, the last held first: a report
// held behind an earlier one would land first, and the earlier one after
// it.
type gate struct {
	clientlib.Store
	key string

	mu   sync.Mutex
	shut bool
	held []heldWrite
}

type heldWrite struct{ release, done chan struct{} }

func (g *gate) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	g.mu.Lock()
	if !g.shut || !writes(req, g.key) {
		g.mu.Unlock()
		return g.Store.Commit(ctx, req)
	}
	h := heldWrite{release: make(chan struct{}), done: make(chan struct{})}
	g.held = append(g.held, h)
	g.mu.Unlock()
	defer close(h.done)
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Store.Commit(ctx, req)
}

func writes(req *storev1.CommitRequest, key string) bool {
	for _, grp := range req.GetGroups() {
		for _, op := range grp.GetOps() {
			if op.GetPut().GetKey() == key {
				return true
			}
		}
	}
	return false
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = true
}

// open lets the held writes go, the last held first, each committed
// before the next goes, and the next ones through.
func (g *gate) open() {
	g.mu.Lock()
	held := g.held
	g.shut, g.held = false, nil
	g.mu.Unlock()
	for i := len(held) - 1; i >= 0; i-- {
		close(held[i].release)
		<-held[i].done
	}
}

func (g *gate) holding() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held) > 0, fmt.Sprintf("%d held", len(g.held))
}

// runLog follows, by watch, every write of one Run key in commit order:
// the placement (bound_at) and phase of each.
type runLog struct {
	mu     sync.Mutex
	writes []string
}

func followRun(ctx context.Context, s clientlib.Store, key string, epoch time.Time) *runLog {
	l := &runLog{}
	w := s.WatchStream(ctx, key, nil)
	go func() {
		defer w.Close()
		for {
			resp, err := w.Next()
			if err != nil {
				return
			}
			for _, ev := range resp.GetEvents() {
				if ev.GetType() != storev1.EventType_EVENT_TYPE_PUT || ev.GetKv().GetKey() != key {
					continue
				}
				write := "unreadable"
				if r, err := clientlib.Decode(clientlib.Runs, ev.GetKv().GetValue(), ev.GetKv().GetVersion()); err == nil {
					write = placement(r.GetBoundAt(), epoch) + " " + strings.ToLower(strings.TrimPrefix(r.GetPhase().String(), "RUN_PHASE_"))
				}
				l.mu.Lock()
				l.writes = append(l.writes, write)
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *runLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.writes, ", ")
}

func placement(boundAt *timestamppb.Timestamp, epoch time.Time) string {
	if boundAt == nil {
		return "bound=-"
	}
	return "bound=+" + boundAt.AsTime().Sub(epoch).String()
}

// preempt plays a scheduler that places task index of job on m1 by
// evicting victim (the framework's commit path: the victim back to
// pending, its Binding deleted, in the placement's transaction).
func (c *memCell) preempt(job string, index int32, victim *troupev1.Task) {
	c.t.Helper()
	var preemptor *framework.Task
	for _, tk := range c.tasks(job) {
		if tk.GetSpec().GetIndex() == index {
			key, _ := clientlib.Tasks.Key(tk)
			preemptor = framework.NewTask(key, tk)
		}
	}
	vkey, _ := clientlib.Tasks.Key(victim)
	plan := &framework.Plan{Placements: []framework.Placement{{Task: preemptor,
		Machine: &framework.Machine{Name: "m1", Object: c.machine, Capacity: c.machine.GetSpec().GetCapacity()},
		Victims: []*framework.Running{{Key: vkey, Task: victim, Job: "ns/" + victim.GetSpec().GetJob(), Priority: victim.GetSpec().GetPriority(),
			Requests: victim.GetSpec().GetTemplate().GetRequests()}}}}}
	res, err := framework.CommitPlan(c.ctx, c.s, plan, framework.Modes{}, "test", c.now())
	if err != nil || len(res.Committed) != 1 {
		c.t.Fatalf("preempt %s for %s-%d: %+v %v", victim.GetMetadata().GetName(), job, index, res, err)
	}
}

// A task preempted and placed again on the machine it was evicted from
// keeps its attempt, so the Run at that machine's key is, until the agent
// reports the new placement, the evicted placement's: its eviction's
// (KILLED), or a report of it that the agent wrote late. The job
// controller and a real agent (the simulated runtime) over the in-memory
// store, the test playing the schedulers and holding the agent's writes of
// the task's Run (a gate) to make those interleavings happen every time;
// the controller syncs from settled caches on a manual clock.
//
// The job controller takes neither for the new placement's (taken for
// it, the eviction's KILLED run failed the task, "stopped", exit 137, and
// the late RUNNING one marked it running before it ran), and the agent
// writes the new placement's Run only once the evicted placement's last
// report is written, so that the Run ends up the new placement's.
func TestPreemptedAndPlacedAgainOnTheSameMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := cachetest.NewClock(epoch)
	c := newMemCell(ctx, t, clock.Now, cache.QueueConfig{BaseDelay: time.Second, MaxDelay: time.Minute, Clock: clock})
	const runKey = "/runs/m1/ns/p/0"
	g := &gate{Store: c.s, key: runKey}
	log := followRun(ctx, c.s, runKey, epoch)
	a, err := agent.New(g, agent.Config{Machine: "m1", Capacity: c.machine.GetSpec().GetCapacity(),
		Runtime: &runtime.Sim{DefaultDuration: time.Hour}, LeaseDuration: 2 * time.Hour, RenewInterval: time.Hour, StopGrace: time.Second,
		Now: clock.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-agentDone
	}()
	c.startCaches()
	if err := c.s.WaitForWatches(ctx, 7); err != nil { // the controller's 5, the run's, the agent's bindings
		t.Fatal(err)
	}

	// p: one low-priority batch task; web: two production tasks, each of
	// which preempts it once.
	p := newJob("p", troupev1.JobType_JOB_TYPE_BATCH, 1, 1)
	web := newJob("web", troupev1.JobType_JOB_TYPE_SERVICE, 2, 0)
	web.Spec.Priority = clientlib.ProductionPriority
	for _, j := range []*troupev1.Job{p, web} {
		if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, j); err != nil {
			t.Fatal(err)
		}
	}
	c.syncAll(0)
	task := func() *troupev1.Task {
		t.Helper()
		tk, err := clientlib.Get(ctx, c.s, clientlib.Tasks, "/tasks/ns/p/0")
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	runOf := func(boundAt time.Duration, phase troupev1.RunPhase) func() error {
		return func() error {
			r, err := clientlib.Get(ctx, c.s, clientlib.Runs, runKey)
			if err != nil {
				return err
			}
			if !r.GetBoundAt().AsTime().Equal(epoch.Add(boundAt)) || r.GetPhase() != phase || r.GetAttempt() != 0 {
				return fmt.Errorf("run %v", r)
			}
			return nil
		}
	}
	isBound := func(what string, boundAt time.Duration, phase troupev1.TaskPhase) {
		t.Helper()
		tk := task()
		if tk.GetBinding().GetMachine() != "m1" || !tk.GetBinding().GetBoundAt().AsTime().Equal(epoch.Add(boundAt)) ||
			tk.GetStatus().GetPhase() != phase || tk.GetSpec().GetAttempt() != 0 {
			t.Fatalf("%s: task %v, want it %v on m1, bound at +%v, attempt 0", what, tk, phase, boundAt)
		}
	}

	// Placed at +0s, it runs.
	c.bind("p", 0)
	c.until("p's first placement runs", runOf(0, troupev1.RunPhase_RUN_PHASE_RUNNING))
	c.syncAll(0)
	isBound("first placement", 0, troupev1.TaskPhase_TASK_PHASE_RUNNING)

	// web-0 evicts it; its agent kills it and says so.
	c.preempt("web", 0, task())
	c.until("the evicted placement killed", runOf(0, troupev1.RunPhase_RUN_PHASE_KILLED))
	c.syncAll(0)
	if tk := task(); tk.GetBinding() != nil || !clientlib.Pending(tk) || !strings.HasPrefix(tk.GetStatus().GetReason(), "preempted by ") {
		t.Fatalf("evicted task %v", tk)
	}

	// Placed again on m1 at +1s, before the agent reports the new
	// placement: the KILLED run there is the eviction's.
	g.close()
	clock.Advance(time.Second)
	c.bind("p", 0)
	c.syncAll(0)
	isBound("placed again, the eviction's run read", time.Second, troupev1.TaskPhase_TASK_PHASE_BOUND)
	c.check("p pending again, not failed", c.status("p", "PENDING pending=1 running=0 succeeded=0 failed=0 retries=0"))
	wait.Until(ctx, t, "the agent's report of the new placement", g.holding)
	g.open()
	c.until("p's second placement runs", runOf(time.Second, troupev1.RunPhase_RUN_PHASE_RUNNING))
	c.syncAll(0)
	isBound("second placement", time.Second, troupev1.TaskPhase_TASK_PHASE_RUNNING)

	// web-1 evicts it, and it is placed again on m1 at +2s while its
	// agent's report of the eviction is held: the Run says the evicted
	// placement runs. When the report lands, it is written before the new
	// placement's, never after.
	g.close()
	c.preempt("web", 1, task())
	wait.Until(ctx, t, "the agent's report of the eviction", g.holding)
	clock.Advance(time.Second)
	c.bind("p", 0)
	c.syncAll(0)
	isBound("placed again, the evicted placement's RUNNING run read", 2*time.Second, troupev1.TaskPhase_TASK_PHASE_BOUND)
	g.open()
	c.until("p's third placement runs", runOf(2*time.Second, troupev1.RunPhase_RUN_PHASE_RUNNING))
	c.syncAll(0)
	isBound("third placement", 2*time.Second, troupev1.TaskPhase_TASK_PHASE_RUNNING)
	c.check("p running, never retried", c.status("p", "RUNNING pending=0 running=1 succeeded=0 failed=0 retries=0"))

	want := "bound=+0s running, bound=+0s killed, bound=+1s running, bound=+1s killed, bound=+2s running"
	if got := log.String(); got != want {
		t.Fatalf("the Run's writes, in commit order: %s; want %s", got, want)
	}
	if r, err := clientlib.Get(ctx, c.s, clientlib.Runs, runKey); err != nil || !proto.Equal(r.GetBoundAt(), task().GetBinding().GetBoundAt()) {
		t.Fatalf("run %v (%v): want the current placement's", r, err)
	}
}
