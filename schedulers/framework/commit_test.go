package framework_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

var now = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// harness is an in-memory store with pending tasks and one machine.
type harness struct {
	t     *testing.T
	ctx   context.Context
	store *memstore.Store
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, ctx: context.Background(), store: memstore.New(func() time.Time { return now }, time.Minute)}
}

// pending creates n tasks of job requesting cpu each and returns them
// ready for scheduling.
func (h *harness) pending(job string, n int, cpu int64) []*framework.Task {
	var out []*framework.Task
	for i := range n {
		task, err := clientlib.Create(h.ctx, h.store, clientlib.Tasks, &troupev1.Task{
			Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, int32(i)), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: job, Index: int32(i), Scheduler: "batch",
				Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": cpu}}},
		})
		if err != nil {
			h.t.Fatal(err)
		}
		key, _ := clientlib.Tasks.Key(task)
		out = append(out, framework.NewTask(key, task))
	}
	return out
}

// snapshot reads machine m1 of capacity cpu, with its counter.
func (h *harness) snapshot(cpu int64) *framework.Snapshot {
	m := &framework.Machine{Name: "m1", Capacity: map[string]int64{"cpu": cpu}, Allocated: map[string]int64{}, AllocVersions: map[string]uint64{}}
	if kv, err := h.store.Get(h.ctx, clientlib.AllocKey("m1", "cpu")); err != nil {
		h.t.Fatal(err)
	} else if kv != nil {
		var v int64
		fmt.Sscan(string(kv.GetValue()), &v)
		m.Allocated["cpu"], m.AllocVersions["cpu"] = v, kv.GetVersion()
	}
	return &framework.Snapshot{Machines: []*framework.Machine{m}}
}

func (h *harness) commit(snap *framework.Snapshot, tasks []*framework.Task, modes framework.Modes) *framework.Result {
	h.t.Helper()
	plan := framework.Schedule(framework.Profile{}, snap, tasks)
	res, err := framework.CommitPlan(h.ctx, h.store, plan, modes, "batch-0", now)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func TestCommitPlanWritesBindingAndCounters(t *testing.T) {
	h := newHarness(t)
	res := h.commit(h.snapshot(1000), h.pending("j", 2, 300), framework.Modes{})
	if len(res.Committed) != 2 {
		t.Fatalf("committed %d", len(res.Committed))
	}
	task, err := clientlib.Get(h.ctx, h.store, clientlib.Tasks, "/tasks/ns/j/1")
	if err != nil || task.GetBinding().GetMachine() != "m1" || task.GetBinding().GetScheduler() != "batch-0" || task.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_BOUND {
		t.Fatalf("bound task: %v %v", task, err)
	}
	b, err := clientlib.Get(h.ctx, h.store, clientlib.Bindings, "/bindings/m1/ns/j/1")
	if err != nil || b.GetTask().GetTemplate().GetCommand() != "/bin/true" {
		t.Fatalf("binding: %v %v", b, err)
	}
	if kv, _ := h.store.Get(h.ctx, "/alloc/m1/cpu"); string(kv.GetValue()) != "600" {
		t.Fatalf("counter %s, want 600", kv.GetValue())
	}
}

// Two schedulers decide from the same snapshot and commit one after the
// other: fine-grained detection lets both in while the machine has room
// and refuses the overcommit; coarse-grained refuses any second writer.
func TestConcurrentSchedulersFineAndCoarse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modes  framework.Modes
		cpu    int64
		second bool
		reason storev1.FailureReason
	}{
		{"fine, room for both", framework.Modes{Conflict: framework.Fine}, 400, true, 0},
		{"fine, overcommit", framework.Modes{Conflict: framework.Fine}, 600, false, storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED},
		{"coarse, room for both", framework.Modes{Conflict: framework.Coarse}, 400, false, storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := h.pending("a", 1, tc.cpu), h.pending("b", 1, tc.cpu)
			snap := h.snapshot(1000)
			if first := h.commit(snap, a, tc.modes); len(first.Committed) != 1 {
				t.Fatalf("first scheduler: %+v", first)
			}
			second := h.commit(snap, b, tc.modes) // stale snapshot
			if got := len(second.Committed) == 1; got != tc.second {
				t.Fatalf("second scheduler committed=%v, want %v (%+v)", got, tc.second, second.Conflicted)
			}
			if !tc.second {
				c := second.Conflicted[0].Conflict
				if c.Reason != tc.reason || c.Key != "/alloc/m1/cpu" {
					t.Fatalf("conflict %v, want %v on the counter", c, tc.reason)
				}
			}
			if kv, _ := h.store.Get(h.ctx, "/alloc/m1/cpu"); kv == nil {
				t.Fatal("no counter")
			} else if v := string(kv.GetValue()); (tc.second && v != fmt.Sprint(2*tc.cpu)) || (!tc.second && v != fmt.Sprint(tc.cpu)) {
				t.Fatalf("counter %s after the race", v)
			}
		})
	}
}

