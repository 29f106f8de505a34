package framework

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// take adds deltas to machine m's counters in group g, whose placements
// number claims: bounded by capacity in Fine and CoarseClaims mode, on
// condition of the snapshot's versions in Coarse mode. In CoarseClaims
// mode the group also requires the machine's claims counter at the
// snapshot's version and adds claims to it.
func take(g *clientlib.Group, m *Machine, deltas map[string]int64, claims int, modes Modes) {
	if modes.Conflict == CoarseClaims {
		key := clientlib.ClaimsKey(m.Name)
		g.Require(key, m.AllocVersions[clientlib.ClaimsCounter]).Add(key, int64(claims), 0, math.MaxInt64)
	}
	var buf [4]string
	for _, r := range resources(deltas, buf[:]) {
		key := clientlib.AllocKey(m.Name, r)
		if modes.Conflict == Coarse {
			g.Require(key, m.AllocVersions[r]).Add(key, deltas[r], math.MinInt64, math.MaxInt64)
		} else {
			g.Add(key, deltas[r], 0, m.Capacity[r])
		}
	}
}

// evict sends victim v back to pending in group g: its binding is cleared
// (on condition that it is still at the version the snapshot read) and
// its Binding object deleted; the caller gives its requests back to the
// machine.
func evict(g *clientlib.Group, v *Running, p Placement) {
	// v.Task is shared with the scheduler's cache: read, never written (as by EncodeBinding).
	pending := clientlib.TaskAt(v.Task, v.Task.GetMetadata().GetVersion())
	pending.Binding = nil
	pending.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: "preempted by " + p.Task.Key}
	clientlib.PutObject(g, clientlib.Tasks, pending)
	g.Delete(clientlib.BindingKey(v.Task))
}

// Result is what committing a plan did.
type Result struct {
	Committed []Placement
	// Conflicted are placements that lost to another writer, with why.
	Conflicted []Conflicted
	// Stopped are placements refused because their job was stopped or
	// deleted: not to be retried.
	Stopped []Placement
	// Counters are the machine counters the committed placements wrote,
	// for the scheduler to assume before its cache shows them: the value
	// is exact in Coarse mode (and for a claims counter) and a lower
	// bound in Fine and CoarseClaims mode (others may have added too),
	// the version is the commit's revision.
	Counters []CounterWrite
	// TaskVersions are the versions of the committed placements' tasks
	// after the commit, by task key.
	TaskVersions map[string]uint64
}

// CounterWrite is a counter's value and version after a commit.
type CounterWrite struct {
	Key     string
	Value   int64
	Version uint64
}

// Conflicted is a placement that did not commit.
type Conflicted struct {
	Placement Placement
	Conflict  *clientlib.Conflict
}

// CommitPlan writes a plan's placements, in one request. For each
// placement: the task gets its binding (on condition that it is still at
// the version the scheduler read), its Binding object is created for the
// machine's agent, and the machine's counters take the task's requests
// (Fine: adds bounded by capacity; Coarse: on condition that the counters
// are unchanged since the snapshot; CoarseClaims: adds bounded by
// capacity, on condition that no placement was committed on the machine
// since the snapshot, by its claims counter). A preemption's victims go
// back to pending in the same group, so eviction and placement commit
// together.
// Every placement is conditioned on its job still running
// (clientlib.RequireJobRunning): once a job's stop or deletion is
// committed, no placement of it commits, and the plan's placements of it
// come back in Stopped.
//
// Groups: Incremental mode in Fine detection gives each placement its
// own group. In Coarse and CoarseClaims detection the placements on one
// machine share a group, as in Omega, where a transaction's claims on a
// machine are all checked against the machine as the snapshot saw it:
// separate groups would fail on each other's writes. AllOrNothing and
// Atomic make the request atomic: CommitPlan commits whatever plan it
// is given, and the gang rule (no plan with failures) is the caller's
// (TxnMode.GangRule). An incremental plan too large for one request
// commits in several (see maxRequestGroups). Conflicts are results, for
// the caller to refresh and retry; an error means a request failed
// (placements committed by earlier requests of the plan stay committed,
// and the Result returned with the error lists them).
func CommitPlan(ctx context.Context, s clientlib.Store, plan *Plan, modes Modes, scheduler string, now time.Time) (*Result, error) {
	res := &Result{TaskVersions: map[string]uint64{}}
	groups := GroupPlacements(plan.Placements, modes)
	written := map[string]*CounterWrite{}
	for len(groups) > 0 {
		n := len(groups)
		if !modes.Txn.atomic() {
			n = requestSize(groups, modes)
		}
		err := commitGroups(ctx, s, groups[:n], modes, scheduler, now, res, written)
		if err != nil {
			res.Counters = counterWrites(written)
			return res, err
		}
		groups = groups[n:]
	}
	res.Counters = counterWrites(written)
	return res, nil
}

