package framework

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// ConflictMode is how a commit detects that a machine changed under it.
type ConflictMode int

const (
	// Fine: take the task's requests with bounded counter adds; two
	// schedulers placing on one machine both succeed while it has room.
	Fine ConflictMode = iota
	// Coarse: require the machine's counters to be at the versions the
	// snapshot saw; any concurrent placement on the machine conflicts.
	Coarse
)

// TxnMode is how a plan's placements commit.
type TxnMode int

const (
	// Incremental: one group per placement; each commits or fails alone.
	Incremental TxnMode = iota
	// AllOrNothing: one atomic request (gang jobs).
	AllOrNothing
)

// Modes are a scheduler's commit modes.
type Modes struct {
	Conflict ConflictMode
	Txn      TxnMode
}

// take adds sign×requests to machine m's counters in group g: bounded by
// capacity in Fine mode, on condition of the snapshot's versions in
// Coarse mode.
func take(g *clientlib.Group, m *Machine, requests map[string]int64, sign int64, modes Modes) {
	for _, r := range slices.Sorted(maps.Keys(requests)) {
		key := clientlib.AllocKey(m.Name, r)
		if modes.Conflict == Coarse {
			g.Require(key, m.AllocVersions[r]).Add(key, sign*requests[r], math.MinInt64, math.MaxInt64)
		} else {
			g.Add(key, sign*requests[r], 0, m.Capacity[r])
		}
	}
}

// evict sends victim v back to pending in group g: its binding is cleared
// (on condition that it is still at the version the snapshot read), its
// Binding object deleted, and its requests given back to the machine.
func evict(g *clientlib.Group, v *Running, p Placement, modes Modes) {
	pending := proto.Clone(v.Task).(*troupev1.Task)
	pending.Binding = nil
	pending.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: "preempted by " + p.Task.Key}
	clientlib.PutObject(g, clientlib.Tasks, pending)
	g.Delete(clientlib.BindingKey(v.Task))
	take(g, p.Machine, v.Requests, -1, modes)
}

// Result is what committing a plan did.
type Result struct {
	Committed []Placement
	// Conflicted are placements that lost to another writer, with why.
	Conflicted []Conflicted
}

// Conflicted is a placement that did not commit.
type Conflicted struct {
	Placement Placement
	Conflict  *clientlib.Conflict
}

// CommitPlan writes a plan's placements in one request. For each
// placement: the task gets its binding (on condition that it is still at
// the version the scheduler read), its Binding object is created for the
// machine's agent, and the machine's counters take the task's requests
// (Fine: adds bounded by capacity; Coarse: on condition that the counters
// are unchanged since the snapshot). A preemption's victims go back to
// pending in the same group, so eviction and placement commit together. Conflicts are results, for the
// caller to refresh and retry; an error means the request failed.
func CommitPlan(ctx context.Context, s clientlib.Store, plan *Plan, modes Modes, scheduler string, now time.Time) (*Result, error) {
	if len(plan.Placements) == 0 {
		return &Result{}, nil
	}
	tx := clientlib.NewTxn(s)
	if modes.Txn == AllOrNothing {
		tx.Atomic()
	}
	for _, p := range plan.Placements {
		g := tx.Group()
		bound := proto.Clone(p.Task.Task).(*troupev1.Task)
		bound.Binding = &troupev1.TaskBinding{Machine: p.Machine.Name, Scheduler: scheduler, BoundAt: timestamppb.New(now)}
		bound.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_BOUND}
		clientlib.PutObject(g, clientlib.Tasks, bound)
		ref := clientlib.TaskRef(bound.GetMetadata().GetNamespace(), bound.GetSpec().GetJob(), bound.GetSpec().GetIndex())
		clientlib.PutObject(g, clientlib.Bindings, &troupev1.Binding{
			Metadata: &troupev1.ObjectMeta{Name: ref}, Machine: p.Machine.Name, Scheduler: scheduler,
			BoundAt: bound.Binding.BoundAt, Task: bound.GetSpec(),
		})
		for _, v := range p.Victims {
			evict(g, v, p, modes)
		}
		take(g, p.Machine, p.Task.Requests, 1, modes)
	}
	out, err := tx.Commit(ctx)
	if err != nil {
		return nil, fmt.Errorf("commit plan of %d placements: %w", len(plan.Placements), err)
	}
	res := &Result{}
	for i, g := range out.Groups {
		if g.Committed {
			res.Committed = append(res.Committed, plan.Placements[i])
		} else {
			res.Conflicted = append(res.Conflicted, Conflicted{Placement: plan.Placements[i], Conflict: g.Conflict})
		}
	}
	return res, nil
}
