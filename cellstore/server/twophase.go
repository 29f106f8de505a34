package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Cross-shard commits: this node drives a two-phase commit of the groups
// of a request that span shards (all of an atomic request's groups when
// they do), as the engine's package describes: PREPARE on every other
// participant in parallel, DECIDE on the coordinator (the lowest
// participant, whose own parts commit with the decision), RESOLVE on the
// other participants in parallel: 2n-1 proposals for n shards. A
// request's single-shard groups commit beside it as usual.
//
// The transaction's id is the request's txn_id with crossShardSuffix, so
// that its decision, remembered on the coordinator, is told apart from
// the outcome of the request's single-shard part there.
const crossShardSuffix = "\x00x"

// crossShard is one request's cross-shard transaction as the driver
// builds it.
type crossShard struct {
	id     string
	groups []int // request group indexes
	// parts: each participant's proposal, by shard.
	parts        map[uint32]*storev1.Proposal
	participants []uint32 // sorted; the first is the coordinator
}

// newCrossShard splits the groups of req at indexes groups into per-shard
// parts.
func (s *Server) newCrossShard(req *storev1.CommitRequest, groups []int, hash uint64, now time.Time) *crossShard {
	x := &crossShard{id: req.GetTxnId() + crossShardSuffix, groups: groups, parts: map[uint32]*storev1.Proposal{}}
	for _, gi := range groups {
		for sh, part := range s.splitGroup(req.GetGroups()[gi]) {
			p, ok := x.parts[sh]
			if !ok {
				p = &storev1.Proposal{TxnId: x.id, Phase: storev1.Phase_PHASE_PREPARE, Atomic: req.GetAtomic(),
					NowUnixNanos: now.UnixNano(), DedupeWindowNanos: int64(s.cfg.DedupeWindow), LogRetention: s.cfg.LogRetention,
					RequestHash: hash, DeadlineUnixNanos: now.Add(s.cfg.TxnTimeout).UnixNano()}
				x.parts[sh] = p
			}
			p.Groups = append(p.Groups, part)
			p.GroupIndexes = append(p.GroupIndexes, uint32(gi))
		}
	}
	x.participants = slices.Sorted(maps.Keys(x.parts))
	for _, p := range x.parts {
		p.Coordinator, p.Participants = x.participants[0], x.participants
	}
	return x
}

// splitGroup returns the part of g on each shard it touches.
func (s *Server) splitGroup(g *storev1.Group) map[uint32]*storev1.Group {
	parts := map[uint32]*storev1.Group{}
	part := func(k string) *storev1.Group {
		sh := s.router.Shard(k)
		if parts[sh] == nil {
			parts[sh] = &storev1.Group{}
		}
		return parts[sh]
	}
	for _, c := range g.GetConditions() {
		p := part(c.GetKey())
		p.Conditions = append(p.Conditions, c)
	}
	for _, op := range g.GetOps() {
		p := part(op.Key())
		p.Ops = append(p.Ops, op)
	}
	return parts
}

