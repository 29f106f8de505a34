package scheduler

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// shadowCommit is a Shadow's Committer: it writes nothing, and says what
// framework.CommitPlan would have done with a plan at this moment, the
// decision just made, against the cell as the shadow's cache shows it
// now, with the same groups and conditions:
//
//   - fine (and the resources of coarse-claims): a placement's group
//     conflicts if one of its counters, with what the plan's earlier
//     groups took, has no room left for its requests (the store's bounded
//     add);
//   - coarse: a machine's group conflicts if one of the counters it takes
//     is at another version than the decision's snapshot read;
//   - coarse-claims: also if the machine's claims counter is;
//   - gang and atomic plans: a conflict anywhere rolls every placement
//     back.
//
// Two conditions of a real commit are left out, by design. A placement's
// task is bound by a real scheduler sooner or later (that is what the
// shadow is compared with), so the task's version is not required; a task
// deleted or finished by now is Stopped, as a stopped job's. And what the
// real schedulers' placements of the plan's own tasks take (own: as at
// the snapshot; the cache shows them now) would have been the shadow's
// own placements had it been in charge: their requests are not counted as
// taken, and a changed counter that they account for exactly (the
// counter's value less theirs as at the snapshot) is not a conflict.
type shadowCommit struct {
	s   *Shadow
	own map[string]map[string]int64
}

func (c shadowCommit) Commit(_ context.Context, plan *framework.Plan) (*framework.Result, error) {
	s, modes := c.s, c.s.cfg.Modes
	tasks := make([]*framework.Task, 0, len(plan.Placements)+len(plan.Failures))
	for _, p := range plan.Placements {
		tasks = append(tasks, p.Task)
	}
	for _, f := range plan.Failures {
		tasks = append(tasks, f.Task)
	}
	ownNow := s.ownPlacements(tasks)
	res := &framework.Result{}
	now := map[string]map[string]int64{} // by machine: the counters now, less own, with what earlier groups took
	type verdict struct {
		conflict *clientlib.Conflict
		stopped  bool
	}
	groups := framework.GroupPlacements(plan.Placements, modes)
	verdicts := make([]verdict, len(groups))
	failed := false
	for i, members := range groups {
		sm := members[0].Machine // as the snapshot saw it, own given back
		cur := s.view.Machine(sm.Name)
		if cur == nil {
			cur = sm // not registered now: the counters cannot be read; as they were
		}
		alloc, ok := now[sm.Name]
		if !ok {
			alloc = withoutOwn(cur.Allocated, ownNow[sm.Name])
			if cur == sm {
				alloc = maps.Clone(sm.Allocated)
			}
			now[sm.Name] = alloc
		}
		deltas := map[string]int64{}
		for _, p := range members {
			if t, ok := s.tasks.Indexer().Get(p.Task.Key); !ok || t.GetBinding().GetMachine() == "" && !clientlib.Pending(t) {
				verdicts[i].stopped = true
			}
			for r, q := range p.Task.Requests {
				deltas[r] += q
			}
			for _, v := range p.Victims {
				for r, q := range v.Requests {
					deltas[r] -= q
				}
				if t, ok := s.tasks.Indexer().Get(v.Key); !ok || t.GetMetadata().GetVersion() != v.Task.GetMetadata().GetVersion() {
					verdicts[i].conflict = &clientlib.Conflict{Reason: storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH, Key: v.Key,
						CurrentVersion: t.GetMetadata().GetVersion(), Message: fmt.Sprintf("victim %s changed since the snapshot", v.Key)}
				}
			}
		}
		if verdicts[i].stopped {
			failed = true
			continue
		}
		explained := func(r string) bool { // a change the real placements of the plan's own tasks account for
			return !maps.Equal(c.own[sm.Name], ownNow[sm.Name]) && alloc[r] == sm.Allocated[r]
		}
		resources := slices.Sorted(maps.Keys(deltas))
		if verdicts[i].conflict == nil && modes.Conflict == framework.CoarseClaims {
			if v, was := cur.AllocVersions[clientlib.ClaimsCounter], sm.AllocVersions[clientlib.ClaimsCounter]; v != was && !explained(clientlib.ClaimsCounter) {
				verdicts[i].conflict = &clientlib.Conflict{Reason: storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH,
					Key: clientlib.ClaimsKey(sm.Name), CurrentVersion: v,
					Message: fmt.Sprintf("another placement on %s since the snapshot (claims at version %d, the snapshot read %d)", sm.Name, v, was)}
			}
		}
		for _, r := range resources {
			if verdicts[i].conflict != nil {
				break
			}
			key := clientlib.AllocKey(sm.Name, r)
			if modes.Conflict == framework.Coarse {
				if v, was := cur.AllocVersions[r], sm.AllocVersions[r]; v != was && !explained(r) {
					verdicts[i].conflict = &clientlib.Conflict{Reason: storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH, Key: key,
						CurrentVersion: v, Message: fmt.Sprintf("%s of %s changed since the snapshot (version %d, the snapshot read %d)", r, sm.Name, v, was)}
				}
				continue
			}
			if after := alloc[r] + deltas[r]; after < 0 || after > sm.Capacity[r] {
				verdicts[i].conflict = &clientlib.Conflict{Reason: storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED, Key: key,
					CurrentVersion: cur.AllocVersions[r], Message: fmt.Sprintf("no room for %s %s on %s: %s of %s taken",
						clientlib.FormatQuantity(r, deltas[r]), r, sm.Name, clientlib.FormatQuantity(r, alloc[r]), clientlib.FormatQuantity(r, sm.Capacity[r]))}
			}
		}
		if verdicts[i].conflict != nil {
			failed = true
			continue
		}
		for _, r := range resources { // taken, for the plan's later groups
			alloc[r] += deltas[r]
		}
	}
	atomic := modes.Txn == framework.AllOrNothing || modes.Txn == framework.Atomic
	for i, members := range groups {
		v := verdicts[i]
		if atomic && failed && !v.stopped && v.conflict == nil {
			v.conflict = &clientlib.Conflict{Reason: storev1.FailureReason_FAILURE_REASON_ABORTED,
				Message: "rolled back with the plan's other placements"}
		}
		for _, p := range members {
			switch {
			case v.stopped:
				res.Stopped = append(res.Stopped, p)
			case v.conflict != nil:
				res.Conflicted = append(res.Conflicted, framework.Conflicted{Placement: p, Conflict: v.conflict})
			default:
				res.Committed = append(res.Committed, p)
			}
		}
	}
	return res, nil
}
