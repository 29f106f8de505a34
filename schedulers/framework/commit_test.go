package framework_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/plugins/resourcefit"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
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

// snapshot reads machine m1 of capacity cpu, with its counters (cpu,
// and claims if it has one, as a MachineView shows them).
func (h *harness) snapshot(cpu int64) *framework.Snapshot {
	m := &framework.Machine{Name: "m1", Capacity: map[string]int64{"cpu": cpu}, Allocated: map[string]int64{}, AllocVersions: map[string]uint64{}}
	for _, r := range []string{"cpu", clientlib.ClaimsCounter} {
		if kv, err := h.store.Get(h.ctx, clientlib.AllocKey("m1", r)); err != nil {
			h.t.Fatal(err)
		} else if kv != nil {
			var v int64
			fmt.Sscan(string(kv.GetValue()), &v)
			m.Allocated[r], m.AllocVersions[r] = v, kv.GetVersion()
		}
	}
	return &framework.Snapshot{Machines: []*framework.Machine{m}}
}

// counter returns the value of the counter at key ("" if absent).
func (h *harness) counter(key string) string {
	h.t.Helper()
	kv, err := h.store.Get(h.ctx, key)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(kv.GetValue())
}

// end ends the bound task at key as an agent's report does: its binding
// goes and its requests are given back to the machine's counters.
func (h *harness) end(key string) {
	h.t.Helper()
	task, err := clientlib.Get(h.ctx, h.store, clientlib.Tasks, key)
	if err != nil {
		h.t.Fatal(err)
	}
	tx := clientlib.NewTxn(h.store)
	g := tx.Group()
	done := clientlib.Unbind(g, task)
	done.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_SUCCEEDED}
	clientlib.PutObject(g, clientlib.Tasks, done)
	if out, err := tx.Commit(h.ctx); err != nil || out.Err() != nil {
		h.t.Fatalf("end %s: %v %v", key, err, out.Err())
	}
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

// Writes encoded as the plan is made (Profile.Placed, EncodeBinding)
// commit the same values as those CommitPlan encodes; writes encoded for
// another scheduler or time are encoded again.
func TestEncodedBindingsCommitTheSame(t *testing.T) {
	bound := func(encode func(framework.Placement) *framework.EncodedBinding) map[string]proto.Message {
		h := newHarness(t)
		var encoded []*framework.EncodedBinding
		p := framework.Profile{Placed: func(pl framework.Placement) { encoded = append(encoded, encode(pl)) }}
		plan := framework.Schedule(p, h.snapshot(1000), h.pending("j", 3, 300))
		if len(encoded) != len(plan.Placements) {
			t.Fatalf("told of %d placements of %d", len(encoded), len(plan.Placements))
		}
		for i := range plan.Placements {
			plan.Placements[i].Encoded = encoded[i]
		}
		if res, err := framework.CommitPlan(h.ctx, h.store, plan, framework.Modes{}, "batch-0", now); err != nil || len(res.Committed) != 3 {
			t.Fatalf("commit: %v, %v", res, err)
		}
		out := map[string]proto.Message{}
		tasks, _, err := clientlib.List(h.ctx, h.store, clientlib.Tasks, "")
		for _, o := range tasks {
			key, _ := clientlib.Tasks.Key(o)
			out[key] = o
		}
		bindings, _, err2 := clientlib.List(h.ctx, h.store, clientlib.Bindings, "")
		for _, o := range bindings {
			key, _ := clientlib.Bindings.Key(o)
			out[key] = o
		}
		if err != nil || err2 != nil {
			t.Fatal(err, err2)
		}
		return out
	}
	st := memstore.New(func() time.Time { return now }, time.Minute)
	want := bound(func(framework.Placement) *framework.EncodedBinding { return nil })
	for name, encode := range map[string]func(framework.Placement) *framework.EncodedBinding{
		"ahead": func(p framework.Placement) *framework.EncodedBinding {
			return framework.EncodeBinding(st, p, "batch-0", now)
		},
		"other scheduler": func(p framework.Placement) *framework.EncodedBinding {
			return framework.EncodeBinding(st, p, "batch-1", now)
		},
		"other time": func(p framework.Placement) *framework.EncodedBinding {
			return framework.EncodeBinding(st, p, "batch-0", now.Add(time.Second))
		},
	} {
		got := bound(encode)
		if len(got) != 6 || len(want) != 6 {
			t.Fatalf("%s: committed %d values, CommitPlan alone %d; want 6", name, len(got), len(want))
		}
		for key, o := range want {
			for _, m := range []proto.Message{o, got[key]} { // each run's tasks have their own uids and creation times
				if md := m.(interface{ GetMetadata() *troupev1.ObjectMeta }).GetMetadata(); md != nil {
					md.Uid, md.Created = "", nil
				}
			}
			if !proto.Equal(got[key], o) {
				t.Errorf("%s: %s is %v, want %v as CommitPlan encodes it", name, key, got[key], o)
			}
		}
	}
}

