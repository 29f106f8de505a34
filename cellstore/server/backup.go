package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Backups read every shard at one consistent cut: the state the whole
// cell was in at one instant, so every cross-shard transaction is wholly
// in it or wholly out (no prepared record), and of two commits made one
// after the other it never holds the second without the first. The node
// receiving Admin.Backup drives it:
//
//  1. FREEZE on every shard in parallel (engine/freeze.go): new commits
//     are refused, and proposed again by their servers a moment later,
//     while transactions already prepared finish (a PREPARE of one that
//     prepared elsewhere is admitted). The freeze lapses by itself after
//     FreezeTimeout, in proposal time, should this driver die.
//  2. Pin every shard's state on this node after a ReadIndex, round
//     after round, until two looks in a row (the FREEZEs' outcomes count
//     as the first) find nothing prepared anywhere and every shard at the
//     same revision (pinCut): the last round's pins are then the cell's
//     state at one instant.
//  3. THAW on every shard in parallel.
//  4. Stream the pins, shard by shard: writes pause only for 1 to 3.
//
// The freeze is what makes such an instant come soon under load; step 2
// is what makes the cut consistent, whatever the freeze's timing. An
// attempt that finds no cut before FreezeTimeout (a transaction whose
// driver died stays prepared until recovery settles it) thaws, lets
// writers through for FreezeTimeout, and tries again, up to
// maxCutAttempts times.

// maxCutAttempts bounds the attempts at a consistent cut of one backup.
const maxCutAttempts = 5

// ShardSnapshot is one shard's state pinned by a store node for a
// backup (statemachine.BackupSnapshot). Its methods are for one
// goroutine.
type ShardSnapshot interface {
	// Status is the pinned state's revision, clock, prepared
	// transactions and freeze.
	Status() engine.FreezeStatus
	// WriteTo writes the pinned state to w in the state machine's
	// snapshot format and releases it; done stops it early.
	WriteTo(w io.Writer, done <-chan struct{}) error
	// Close releases the pinned state if WriteTo has not.
	Close() error
}

// errNoCut marks an attempt at a consistent cut that failed but may
// succeed later.
var errNoCut = errors.New("no consistent cut")

// consistentCut pins every shard at one consistent cut, through cluster,
// and returns the pins by shard; the caller closes them.
func (s *Server) consistentCut(ctx context.Context, cluster Cluster) ([]ShardSnapshot, error) {
	var err error
	for attempt := range maxCutAttempts {
		if attempt > 0 {
			s.cfg.Logger.Warn("backup: trying again", zap.Int("attempt", attempt+1), zap.Error(err))
			t := time.NewTimer(s.cfg.FreezeTimeout)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, storeerr.Canceled.With("backup: %v (last attempt: %v)", ctx.Err(), err)
			}
		}
		var pins []ShardSnapshot
		if pins, err = s.tryCut(ctx, cluster); err == nil {
			return pins, nil
		}
		if !errors.Is(err, errNoCut) {
			return nil, err
		}
	}
	return nil, storeerr.NoConsistentCut.With("%d attempts: %v", maxCutAttempts, err)
}

// tryCut makes one attempt at a consistent cut.
func (s *Server) tryCut(ctx context.Context, cluster Cluster) ([]ShardSnapshot, error) {
	now := s.cfg.Now()
	id := fmt.Sprintf("backup-%d-%016x", now.UnixNano(), rand.Uint64())
	until := now.Add(s.cfg.FreezeTimeout)
	shards := make([]uint32, s.router.Shards())
	for i := range shards {
		shards[i] = uint32(i)
	}
	start := time.Now()
	freeze := &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_FREEZE, NowUnixNanos: now.UnixNano(), FreezeUntilUnixNanos: until.UnixNano()}
	outs, errs := s.eachShard(ctx, shards, func(uint32) *storev1.Proposal { return freeze })
	err := errors.Join(errs...)
	for sh, o := range outs {
		if err == nil && !o.GetFrozen() {
			err = fmt.Errorf("%w: shard %d: %w", errNoCut, sh, storeerr.BackupBusy)
		}
	}
	var pins []ShardSnapshot
	if err == nil {
		dctx, cancel := context.WithDeadline(ctx, start.Add(s.cfg.FreezeTimeout))
		pins, err = s.pinCut(dctx, cluster, shards, outs)
		cancel()
	}
	// Thaw whatever happened: a FREEZE that failed may still apply. A
	// backup whose request ended still thaws. A THAW that fails leaves
	// the shard frozen until its freeze lapses.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.FreezeTimeout)
	defer cancel()
	thaw := &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_THAW, NowUnixNanos: s.cfg.Now().UnixNano()}
	if _, terrs := s.eachShard(tctx, shards, func(uint32) *storev1.Proposal { return thaw }); errors.Join(terrs...) != nil {
		s.cfg.Logger.Warn("backup: thaw failed; the freeze lapses by itself", zap.String("freeze", id), zap.Error(errors.Join(terrs...)))
	}
	frozeFor := time.Since(start)
	if err != nil {
		closeAll(pins)
		return nil, fmt.Errorf("backup: %w", err)
	}
	s.cfg.Metrics.backupFreeze.Observe(frozeFor.Seconds())
	s.cfg.Logger.Info("backup: consistent cut", zap.String("freeze", id), zap.Duration("frozen", frozeFor))
	return pins, nil
}

