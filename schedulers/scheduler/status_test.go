package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// statusRig is one scheduler instance over the in-memory store under a
// virtual clock, decided about with Drain, with the store's commits
// counted: all of them, those that write a JobScheduling, and those that
// write a job (none: schedulers may not). Its events go to a store of
// their own, so that their writes, in the background, are not counted.
type statusRig struct {
	t             *testing.T
	ctx           context.Context
	clock         *cachetest.Clock
	store         *memstore.Store
	meddler       *meddling
	sched         *scheduler.Scheduler
	events        *clientlib.EventRecorder
	eventStore    *memstore.Store
	commits, says atomic.Int64
	jobWrites     atomic.Int64
	decisions     int
}

func newStatusRig(t *testing.T, kind string) *statusRig {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	r := &statusRig{t: t, ctx: ctx, clock: cachetest.NewClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))}
	r.store = memstore.New(r.clock.Now, time.Minute)
	r.store.Observe(func(cs *storev1.ChangeSet) {
		r.commits.Add(1)
		var says, jobs bool
		for _, e := range cs.GetEvents() {
			says = says || strings.HasPrefix(e.GetKv().GetKey(), clientlib.JobSchedulings.Prefix)
			jobs = jobs || strings.HasPrefix(e.GetKv().GetKey(), clientlib.Jobs.Prefix)
		}
		if says {
			r.says.Add(1)
		}
		if jobs {
			r.jobWrites.Add(1)
		}
	})
	r.eventStore = memstore.New(r.clock.Now, time.Minute)
	ecfg := clientlib.DefaultEventRecorderConfig(kind + "-0")
	ecfg.Now = r.clock.Now
	var err error
	if r.events, err = clientlib.NewEventRecorder(r.eventStore, ecfg); err != nil {
		t.Fatal(err)
	}
	go r.events.Run(ctx)
	r.meddler = &meddling{Store: r.store}
	cc := scheduler.NewCellCache(r.meddler, zap.NewNop())
	prof, modes, err := profiles.New(kind, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	r.sched, err = scheduler.New(r.meddler, scheduler.Config{Name: kind + "-0", Kind: kind, Profile: prof, Modes: modes,
		Policy: scheduler.DefaultPolicy(time.Second), Cache: cc, Clock: r.clock, Events: r.events, Logger: zap.NewNop(),
		Observe: func(scheduler.Decision) { r.decisions++ }})
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.store.WaitForWatches(ctx, 3); err != nil {
		t.Fatal(err)
	}
	return r
}