// The same task bound by two schedulers: the second loses on the task's
// version; an all-or-nothing plan with one loser commits nothing.
func TestTaskConflictAndAllOrNothing(t *testing.T) {
	h := newHarness(t)
	tasks := h.pending("g", 3, 100)
	snap := h.snapshot(10000)
	if res := h.commit(snap, tasks[:1], framework.Modes{}); len(res.Committed) != 1 {
		t.Fatalf("first bind: %+v", res)
	}
	res := h.commit(snap, tasks, framework.Modes{Txn: framework.AllOrNothing})
	if len(res.Committed) != 0 || len(res.Conflicted) != 3 {
		t.Fatalf("gang with a stale member: %d committed, %d conflicted", len(res.Committed), len(res.Conflicted))
	}
	if c := res.Conflicted[0].Conflict; c.Key != "/tasks/ns/g/0" || c.Reason != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
		t.Fatalf("conflict of the stale member: %v", c)
	}
	if res.Conflicted[1].Conflict.Reason != storev1.FailureReason_FAILURE_REASON_ABORTED {
		t.Fatalf("other members: %v, want ABORTED", res.Conflicted[1].Conflict)
	}
	if kv, _ := h.store.Get(h.ctx, "/alloc/m1/cpu"); string(kv.GetValue()) != "100" {
		t.Fatalf("counter %s: the aborted gang took capacity", kv.GetValue())
	}
}

// countingStore counts the commit requests that reach the store.
type countingStore struct {
	clientlib.Store
	commits int
}

func (c *countingStore) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	c.commits++
	return c.Store.Commit(ctx, req)
}

// An incremental plan larger than one request commits in several; the
// counters written are reported once, with their final value.
func TestLargePlanCommitsInSeveralRequests(t *testing.T) {
	h := newHarness(t)
	tasks := h.pending("big", 600, 10)
	plan := framework.Schedule(framework.Profile{}, h.snapshot(100000), tasks)
	counting := &countingStore{Store: h.store}
	res, err := framework.CommitPlan(h.ctx, counting, plan, framework.Modes{}, "batch-0", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Committed) != 600 || counting.commits != 3 {
		t.Fatalf("%d committed in %d requests, want 600 in 3", len(res.Committed), counting.commits)
	}
	kv, _ := h.store.Get(h.ctx, "/alloc/m1/cpu")
	if string(kv.GetValue()) != "6000" || len(res.Counters) != 1 || res.Counters[0].Value != 6000 || res.Counters[0].Version != kv.GetVersion() {
		t.Fatalf("counter %s at %d; reported %+v", kv.GetValue(), kv.GetVersion(), res.Counters)
	}
	// All or nothing stays one request.
	gang := h.pending("gang", 300, 10)
	counting.commits = 0
	res, err = framework.CommitPlan(h.ctx, counting, framework.Schedule(framework.Profile{}, h.snapshot(100000), gang),
		framework.Modes{Txn: framework.AllOrNothing}, "gang-0", now)
	if err != nil || len(res.Committed) != 300 || counting.commits != 1 {
		t.Fatalf("gang: %v, %d committed in %d requests", err, len(res.Committed), counting.commits)
	}
}

// A job deleted (or stopped) after the decision loses every placement:
// they come back in Stopped, not as conflicts to retry, and nothing of
// the job is bound; another job's placements in the same plan commit.
func TestStoppedJobPlacesNothing(t *testing.T) {
	for _, stop := range []string{"delete", "stop"} {
		t.Run(stop, func(t *testing.T) {
			h := newHarness(t)
			job, err := clientlib.Create(h.ctx, h.store, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "gone", Namespace: "ns"},
				Spec: &troupev1.JobSpec{Count: 2, Template: &troupev1.TaskTemplate{Command: "/bin/true"}}})
			if err != nil {
				t.Fatal(err)
			}
			tasks := append(h.pending("gone", 2, 100), h.pending("kept", 1, 100)...)
			snap := h.snapshot(1000)
			tx := clientlib.NewTxn(h.store)
			if stop == "delete" {
				clientlib.DeleteObject(tx.Group(), clientlib.Jobs, job)
			} else {
				job.Spec.Stopped = true
				clientlib.PutObject(tx.Group(), clientlib.Jobs, job)
			}
			if out, err := tx.Commit(h.ctx); err != nil || out.Err() != nil {
				t.Fatalf("%s the job: %v %v", stop, err, out.Err())
			}
			res := h.commit(snap, tasks, framework.Modes{})
			if len(res.Stopped) != 2 || len(res.Conflicted) != 0 || len(res.Committed) != 1 || res.Committed[0].Task.Job != "ns/kept" {
				t.Fatalf("stopped %d, conflicted %d, committed %v", len(res.Stopped), len(res.Conflicted), res.Committed)
			}
			for i := range 2 {
				task, err := clientlib.Get(h.ctx, h.store, clientlib.Tasks, fmt.Sprintf("/tasks/ns/gone/%d", i))
				if err != nil || task.GetBinding() != nil {
					t.Errorf("task %d after the job's %s: %v %v", i, stop, task, err)
				}
			}
		})
	}
}