func counterWrites(written map[string]*CounterWrite) []CounterWrite {
	out := make([]CounterWrite, 0, len(written))
	for _, key := range slices.Sorted(maps.Keys(written)) {
		out = append(out, *written[key])
	}
	return out
}

// Bounds of one request of an incremental plan, well inside the store's
// default limits (1,024 groups, 4,096 operations): a larger job commits
// in several requests. An all-or-nothing plan is one request whatever
// its size; the store refuses one above its limits, with the reason.
const (
	maxRequestGroups = 256
	maxRequestOps    = 2048
)

// requestSize returns how many of groups fit in one request.
func requestSize(groups [][]Placement, modes Modes) int {
	ops := 0
	for i, members := range groups {
		n := 0
		if modes.Conflict == CoarseClaims {
			n += 2 // the claims counter's condition and add
		}
		for _, p := range members {
			n += 3 + 2*len(p.Victims) + 2*len(p.Task.Requests) // writes, the job's condition, and at most a condition and an add per resource
		}
		if i > 0 && (i == maxRequestGroups || ops+n > maxRequestOps) {
			return i
		}
		ops += n
	}
	return len(groups)
}

// commitGroups commits groups in one request and adds what happened to
// res, and the counters written to written.
func commitGroups(ctx context.Context, s clientlib.Store, groups [][]Placement, modes Modes, scheduler string, now time.Time,
	res *Result, written map[string]*CounterWrite) error {
	tx := clientlib.NewTxn(s)
	if modes.Txn.atomic() {
		tx.Atomic()
	}
	deltas := make([]map[string]int64, len(groups))
	placements := 0
	for i, members := range groups {
		g := tx.Group()
		for _, p := range members {
			placements++
			writeBinding(s, g, p, scheduler, now)
			for _, v := range p.Victims {
				evict(g, v, p)
			}
		}
		deltas[i] = deltasOf(members)
		take(g, members[0].Machine, deltas[i], len(members), modes)
	}
	out, err := tx.Commit(ctx)
	if err != nil {
		return fmt.Errorf("commit plan of %d placements: %w", placements, err)
	}
	for i, g := range out.Groups {
		members := groups[i]
		if !g.Committed {
			for _, p := range members {
				if clientlib.JobStopped(g.Conflict) {
					res.Stopped = append(res.Stopped, p)
					continue
				}
				res.Conflicted = append(res.Conflicted, Conflicted{Placement: p, Conflict: g.Conflict})
			}
			continue
		}
		res.Committed = append(res.Committed, members...)
		for _, p := range members {
			res.TaskVersions[p.Task.Key] = g.VersionOf(p.Task.Key)
		}
		m := members[0].Machine
		for r, delta := range deltas[i] {
			key := clientlib.AllocKey(m.Name, r)
			w, ok := written[key]
			if !ok {
				w = &CounterWrite{Key: key, Value: m.Allocated[r]}
				written[key] = w
			}
			w.Value += delta
			w.Version = g.VersionOf(key)
		}
		if modes.Conflict == CoarseClaims {
			key := clientlib.ClaimsKey(m.Name)
			w, ok := written[key]
			if !ok {
				w = &CounterWrite{Key: key, Value: m.Allocated[clientlib.ClaimsCounter]}
				written[key] = w
			}
			w.Value += int64(len(members))
			w.Version = g.VersionOf(key)
		}
	}
	return nil
}