// settle waits until the caches hold everything committed.
func (r *statusRig) settle() {
	if err := r.store.Quiesce(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// put writes objs in one transaction.
func (r *statusRig) put(objs ...any) {
	r.t.Helper()
	tx := clientlib.NewTxn(r.store)
	for _, o := range objs {
		switch o := o.(type) {
		case *troupev1.Machine:
			clientlib.PutObject(tx.Group(), clientlib.Machines, o)
		case *troupev1.Job:
			clientlib.CreateObject(tx.Group(), clientlib.Jobs, o)
		case *troupev1.Task:
			clientlib.PutObject(tx.Group(), clientlib.Tasks, o)
		}
	}
	out, err := tx.Commit(r.ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.settle()
}

// decide makes the decisions due now, and returns how many there were
// and the commits they made, all and of JobSchedulings. It fails the
// test if one wrote a job.
func (r *statusRig) decide() (made int, commits, says int64) {
	r.t.Helper()
	d0, c0, s0, j0 := r.decisions, r.commits.Load(), r.says.Load(), r.jobWrites.Load()
	r.sched.Drain(r.ctx, r.settle)
	if n := r.jobWrites.Load() - j0; n > 0 {
		r.t.Errorf("the scheduler wrote jobs %d times", n)
	}
	return r.decisions - d0, r.commits.Load() - c0, r.says.Load() - s0
}

// retry moves the clock to when the next waiting job falls due and
// decides.
func (r *statusRig) retry() (made int, commits, says int64) {
	r.t.Helper()
	due, ok := r.sched.NextDelayed()
	if !ok {
		r.t.Fatal("no job waits")
	}
	r.clock.Set(due)
	return r.decide()
}

// scheduling returns what job ns/name's JobScheduling says (nil: there
// is none).
func (r *statusRig) scheduling(name string) *troupev1.SchedulingStatus {
	r.t.Helper()
	js, err := clientlib.Get(r.ctx, r.store, clientlib.JobSchedulings, clientlib.JobSchedulings.Prefix+"ns/"+name)
	if errors.Is(err, clientlib.ErrNotFound) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return js.GetStatus()
}

// jobEvents returns the events of job ns/name written so far, by reason:
// what the recorder queued before it is written first.
func (r *statusRig) jobEvents(name string) map[string][]*troupev1.Event {
	r.t.Helper()
	r.events.Record(clientlib.Jobs.Name, "ns", "sentinel", "sentinel", clientlib.EventNormal, "Sentinel", r.clock.Now().String())
	wait.Until(r.ctx, r.t, "the events recorded so far to be written", func() (bool, string) {
		evs, _, err := clientlib.List(r.ctx, r.eventStore, clientlib.Events, "ns/sentinel/")
		return err == nil && len(evs) > 0 && evs[len(evs)-1].GetMessage() == r.clock.Now().String(), fmt.Sprint(evs, err)
	})
	evs, _, err := clientlib.List(r.ctx, r.eventStore, clientlib.Events, "ns/"+name+"/")
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string][]*troupev1.Event{}
	for _, e := range evs {
		out[e.GetReason()] = append(out[e.GetReason()], e)
	}
	return out
}

func machine(name, zone string, cpu int64, cordoned bool) *troupev1.Machine {
	return &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: name, Labels: map[string]string{"zone": zone}},
		Spec:   &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": cpu, "memory": 8 << 30}, Unschedulable: cordoned},
		Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}}
}

// job returns job ns/name of count tasks of kind asking for cpu in zone
// a, and its tasks (a gang of them, for the gang kind).
func job(name, kind string, count int32, cpu int64, now time.Time) (*troupev1.Job, []*troupev1.Task) {
	template := &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": cpu}}
	constraints := &troupev1.Constraints{MatchLabels: map[string]string{"zone": "a"}}
	var gang int32
	if kind == profiles.Gang {
		gang = count
	}
	j := &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: &troupev1.JobSpec{Count: count, Scheduler: kind, Template: template, Constraints: constraints, GangMin: gang}}
	var tasks []*troupev1.Task
	for i := range count {
		tasks = append(tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(name, i), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: name, Index: i, Scheduler: kind, Template: template, Constraints: constraints, GangMin: gang,
				Submitted: timestamppb.New(now)},
			Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING}})
	}
	return j, tasks
}

// meddling is a store on which another writer (another instance, an
// admin) writes a JobScheduling, once, just before the next write of it;
// it counts the reads of JobSchedulings.
type meddling struct {
	clientlib.Store
	mu    sync.Mutex
	job   string
	write func(context.Context, clientlib.Store)
	reads atomic.Int64
	// refuse, while set, fails the commits that write JobSchedulings, as
	// the store does a caller not allowed to; refused counts them.
	refuse  atomic.Bool
	refused atomic.Int64
}

func (m *meddling) Get(ctx context.Context, key string) (*storev1.KeyValue, error) {
	if strings.HasPrefix(key, clientlib.JobSchedulings.Prefix) {
		m.reads.Add(1)
	}
	return m.Store.Get(ctx, key)
}

// before has write run before the next commit that writes key.
func (m *meddling) before(key string, write func(context.Context, clientlib.Store)) {
	m.mu.Lock()
	m.job, m.write = key, write
	m.mu.Unlock()
}

// pending reports whether the write before has not run yet.
func (m *meddling) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.write != nil
}

func (m *meddling) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	m.mu.Lock()
	var write func(context.Context, clientlib.Store)
	for _, g := range req.GetGroups() {
		for _, op := range g.GetOps() {
			if m.write != nil && (op.GetPut().GetKey() == m.job || op.GetDelete().GetKey() == m.job) {
				write, m.write = m.write, nil
			}
			if m.refuse.Load() && strings.HasPrefix(op.GetPut().GetKey()+op.GetDelete().GetKey(), clientlib.JobSchedulings.Prefix) {
				m.mu.Unlock()
				m.refused.Add(1)
				return nil, errors.New("permission denied")
			}
		}
	}
	m.mu.Unlock()
	if write != nil {
		write(ctx, m.Store)
	}
	return m.Store.Commit(ctx, req)
}