// writeBinding (and clientlib.Encode) build a task from the read one's fields, sharing
// them (a deep copy costs more than the write): a field added to Task
// must be carried there too.
func TestBoundTaskKeepsEveryField(t *testing.T) {
	fields := (&troupev1.Task{}).ProtoReflect().Descriptor().Fields()
	var names []string
	for i := range fields.Len() {
		names = append(names, string(fields.Get(i).Name()))
	}
	if got := strings.Join(names, ","); got != "metadata,spec,binding,status,charge" {
		t.Fatalf("Task's fields are %s: carry the new ones in writeBinding and clientlib.Encode, then update this test", got)
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

// Coarse-grained detection on claims only (CoarseClaims, Google's
// per-machine sequence numbers) fails a commit when another scheduler
// placed on the machine since the snapshot, not when a task ended there;
// Coarse fails on both.
func TestCoarseClaimsConflictsOnClaimsOnly(t *testing.T) {
	for _, tc := range []struct {
		mode     framework.ConflictMode
		afterEnd bool   // the commit after a task's end succeeds
		key      string // the key the rival's claim conflicts on
	}{
		{framework.Coarse, false, "/alloc/m1/cpu"},
		{framework.CoarseClaims, true, "/alloc/m1/claims"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			h := newHarness(t)
			modes := framework.Modes{Conflict: tc.mode}
			if res := h.commit(h.snapshot(1000), h.pending("a", 1, 300), modes); len(res.Committed) != 1 {
				t.Fatalf("first commit: %+v", res)
			}
			snap := h.snapshot(1000) // sees a's task
			h.end("/tasks/ns/a/0")
			res := h.commit(snap, h.pending("b", 2, 200), modes)
			if got := len(res.Committed) == 2; got != tc.afterEnd {
				t.Fatalf("commit after a task's end: committed %v, want %v (%+v)", got, tc.afterEnd, res.Conflicted)
			}
			if !tc.afterEnd {
				if c := res.Conflicted[0].Conflict; c.Key != "/alloc/m1/cpu" || c.Reason != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
					t.Fatalf("conflict %v, want a version mismatch on the cpu counter", c)
				}
			}
			// Another scheduler's claim since the snapshot conflicts in both.
			snap = h.snapshot(1000)
			if res := h.commit(snap, h.pending("c", 1, 100), modes); len(res.Committed) != 1 {
				t.Fatalf("rival's commit: %+v", res)
			}
			res = h.commit(snap, h.pending("d", 1, 100), modes)
			if len(res.Committed) != 0 || len(res.Conflicted) != 1 {
				t.Fatalf("commit after a rival's claim: %+v", res)
			}
			if c := res.Conflicted[0].Conflict; c.Key != tc.key || c.Reason != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
				t.Fatalf("conflict %v, want a version mismatch on %s", c, tc.key)
			}
			if tc.mode == framework.Coarse {
				if v := h.counter("/alloc/m1/claims"); v != "" {
					t.Fatalf("coarse commits wrote a claims counter: %s", v)
				}
				return
			}
			// a, b's two and c: four claims; b's 400 and c's 100 cpu.
			if cpu, claims := h.counter("/alloc/m1/cpu"), h.counter("/alloc/m1/claims"); cpu != "500" || claims != "4" {
				t.Fatalf("counters cpu %s, claims %s; want 500 and 4", cpu, claims)
			}
		})
	}
}

