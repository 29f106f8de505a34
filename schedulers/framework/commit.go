package framework

import (
	"context"
	"fmt"
	"math"
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

// AllocKey is the key of machine m's counter of resource r.
func AllocKey(machine, resource string) string { return "/alloc/" + machine + "/" + resource }

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
// are unchanged since the snapshot). Conflicts are results, for the
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
		for r, v := range p.Task.Requests {
			key := AllocKey(p.Machine.Name, r)
			if modes.Conflict == Coarse {
				g.Require(key, p.Machine.AllocVersions[r]).Add(key, v, math.MinInt64, math.MaxInt64)
			} else {
				g.Add(key, v, 0, p.Machine.Capacity[r])
			}
		}
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
