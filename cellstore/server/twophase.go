package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Cross-shard commits: this node drives the groups of a request that span
// shards (all of an atomic request's groups when they do) as the engine's
// package describes: PREPARE on every participant in parallel, which
// decides the transaction (engine.Settle), then RESOLVE on every
// participant in parallel: two rounds of consensus, 2n proposals for n
// shards. The reply waits for the resolutions, so an acknowledged write
// is applied everywhere before anyone is told. A request's single-shard
// groups commit beside it as usual.
//
// The transaction's id is the request's txn_id with crossShardSuffix, so
// that its records are told apart from the outcome of the request's
// single-shard part.
const crossShardSuffix = "\x00x"

// crossShard is one request's cross-shard transaction as the driver
// builds it.
type crossShard struct {
	id     string
	groups []int // request group indexes
	// parts: each participant's proposal, by shard.
	parts        map[uint32]*storev1.Proposal
	participants []uint32 // sorted
	atomic       bool
	hash         uint64 // the request's
}

// newCrossShard splits the groups of req at indexes groups into per-shard
// parts.
func (s *Server) newCrossShard(req *storev1.CommitRequest, groups []int, hash uint64, now time.Time) *crossShard {
	x := &crossShard{id: req.GetTxnId() + crossShardSuffix, groups: groups, parts: map[uint32]*storev1.Proposal{}, atomic: req.GetAtomic(), hash: hash}
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
		p.Participants = x.participants
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
func (s *Server) commitCrossShard(ctx context.Context, x *crossShard, resp *storev1.CommitResponse) (duplicate bool, err error) {
	release, err := s.inflight.acquire(ctx, len(x.participants))
	if err != nil {
		return false, err
	}
	defer release()
	states, errs, err := s.prepare(ctx, x)
	if err != nil {
		return false, err // nothing was prepared anywhere
	}
	// A prepare whose outcome is unknown may still apply: fence it, so
	// that it either did or never will.
	if err := s.fenceFailed(ctx, x.id, x.hash, x.participants, states, errs); err != nil {
		return false, fmt.Errorf("cross-shard commit: %w", err)
	}
	if s.cfg.PrepareDelay > 0 && holdsIntents(states) {
		select {
		case <-time.After(s.cfg.PrepareDelay):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	decided := engine.Settle(states, x.atomic)
	if decided == nil {
		return false, fmt.Errorf("cross-shard commit: a participant does not know the transaction it prepared: %v", states)
	}
	revisions, err := s.resolve(ctx, x.id, x.participants, states, decided)
	if err != nil {
		return false, fmt.Errorf("cross-shard commit: resolve: %w", err)
	}
	for _, o := range states {
		duplicate = duplicate || o.GetDuplicate()
	}
	if duplicate {
		// Decided before: the participants' revisions now are not the
		// ones the commit gave its keys. The first reply had those.
		revisions = nil
	}
	fillResults(x, decided, revisions, resp)
	return duplicate, nil
}

// holdsIntents reports whether some participant prepared a part of the
// transaction (a refused part leaves no intent): only then does a fault
// test's PrepareDelay hold it, since otherwise there is nothing for the
// survivors to settle and the refusal may as well be told at once.
func holdsIntents(states []*storev1.Outcome) bool {
	for _, o := range states {
		if o.GetTxnState() == storev1.TxnState_TXN_STATE_PREPARED &&
			slices.ContainsFunc(o.GetGroups(), (*storev1.GroupResult).GetCommitted) {
			return true
		}
	}
	return false
}

// prepare proposes x's PREPAREs and returns what each participant
// answered. A participant frozen for a backup refuses a PREPARE. While
// every participant refuses, nothing of the transaction exists anywhere:
// prepare waits for the thaw and starts again, with fresh times (an error
// then means that nothing was prepared, and the request may be sent
// again). Once some participant has prepared it (or may have: its outcome
// is unknown), the refusing ones are asked again with admit set, which a
// frozen shard accepts: the transaction then finishes during the freeze
// instead of holding its intents, and the backup, until recovery.
func (s *Server) prepare(ctx context.Context, x *crossShard) ([]*storev1.Outcome, []error, error) {
	var thaw thawWait
	for {
		states, errs := s.eachShard(ctx, x.participants, func(sh uint32) *storev1.Proposal { return x.parts[sh] })
		var refused []uint32
		for i, o := range states {
			if errs[i] == nil && o.GetFrozen() {
				refused = append(refused, x.participants[i])
			}
		}
		if len(refused) == 0 {
			return states, errs, nil
		}
		if len(refused) < len(x.participants) {
			now := s.cfg.Now().UnixNano()
			outs, rerrs := s.eachShard(ctx, refused, func(sh uint32) *storev1.Proposal {
				p := proto.CloneOf(x.parts[sh])
				p.Admit, p.NowUnixNanos = true, now
				return p
			})
			for j, sh := range refused {
				i := slices.Index(x.participants, sh)
				states[i], errs[i] = outs[j], rerrs[j]
			}
			return states, errs, nil
		}
		if err := thaw.wait(ctx, s, refused); err != nil {
			return nil, nil, err
		}
		now := s.cfg.Now()
		for _, p := range x.parts {
			p.NowUnixNanos, p.DeadlineUnixNanos = now.UnixNano(), now.Add(s.cfg.TxnTimeout).UnixNano()
		}
	}
}

// eachShard proposes, on each shard in parallel, the proposal of that
// shard, and returns the outcomes and errors in the order of shards.
func (s *Server) eachShard(ctx context.Context, shards []uint32, prop func(uint32) *storev1.Proposal) ([]*storev1.Outcome, []error) {
	outs := make([]*storev1.Outcome, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Go(func() { outs[i], errs[i] = s.backend.Propose(ctx, sh, prop(sh)) })
	}
	wg.Wait()
	return outs, errs
}

// fenceFailed fences transaction id on the participants whose errs are
// set, putting what they know into states; it fails when one cannot be
// fenced either.
func (s *Server) fenceFailed(ctx context.Context, id string, hash uint64, participants []uint32, states []*storev1.Outcome, errs []error) error {
	var failed []uint32
	for i, err := range errs {
		if err != nil {
			failed = append(failed, participants[i])
		}
	}
	if len(failed) == 0 {
		return nil
	}
	fence := &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_FENCE, NowUnixNanos: s.cfg.Now().UnixNano(),
		DedupeWindowNanos: int64(s.cfg.DedupeWindow), RequestHash: hash}
	outs, ferrs := s.eachShard(ctx, failed, func(uint32) *storev1.Proposal { return fence })
	for j, sh := range failed {
		if ferrs[j] != nil {
			return fmt.Errorf("shard %d: %w, and fencing failed: %w", sh, errs[slices.Index(participants, sh)], ferrs[j])
		}
		states[slices.Index(participants, sh)] = outs[j]
	}
	return nil
}

// resolve resolves transaction id, decided, on the participants where it
// is prepared (states), in parallel, and returns each one's revision
// after it.
func (s *Server) resolve(ctx context.Context, id string, participants []uint32, states []*storev1.Outcome, decided *storev1.Outcome) (map[uint32]uint64, error) {
	var prepared []uint32
	for i, o := range states {
		if o.GetTxnState() == storev1.TxnState_TXN_STATE_PREPARED {
			prepared = append(prepared, participants[i])
		}
	}
	p := s.resolveProposal(id, decided)
	outs, errs := s.eachShard(ctx, prepared, func(uint32) *storev1.Proposal { return p })
	revisions := map[uint32]uint64{}
	for i, sh := range prepared {
		if errs[i] != nil {
			return nil, fmt.Errorf("shard %d: %w", sh, errs[i])
		}
		revisions[sh] = outs[i].GetRevision()
	}
	return revisions, nil
}

// decision is what the participants apply of a decided outcome: the
// groups that commit.
func decision(decided *storev1.Outcome) *storev1.Decision {
	d := &storev1.Decision{}
	for j, g := range decided.GetGroups() {
		if g.GetCommitted() {
			d.CommittedGroups = append(d.CommittedGroups, decided.GetGroupIndexes()[j])
		}
	}
	return d
}

func (s *Server) resolveProposal(id string, decided *storev1.Outcome) *storev1.Proposal {
	return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_RESOLVE, NowUnixNanos: s.cfg.Now().UnixNano(),
		DedupeWindowNanos: int64(s.cfg.DedupeWindow), LogRetention: s.cfg.LogRetention, Decision: decision(decided), Outcome: decided}
}

// fillResults puts the decided results of x's groups into resp: a
// committed group with its first shard's revision and every
// participant's in shard_revisions (none when revisions is nil: a
// retry's reply); groups the decision does not name were aborted.
func fillResults(x *crossShard, decided *storev1.Outcome, revisions map[uint32]uint64, resp *storev1.CommitResponse) {
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
				f = &storev1.Failure{Reason: storev1.FailureReason_FAILURE_REASON_ABORTED, Message: "the cross-shard transaction was aborted"}
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

// ResolveOverdue settles the cross-shard transactions prepared on shard
// whose deadline has passed (their driver is gone or stuck): each is
// fenced on every participant, which decides it (abort, unless every
// participant had prepared), and resolved wherever it is prepared. The
// node calls it on the shards it leads.
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
			// Decisions and fences may have been forgotten: settling now
			// could abort what committed elsewhere. Safety first: keep it.
			s.cfg.Logger.Error("a cross-shard transaction stayed prepared longer than decisions are kept; resolve it by hand",
				zap.String("txn", id), zap.Uint32("shard", shard), zap.Duration("overdue", since))
			continue
		}
		participants := rec.GetParticipants()
		states := make([]*storev1.Outcome, len(participants))
		errs := make([]error, len(participants))
		for j := range errs {
			errs[j] = errors.New("past its deadline")
		}
		if err := s.fenceFailed(ctx, id, rec.GetRequestHash(), participants, states, errs); err != nil {
			return i, fmt.Errorf("recover %q: %w", id, err)
		}
		decided := engine.Settle(states, rec.GetAtomic())
		if decided == nil {
			return i, fmt.Errorf("recover %q: a participant does not know the transaction it fenced: %v", id, states)
		}
		if _, err := s.resolve(ctx, id, participants, states, decided); err != nil {
			return i, fmt.Errorf("recover %q: resolve: %w", id, err)
		}
		s.cfg.Logger.Info("settled an overdue cross-shard transaction", zap.String("txn", id), zap.Uint32("shard", shard),
			zap.Int("committed_groups", len(decision(decided).GetCommittedGroups())))
	}
	return len(overdue.IDs), nil
}