// A job whose task fits nowhere gets its JobScheduling, with the
// machines each filter refused, at its first decision; its further
// decisions with the same verdict, retried by back-off, write nothing
// (and record no event) and read nothing; a changed verdict is written
// once, retried from a fresh read when another writer wrote the object
// meanwhile; the placement of its task deletes the object, done when
// someone else deleted it first. A task without a job object gets its
// JobScheduling and an event per verdict as well. The job is never
// written.
func TestSchedulingStatusWrittenOnChange(t *testing.T) {
	r := newStatusRig(t, profiles.Batch)
	// m0 is cordoned, m1 in the wrong zone, m2 too small.
	r.put(machine("m0", "a", 8000, true), machine("m1", "b", 8000, false), machine("m2", "a", 2000, false))
	j, tasks := job("big", profiles.Batch, 1, 4000, r.clock.Now())
	_, loose := job("loose", profiles.Batch, 1, 4000, r.clock.Now()) // no job object
	r.put(j, tasks[0], loose[0])

	if n, commits, says := r.decide(); n != 2 || commits != 2 || says != 2 {
		t.Fatalf("first decisions: %d decisions, %d commits (%d of JobSchedulings), want 2 and a JobScheduling each", n, commits, says)
	}
	first := r.scheduling("big")
	want := map[string]int32{"Schedulable": 1, "LabelSelector": 1, "ResourceFit": 1}
	if first.GetReason() != scheduler.ReasonUnschedulable || first.GetScheduler() != "batch-0" || !maps.Equal(first.GetRefused(), want) ||
		first.GetMachines() != 3 || first.GetUnplaced() != 1 || !first.GetTime().AsTime().Equal(r.clock.Now()) ||
		!strings.HasPrefix(first.GetMessage(), "0/3 machines fit: ") || !strings.Contains(first.GetMessage(), "1× ResourceFit (insufficient cpu") {
		t.Fatalf("JobScheduling %v, want Unschedulable by batch-0 now, refused %v of 3 machines, 1 unplaced", first, want)
	}
	if got := r.scheduling("loose"); got.GetUnplaced() != 1 || got.GetMachines() != 3 {
		t.Fatalf("JobScheduling of the task without a job object: %v", got)
	}

	const again = 5
	reads := r.meddler.reads.Load()
	for i := range again {
		if n, commits, _ := r.retry(); n == 0 || commits != 0 {
			t.Fatalf("retry %d: %d decisions made %d commits, want none", i, n, commits)
		}
	}
	if n := r.meddler.reads.Load() - reads; n != 0 {
		t.Fatalf("identical decisions read JobSchedulings %d times, want none", n)
	}
	if got := r.scheduling("big"); !got.GetTime().AsTime().Equal(first.GetTime().AsTime()) {
		t.Fatalf("JobScheduling rewritten by identical decisions: %v", got)
	}

	// A fourth machine, too small too, changes the verdict; another
	// writer (an instance that had the job before) writes the object
	// just before the scheduler does.
	r.put(machine("m3", "a", 2000, false))
	key := clientlib.JobSchedulings.Prefix + "ns/big"
	r.meddler.before(key, func(ctx context.Context, s clientlib.Store) {
		js, err := clientlib.Get(ctx, s, clientlib.JobSchedulings, key)
		if err == nil {
			js.Status.Scheduler, js.Status.Message = "batch-old", "stale"
			_, err = clientlib.Update(ctx, s, clientlib.JobSchedulings, js)
		}
		if err != nil {
			t.Error(err)
		}
	})
	for {
		n, _, _ := r.retry()
		if got := r.scheduling("big"); got.GetMachines() == 4 {
			break
		}
		if n == 0 {
			t.Fatal("no decision")
		}
	}
	if got := r.scheduling("big"); r.meddler.pending() || got.GetScheduler() != "batch-0" || got.GetRefused()["ResourceFit"] != 2 {
		t.Fatalf("after a conflict with another writer: %v, want the new verdict by batch-0", got)
	}
	for i := range again {
		if n, commits, _ := r.retry(); n == 0 || commits != 0 {
			t.Fatalf("retry %d of the new verdict: %d decisions made %d commits, want none", i, n, commits)
		}
	}

	// Room in zone a: both tasks are placed, and their JobSchedulings
	// deleted; big's by someone else first.
	r.meddler.before(key, func(ctx context.Context, s clientlib.Store) {
		if err := clientlib.Delete(ctx, s, clientlib.JobSchedulings, &troupev1.JobScheduling{
			Metadata: &troupev1.ObjectMeta{Name: "big", Namespace: "ns"}}); err != nil {
			t.Error(err)
		}
	})
	r.put(machine("m4", "a", 8000, false))
	if n, _, _ := r.decide(); n != 2 || r.meddler.pending() {
		t.Fatalf("placement: %d decisions (the other delete done: %v), want 2", n, !r.meddler.pending())
	}
	for _, name := range []string{"big", "loose"} {
		if got := r.scheduling(name); got != nil {
			t.Fatalf("job %s: JobScheduling %v after the placement, want none", name, got)
		}
	}

	// One event per verdict (two: without m3, with it), never bumped,
	// for a job object or none.
	for _, name := range []string{"big", "loose"} {
		failed := r.jobEvents(name)["FailedScheduling"]
		if len(failed) != 2 {
			t.Errorf("job %s: %d FailedScheduling events, want 2: %v", name, len(failed), failed)
		}
		for _, e := range failed {
			if e.GetCount() != 1 {
				t.Errorf("job %s: event %q counted %d times, want once", name, e.GetMessage(), e.GetCount())
			}
		}
	}
}