// deltasOf returns what the placements of a group add to their
// machine's counters, by resource: their tasks' requests less their
// victims'. Those of a lone placement without victims are its task's
// Requests, returned as they are (to be read, never written): in Fine
// mode every placement is such a group.
func deltasOf(members []Placement) map[string]int64 {
	if len(members) == 1 && len(members[0].Victims) == 0 {
		return members[0].Task.Requests
	}
	deltas := map[string]int64{}
	for _, p := range members {
		for r, q := range p.Task.Requests {
			deltas[r] += q
		}
		for _, v := range p.Victims {
			for r, q := range v.Requests {
				deltas[r] -= q
			}
		}
	}
	return deltas
}

// GroupPlacements splits placements into the request's groups: one per
// placement, or one per machine in Coarse and CoarseClaims mode (in
// order of first appearance). A group of one placement is a slice of ps
// (read it, do not change it).
func GroupPlacements(ps []Placement, modes Modes) [][]Placement {
	var groups [][]Placement
	if modes.Conflict == Fine {
		groups = make([][]Placement, len(ps))
		for i := range ps {
			groups[i] = ps[i : i+1 : i+1]
		}
		return groups
	}
	at := map[string]int{}
	for _, p := range ps {
		i, ok := at[p.Machine.Name]
		if !ok {
			i = len(groups)
			at[p.Machine.Name] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], p)
	}
	return groups
}

// EncodedBinding is a placement's writes, validated and encoded by
// EncodeBinding.
type EncodedBinding struct {
	scheduler string
	now       time.Time
	task      clientlib.Encoded[*troupev1.Task]
	binding   clientlib.Encoded[*troupev1.Binding]
}

// EncodeBinding readies the writes that bind p's task to its machine,
// for a commit of its plan on s as scheduler at now: the task, bound, and
// the Binding object the machine's agent watches. It is safe for
// concurrent use, so that a caller can have them made as the plan is
// (Profile.Placed) and set them as the placement's Encoded; CommitPlan
// then only writes them.
func EncodeBinding(s clientlib.Store, p Placement, scheduler string, now time.Time) *EncodedBinding {
	t := p.Task.Task // shared with the scheduler's cache: read, never written
	bound := &troupev1.Task{Metadata: t.GetMetadata(), Spec: t.GetSpec(), Charge: t.GetCharge(),
		Binding: &troupev1.TaskBinding{Machine: p.Machine.Name, Scheduler: scheduler, BoundAt: timestamppb.New(now)},
		Status:  &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_BOUND}}
	ref := clientlib.TaskRef(bound.GetMetadata().GetNamespace(), bound.GetSpec().GetJob(), bound.GetSpec().GetIndex())
	return &EncodedBinding{scheduler: scheduler, now: now,
		task: clientlib.EncodeObject(s, clientlib.Tasks, bound),
		binding: clientlib.EncodeObject(s, clientlib.Bindings, &troupev1.Binding{
			Metadata: &troupev1.ObjectMeta{Name: ref}, Machine: p.Machine.Name, Scheduler: scheduler,
			BoundAt: bound.Binding.BoundAt, Task: bound.GetSpec(),
		})}
}

// writeBinding binds p's task to its machine in group g of a transaction
// on s (on condition that the task is still at the version the scheduler
// read and its job runs), with the writes of p.Encoded if they are for
// the same scheduler and time.
func writeBinding(s clientlib.Store, g *clientlib.Group, p Placement, scheduler string, now time.Time) {
	e := p.Encoded
	if e == nil || e.scheduler != scheduler || !e.now.Equal(now) {
		e = EncodeBinding(s, p, scheduler, now)
	}
	spec := p.Task.Task.GetSpec()
	clientlib.RequireJobRunning(g, p.Task.Task.GetMetadata().GetNamespace(), spec.GetJob())
	clientlib.PutEncoded(g, clientlib.Tasks, e.task)
	clientlib.PutEncoded(g, clientlib.Bindings, e.binding)
}