// pinCut pins every shard at one instant and returns the pins by shard.
// It pins every shard, in parallel, round after round: once a round finds
// no shard holding a prepared transaction and every shard at the
// revision the round before found it at (or the FREEZE found, for the
// first round), with nothing prepared then either, no shard changed
// between the two looks, and as every look of the second round came after
// every look of the first, the pins are together the state of the cell
// at any instant in between. While the shards are frozen, transactions
// prepared before only finish (or, admitted, start and finish), so this
// comes soon; it gives up when ctx ends.
func (s *Server) pinCut(ctx context.Context, cluster Cluster, shards []uint32, frozen []*storev1.Outcome) ([]ShardSnapshot, error) {
	tick := time.NewTicker(s.cfg.FrozenRetry)
	defer tick.Stop()
	// prev: each shard's revision in the previous look, nil when some
	// shard held a prepared transaction then.
	var prev []uint64
	if !slices.ContainsFunc(frozen, func(o *storev1.Outcome) bool { return o.GetPrepared() > 0 }) {
		for _, o := range frozen {
			prev = append(prev, o.GetRevision())
		}
	}
	for {
		pins := make([]ShardSnapshot, len(shards))
		errs := make([]error, len(shards))
		var wg sync.WaitGroup
		for i, sh := range shards {
			wg.Go(func() { pins[i], errs[i] = cluster.PinShard(ctx, sh) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			closeAll(pins)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", errNoCut, err)
			}
			return nil, err
		}
		var busy []uint32
		revs := make([]uint64, len(pins))
		for i, p := range pins {
			if p.Status().Prepared > 0 {
				busy = append(busy, shards[i])
			}
			revs[i] = p.Status().Revision
		}
		if len(busy) == 0 && slices.Equal(revs, prev) {
			return pins, nil
		}
		closeAll(pins)
		if prev = revs; len(busy) == 0 {
			continue
		}
		prev = nil
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: within %v, shards %v still held prepared transactions", errNoCut, s.cfg.FreezeTimeout, busy)
		}
	}
}

func closeAll(pins []ShardSnapshot) {
	for _, p := range pins {
		if p != nil {
			p.Close()
		}
	}
}

// thawWait paces the proposals of one commit that frozen shards refused.
// Rather than propose again and again while they stay frozen, it waits,
// looking every FrozenRetry at the shards' freeze on this node's replicas
// (a stale read), until none holds by this node's clock: a THAW has
// applied here, or the freeze has lapsed (the next proposal, carrying the
// time, lapses it for every replica alike). It gives up with storeerr.Frozen
// after twice FreezeTimeout (a freeze lapses after FreezeTimeout), or
// rather than wait past the request's deadline.
type thawWait struct{ since time.Time }

func (w *thawWait) wait(ctx context.Context, s *Server, shards []uint32) error {
	if w.since.IsZero() {
		w.since = time.Now()
	}
	s.cfg.Metrics.frozen.Add(float64(len(shards)))
	t := time.NewTicker(s.cfg.FrozenRetry)
	defer t.Stop()
	for {
		now := time.Now()
		if now.Sub(w.since) >= 2*s.cfg.FreezeTimeout {
			return storeerr.Frozen
		}
		if d, ok := ctx.Deadline(); ok && d.Sub(now) <= s.cfg.FrozenRetry {
			return storeerr.Frozen
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return storeerr.Frozen
		}
		if !s.anyFrozen(ctx, shards) {
			return nil
		}
	}
}

// anyFrozen reports whether, on this node's replicas, a freeze holds on
// any of shards by this node's clock. A replica it cannot read counts as
// thawed: the next proposal will tell.
func (s *Server) anyFrozen(ctx context.Context, shards []uint32) bool {
	now := s.cfg.Now().UnixNano()
	for _, sh := range shards {
		res, err := s.backend.Read(ctx, sh, statemachine.FreezeQuery{}, false)
		if err != nil {
			return false
		}
		if f := res.(*engine.FreezeStatus).Freeze; f != nil && now < f.GetUntilUnixNanos() {
			return true
		}
	}
	return false
}