// A gang that does not fit whole gets its JobScheduling, all its tasks
// unplaced, once; identical decisions write nothing.
func TestGangSchedulingStatus(t *testing.T) {
	r := newStatusRig(t, profiles.Gang)
	r.put(machine("m0", "a", 4000, false), machine("m1", "a", 2000, false))
	j, tasks := job("g", profiles.Gang, 2, 3000, r.clock.Now())
	r.put(j, tasks[0], tasks[1])
	if n, commits, says := r.decide(); n != 1 || commits != 1 || says != 1 {
		t.Fatalf("first decision: %d decisions, %d commits (%d of JobSchedulings), want 1 and one JobScheduling write", n, commits, says)
	}
	got := r.scheduling("g")
	if got.GetReason() != scheduler.ReasonUnschedulable || got.GetUnplaced() != 2 || got.GetMachines() != 2 ||
		got.GetRefused()["ResourceFit"] != 2 || !strings.HasPrefix(got.GetMessage(), "gang of 2 not placed: 1 task(s) fit nowhere: 0/2 machines fit") {
		t.Fatalf("JobScheduling %v, want the gang's 2 tasks unplaced", got)
	}
	for i := range 3 {
		if n, commits, _ := r.retry(); n == 0 || commits != 0 {
			t.Fatalf("retry %d: %d decisions made %d commits, want none", i, n, commits)
		}
	}
	if failed := r.jobEvents("g")["FailedScheduling"]; len(failed) != 1 || failed[0].GetCount() != 1 {
		t.Fatalf("FailedScheduling events %v, want one, once", failed)
	}
}