// commitCrossShard runs x and puts the results of its groups into resp.
// An error means the outcome is unknown to this node: the transaction may
// have been decided, and then commits (a retry with the same txn_id gets
// its outcome; recovery finishes it after its deadline).
// It reports whether the outcome was remembered from an earlier attempt.
func (s *Server) commitCrossShard(ctx context.Context, x *crossShard, atomic bool, resp *storev1.CommitResponse) (duplicate bool, err error) {
	if !s.inflight.TryAcquire(int64(len(x.participants))) {
		return false, errOverloaded
	}
	defer s.inflight.Release(int64(len(x.participants)))
	coordinator, others := x.participants[0], x.participants[1:]
	prepared, perr := s.eachShard(ctx, others, func(sh uint32) *storev1.Proposal { return x.parts[sh] })
	if s.cfg.PrepareDelay > 0 {
		select {
		case <-time.After(s.cfg.PrepareDelay):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	out := &storev1.Outcome{} // a participant's prepare is unknown: abort, so nothing stays held
	if perr == nil {
		out = decideOutcome(x, prepared, atomic)
	}
	// The coordinator's own parts commit with the decision.
	here := x.parts[coordinator]
	decided, err := s.backend.Propose(ctx, coordinator, &storev1.Proposal{TxnId: x.id, Phase: storev1.Phase_PHASE_DECIDE,
		Groups: here.GetGroups(), GroupIndexes: here.GetGroupIndexes(), Atomic: atomic, NowUnixNanos: s.cfg.Now().UnixNano(),
		DedupeWindowNanos: int64(s.cfg.DedupeWindow), LogRetention: s.cfg.LogRetention, RequestHash: here.GetRequestHash(), Outcome: out})
	if err != nil {
		return false, fmt.Errorf("cross-shard commit: decide on shard %d: %w", coordinator, err)
	}
	revisions, err := s.resolveAll(ctx, x.id, others, decided)
	if err != nil {
		return false, fmt.Errorf("cross-shard commit: resolve: %w", err)
	}
	revisions[coordinator] = decided.GetRevision()
	if decided.GetDuplicate() {
		// Decided before: the participants' revisions now are not the
		// ones the commit gave its keys. The first reply had those.
		revisions = nil
	}
	why := "the cross-shard transaction was aborted before it was decided (its driver stopped)"
	if perr != nil {
		why = "the cross-shard transaction was aborted: " + perr.Error()
	}
	fillResults(x, decided, revisions, why, resp)
	return decided.GetDuplicate(), nil
}

// eachShard proposes, on each shard in parallel, the proposal of that
// shard, and returns the outcomes by shard.
func (s *Server) eachShard(ctx context.Context, shards []uint32, prop func(uint32) *storev1.Proposal) (map[uint32]*storev1.Outcome, error) {
	outs := make([]*storev1.Outcome, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Go(func() { outs[i], errs[i] = s.backend.Propose(ctx, sh, prop(sh)) })
	}
	wg.Wait()
	res := map[uint32]*storev1.Outcome{}
	for i, sh := range shards {
		if errs[i] != nil {
			return nil, fmt.Errorf("shard %d: %w", sh, errs[i])
		}
		res[sh] = outs[i]
	}
	return res, nil
}

// decideOutcome is the request outcome of x's groups once every part is
// prepared (or not): a group commits when all its parts prepared, and in
// an atomic request only when every group does. Committed groups get
// their revisions at resolution.
func decideOutcome(x *crossShard, prepared map[uint32]*storev1.Outcome, atomic bool) *storev1.Outcome {
	failure := map[uint32]*storev1.Failure{}
	for _, sh := range x.participants {
		o := prepared[sh]
		for j, gi := range o.GetGroupIndexes() {
			if f := o.GetGroups()[j].GetFailure(); f != nil && failure[gi] == nil {
				failure[gi] = f
			}
		}
	}
	out := &storev1.Outcome{}
	for _, gi := range x.groups {
		g := &storev1.GroupResult{Committed: failure[uint32(gi)] == nil, Failure: failure[uint32(gi)]}
		out.Groups, out.GroupIndexes = append(out.Groups, g), append(out.GroupIndexes, uint32(gi))
	}
	if atomic && len(failure) > 0 {
		engine.AbortAll(out.Groups)
	}
	return out
}

// decision is what the participants apply of a decided outcome: the
// groups that commit (none when the outcome has no groups: an abort
// recorded by recovery).
func decision(decided *storev1.Outcome) *storev1.Decision {
	d := &storev1.Decision{}
	for j, g := range decided.GetGroups() {
		if g.GetCommitted() {
			d.CommittedGroups = append(d.CommittedGroups, decided.GetGroupIndexes()[j])
		}
	}
	return d
}

// resolveAll resolves transaction id on every participant as decided
// says, and returns each shard's revision after it.
func (s *Server) resolveAll(ctx context.Context, id string, participants []uint32, decided *storev1.Outcome) (map[uint32]uint64, error) {
	p := s.resolveProposal(id, decided)
	outs, err := s.eachShard(ctx, participants, func(uint32) *storev1.Proposal { return p })
	if err != nil {
		return nil, err
	}
	revs := map[uint32]uint64{}
	for sh, o := range outs {
		revs[sh] = o.GetRevision()
	}
	return revs, nil
}

func (s *Server) resolveProposal(id string, decided *storev1.Outcome) *storev1.Proposal {
	return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_RESOLVE, NowUnixNanos: s.cfg.Now().UnixNano(),
		DedupeWindowNanos: int64(s.cfg.DedupeWindow), LogRetention: s.cfg.LogRetention, Decision: decision(decided), Outcome: decided}
}

// fillResults puts the results of x's groups into resp: the decided
// result, with, for a committed group, its first shard's revision and
// every participant's in shard_revisions (none when revisions is nil: a
// retry's reply); groups the decision does not name were aborted, for
// the reason aborted.
func fillResults(x *crossShard, decided *storev1.Outcome, revisions map[uint32]uint64, aborted string, resp *storev1.CommitResponse) {
	byGroup := map[uint32]*storev1.GroupResult{}
	for j, gi := range decided.GetGroupIndexes() {
		byGroup[gi] = decided.GetGroups()[j]
	}
	for _, gi := range x.groups {
		var shards []uint32
		for _, sh := range x.participants {
			if slices.Contains(x.parts[sh].GetGroupIndexes(), uint32(gi)) {
				shards = append(shards, sh)
			}
		}
		g, ok := byGroup[uint32(gi)]
		if !ok || !g.GetCommitted() {
			f := g.GetFailure()
			if f == nil {
				f = &storev1.Failure{Reason: storev1.FailureReason_FAILURE_REASON_ABORTED, Message: aborted}
			}
			resp.Groups[gi] = &storev1.GroupResult{Failure: f, Shard: shards[0]}
			continue
		}
		r := &storev1.GroupResult{Committed: true, Shard: shards[0]}
		if revisions != nil {
			r.Revision, r.ShardRevisions = revisions[shards[0]], map[uint32]uint64{}
			for _, sh := range shards {
				r.ShardRevisions[sh] = revisions[sh]
			}
		}
		resp.Groups[gi] = r
	}
}

// ResolveOverdue resolves the cross-shard transactions prepared on shard
// whose deadline has passed: their driver is gone or stuck. Each is
// decided on its coordinator (abort, unless a decision is recorded
// already: the first decision wins) and resolved on this shard; the other
// participants' leaders do the same for theirs. The node calls it on the
// shards it leads.
func (s *Server) ResolveOverdue(ctx context.Context, shard uint32) (int, error) {
	res, err := s.backend.Read(ctx, shard, statemachine.OverdueQuery{Now: s.cfg.Now().UnixNano(), Limit: 64}, true)
	if err != nil {
		return 0, err
	}
	overdue := res.(*statemachine.OverdueResult)
	now := s.cfg.Now()
	for i, id := range overdue.IDs {
		rec := overdue.Records[i]
		if since := now.Sub(time.Unix(0, rec.GetDeadlineUnixNanos())); since > s.cfg.DedupeWindow-s.cfg.TxnTimeout {
			// Its decision may have been forgotten: deciding now could
			// abort what committed elsewhere. Safety first: keep it held.
			s.cfg.Logger.Error("a cross-shard transaction stayed prepared longer than decisions are kept; resolve it by hand",
				zap.String("txn", id), zap.Uint32("shard", shard), zap.Duration("overdue", since))
			continue
		}
		decided, err := s.backend.Propose(ctx, rec.GetCoordinator(), &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_DECIDE,
			NowUnixNanos: s.cfg.Now().UnixNano(), DedupeWindowNanos: int64(s.cfg.DedupeWindow), RequestHash: rec.GetRequestHash(),
			Outcome: &storev1.Outcome{}})
		if err != nil {
			return i, fmt.Errorf("recover %q: decide on shard %d: %w", id, rec.GetCoordinator(), err)
		}
		if _, err := s.backend.Propose(ctx, shard, s.resolveProposal(id, decided)); err != nil {
			return i, fmt.Errorf("recover %q: resolve on shard %d: %w", id, shard, err)
		}
		s.cfg.Logger.Info("resolved an overdue cross-shard transaction", zap.String("txn", id), zap.Uint32("shard", shard),
			zap.Int("committed_groups", len(decision(decided).GetCommittedGroups())))
	}
	return len(overdue.IDs), nil
}