// The counters a CoarseClaims commit reports include the claims counter,
// at its value and version, so the instance's next decision on the
// machine does not conflict with its own claim.
func TestCoarseClaimsReportsClaimsCounter(t *testing.T) {
	h := newHarness(t)
	modes := framework.Modes{Conflict: framework.CoarseClaims}
	h.commit(h.snapshot(1000), h.pending("a", 1, 100), modes)
	res := h.commit(h.snapshot(1000), h.pending("b", 3, 100), modes)
	kv, _ := h.store.Get(h.ctx, "/alloc/m1/claims")
	var claims *framework.CounterWrite
	for i, w := range res.Counters {
		if w.Key == "/alloc/m1/claims" {
			claims = &res.Counters[i]
		}
	}
	if claims == nil || claims.Value != 4 || claims.Version != kv.GetVersion() || string(kv.GetValue()) != "4" {
		t.Fatalf("reported %+v; the store holds %s at %d", res.Counters, kv.GetValue(), kv.GetVersion())
	}
	if !clientlib.IsClaimsKey(claims.Key) || clientlib.IsClaimsKey("/alloc/m1/cpu") || clientlib.IsClaimsKey("/alloc/m1/example.com/claims") {
		t.Fatal("IsClaimsKey")
	}
}

// A preemption in CoarseClaims mode evicts and places in one group: the
// claims counter counts the placement, the resources take the net change,
// and a victim that ended since the decision fails the commit (on its
// version) without giving its requests back twice.
func TestCoarseClaimsPreemption(t *testing.T) {
	modes := framework.Modes{Conflict: framework.CoarseClaims}
	profile := framework.Profile{Filters: []framework.FilterPlugin{resourcefit.New()}, Preempt: true}
	for _, ended := range []bool{false, true} {
		h := newHarness(t)
		h.commit(h.snapshot(1000), h.withPriority(h.pending("low", 2, 400), 0), modes)
		urgent := h.withPriority(h.pending("urgent", 1, 500), 50)
		plan := framework.Schedule(profile, h.running(h.snapshot(1000)), urgent)
		if len(plan.Placements) != 1 || len(plan.Placements[0].Victims) != 1 {
			t.Fatalf("plan: %+v", plan)
		}
		victim := plan.Placements[0].Victims[0].Key
		if ended {
			h.end(victim)
		}
		res, err := framework.CommitPlan(h.ctx, h.store, plan, modes, "batch-0", now)
		if err != nil {
			t.Fatal(err)
		}
		cpu, claims := h.counter("/alloc/m1/cpu"), h.counter("/alloc/m1/claims")
		if !ended {
			task, _ := clientlib.Get(h.ctx, h.store, clientlib.Tasks, victim)
			if len(res.Committed) != 1 || task.GetBinding() != nil || cpu != "900" || claims != "3" {
				t.Fatalf("committed %d, victim %v, cpu %s, claims %s; want 1, unbound, 900, 3", len(res.Committed), task, cpu, claims)
			}
			continue
		}
		if len(res.Conflicted) != 1 || res.Conflicted[0].Conflict.Key != victim || cpu != "400" || claims != "2" {
			t.Fatalf("victim ended: %+v, cpu %s, claims %s; want a conflict on %s, 400, 2", res, cpu, claims, victim)
		}
	}
}