// A scheduler that starts (again) finds and deletes the JobScheduling a
// job's scheduler wrote before, when it places the job's tasks submitted
// before it started; a job submitted since is placed without reading
// its JobScheduling.
func TestSchedulingStatusClearedAfterRestart(t *testing.T) {
	r := newStatusRig(t, profiles.Batch)
	r.put(machine("m0", "a", 8000, false))
	old, oldTasks := job("old", profiles.Batch, 1, 1000, r.clock.Now().Add(-time.Minute))
	r.put(old, oldTasks[0])
	if _, err := clientlib.Create(r.ctx, r.store, clientlib.JobSchedulings, &troupev1.JobScheduling{
		Metadata: &troupev1.ObjectMeta{Name: "old", Namespace: "ns"},
		Status: &troupev1.SchedulingStatus{Scheduler: "batch-0", Reason: scheduler.ReasonUnschedulable,
			Unplaced: 1, Time: timestamppb.New(r.clock.Now().Add(-time.Minute))}}); err != nil {
		t.Fatal(err)
	}
	r.settle()
	if n, _, says := r.decide(); n != 1 || says != 1 || r.scheduling("old") != nil {
		t.Fatalf("placing a job older than the scheduler: %d decisions, %d writes of JobSchedulings, JobScheduling %v; want 1, 1 and none",
			n, says, r.scheduling("old"))
	}
	r.clock.Advance(time.Second)
	fresh, freshTasks := job("fresh", profiles.Batch, 1, 1000, r.clock.Now())
	r.put(fresh, freshTasks[0])
	reads := r.meddler.reads.Load()
	if n, _, says := r.decide(); n != 1 || says != 0 || r.meddler.reads.Load() != reads {
		t.Fatalf("placing a new job: %d decisions, %d writes and %d reads of JobSchedulings, want 1, none and none",
			n, says, r.meddler.reads.Load()-reads)
	}
}

// A JobScheduling the store refuses to write is tried once per verdict,
// not at every decision, and the verdict's event recorded all the same;
// once the store takes writes again, the placement finds there is
// nothing to delete.
func TestSchedulingStatusWriteRefused(t *testing.T) {
	r := newStatusRig(t, profiles.Batch)
	r.put(machine("m0", "a", 2000, false))
	j, tasks := job("big", profiles.Batch, 1, 4000, r.clock.Now())
	r.put(j, tasks[0])
	r.meddler.refuse.Store(true)
	if n, commits, _ := r.decide(); n != 1 || commits != 0 || r.meddler.refused.Load() != 1 {
		t.Fatalf("first decision: %d decisions, %d commits, %d refused; want 1, none and 1", n, commits, r.meddler.refused.Load())
	}
	for i := range 3 {
		if n, _, _ := r.retry(); n == 0 || r.meddler.refused.Load() != 1 {
			t.Fatalf("retry %d: %d decisions, %d refused writes in all; want no new write", i, n, r.meddler.refused.Load())
		}
	}
	r.meddler.refuse.Store(false)
	reads := r.meddler.reads.Load()
	r.put(machine("m1", "a", 8000, false))
	if n, _, says := r.decide(); n != 1 || says != 0 || r.meddler.reads.Load() != reads+1 || r.scheduling("big") != nil {
		t.Fatalf("placement: %d decisions, %d writes and %d reads of JobSchedulings, want 1, none and one", n, says, r.meddler.reads.Load()-reads)
	}
	if failed := r.jobEvents("big")["FailedScheduling"]; len(failed) != 1 || failed[0].GetCount() != 1 {
		t.Fatalf("FailedScheduling events %v, want one, once", failed)
	}
}

// The deletion of a waiting job's tasks (its job deleted) ends its wait:
// its JobScheduling goes at once, not at the end of its back-off.
func TestSchedulingStatusGoesWithTasks(t *testing.T) {
	r := newStatusRig(t, profiles.Batch)
	r.put(machine("m0", "a", 2000, false))
	j, tasks := job("big", profiles.Batch, 1, 4000, r.clock.Now())
	r.put(j, tasks[0])
	if n, _, says := r.decide(); n != 1 || says != 1 || r.scheduling("big") == nil {
		t.Fatalf("first decision: %d decisions, %d JobScheduling writes, want 1 and 1", n, says)
	}
	stored, err := clientlib.Get(r.ctx, r.store, clientlib.Tasks, clientlib.Tasks.Prefix+clientlib.TaskRef("ns", "big", 0))
	if err == nil {
		err = clientlib.Delete(r.ctx, r.store, clientlib.Tasks, stored)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.settle()
	if _, _, says := r.decide(); says != 1 || r.scheduling("big") != nil { // no time passes
		t.Fatalf("after deleting the task: %d JobScheduling writes, JobScheduling %v; want it deleted", says, r.scheduling("big"))
	}
}