// Atomic (Google's all-or-nothing) commits what the plan placed, tasks
// that fit nowhere or not, and rolls all of it back on any conflict;
// Incremental keeps what did not conflict. Only AllOrNothing keeps the
// gang rule.
func TestAtomicCommitsWhatFitsOrNothing(t *testing.T) {
	if framework.Atomic.GangRule() || framework.Incremental.GangRule() || !framework.AllOrNothing.GangRule() {
		t.Fatal("GangRule")
	}
	for _, conflict := range []framework.ConflictMode{framework.Fine, framework.CoarseClaims} {
		t.Run(conflict.String(), func(t *testing.T) {
			// No conflict: the two tasks of three that fit commit.
			h := newHarness(t)
			atomic := framework.Modes{Conflict: conflict, Txn: framework.Atomic}
			plan := framework.Schedule(framework.Profile{Filters: []framework.FilterPlugin{resourcefit.New()}}, h.snapshot(1000), h.pending("j", 3, 400))
			if len(plan.Placements) != 2 || len(plan.Failures) != 1 {
				t.Fatalf("plan: %d placed, %d failed", len(plan.Placements), len(plan.Failures))
			}
			res, err := framework.CommitPlan(h.ctx, h.store, plan, atomic, "batch-0", now)
			if err != nil || len(res.Committed) != 2 || h.counter("/alloc/m1/cpu") != "800" {
				t.Fatalf("partial plan: %v, %+v, cpu %s", err, res, h.counter("/alloc/m1/cpu"))
			}
		})
	}
	// A conflict on one placement: nothing commits; incrementally the
	// other does.
	for _, txn := range []framework.TxnMode{framework.Atomic, framework.Incremental} {
		t.Run("conflict/"+txn.String(), func(t *testing.T) {
			h := newHarness(t)
			snap := h.snapshot(1000)
			h.commit(snap, h.pending("rival", 1, 400), framework.Modes{})
			plan := framework.Schedule(framework.Profile{Filters: []framework.FilterPlugin{resourcefit.New()}}, snap, h.pending("j", 3, 400))
			res, err := framework.CommitPlan(h.ctx, h.store, plan, framework.Modes{Txn: txn}, "batch-0", now)
			if err != nil {
				t.Fatal(err)
			}
			want, cpu := 0, "400"
			if txn == framework.Incremental {
				want, cpu = 1, "800"
			}
			if len(res.Committed) != want || len(res.Conflicted) != 2-want || h.counter("/alloc/m1/cpu") != cpu {
				t.Fatalf("committed %d, conflicted %d, cpu %s; want %d, %d, %s", len(res.Committed), len(res.Conflicted),
					h.counter("/alloc/m1/cpu"), want, 2-want, cpu)
			}
		})
	}
}

// The claims counter reaches decisions as the cell's caches and the
// simulator deliver counters, through a scheduler.MachineView: its
// version is the snapshot's claim sequence number (under
// clientlib.ClaimsCounter), which leaves the machine's room alone.
func TestCoarseClaimsThroughMachineView(t *testing.T) {
	h := newHarness(t)
	view := scheduler.NewMachineView()
	h.store.Observe(func(cs *storev1.ChangeSet) {
		for _, ev := range cs.GetEvents() {
			kv := ev.GetKv()
			if !strings.HasPrefix(kv.GetKey(), clientlib.AllocPrefix) {
				continue
			}
			c, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
			if err != nil {
				t.Error(err)
				continue
			}
			view.SetCounter(kv.GetKey(), c.GetValue(), kv.GetVersion())
		}
	})
	view.SetMachine(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}}})
	modes := framework.Modes{Conflict: framework.CoarseClaims}
	commit := func(snap *framework.Snapshot, tasks []*framework.Task) *framework.Result {
		t.Helper()
		res, err := framework.CommitPlan(h.ctx, h.store, framework.Schedule(framework.Profile{}, snap, tasks), modes, "batch-0", now)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := commit(view.Snapshot(nil, ""), h.pending("a", 1, 300)); len(res.Committed) != 1 {
		t.Fatalf("a: %+v", res)
	}
	m := view.Machine("m1")
	kv, _ := h.store.Get(h.ctx, "/alloc/m1/claims")
	if m.AllocVersions[clientlib.ClaimsCounter] != kv.GetVersion() || m.Allocated[clientlib.ClaimsCounter] != 1 ||
		framework.RoomOf(m) != (framework.Room{CPU: 700, Memory: 1 << 30}) {
		t.Fatalf("view of m1: allocated %v at %v, room %+v; the store's claims at %d", m.Allocated, m.AllocVersions, framework.RoomOf(m), kv.GetVersion())
	}
	snap := view.Snapshot(nil, "")
	h.end("/tasks/ns/a/0")
	if res := commit(snap, h.pending("b", 1, 300)); len(res.Committed) != 1 {
		t.Fatalf("b after a's end: %+v", res)
	}
	if res := commit(snap, h.pending("c", 1, 300)); len(res.Committed) != 0 || res.Conflicted[0].Conflict.Key != "/alloc/m1/claims" {
		t.Fatalf("c after b's claim: %+v", res)
	}
}
