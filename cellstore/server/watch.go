package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Bounds on one watch response: revisions covered, and event bytes (a
// response always holds at least one whole revision, which the request
// limits bound).
const (
	maxRevisionsPerBatch = 256
	maxBatchBytes        = 1 << 20
)

// shardBatch is what a shard reader hands to the stream: the matching
// events of the revisions it read, and the last revision read.
type shardBatch struct {
	shard  uint32
	last   uint64
	events []*storev1.Event
	err    error
}

// Watch implements storev1.StoreServer. A prefix on one shard is read by
// this goroutine itself (watchShard); for several, one reader goroutine
// per shard under the prefix follows that shard's history and passes
// batches to this goroutine, which keeps the cursor and sends. A shard's
// batches arrive in revision order, so every cursor sent covers exactly
// what was sent before it.
func (s *Server) Watch(req *storev1.WatchRequest, stream storev1.Store_WatchServer) error {
	ctx := stream.Context()
	cursor, shards, err := s.watchStart(ctx, req.GetPrefix(), req.GetCursor())
	if err != nil {
		return err
	}
	s.cfg.Metrics.watchers.Inc()
	defer s.cfg.Metrics.watchers.Dec()
	if len(shards) == 1 {
		return s.watchShard(ctx, stream, shards[0], cursor, req.GetPrefix())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan shardBatch, 16)
	for _, sh := range shards {
		go s.followShard(ctx, sh, cursor[sh], req.GetPrefix(), batches)
	}
	ticker := time.NewTicker(s.cfg.ProgressInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b := <-batches:
			if b.err != nil {
				return s.watchError(b.err, cursor, shards)
			}
			cursor[b.shard] = b.last
			if len(b.events) == 0 {
				continue
			}
			if err := stream.Send(&storev1.WatchResponse{Events: b.events, Cursor: cursor.Encode()}); err != nil {
				return err
			}
			s.cfg.Metrics.watchEvents.Add(float64(len(b.events)))
		case <-ticker.C:
			if err := stream.Send(&storev1.WatchResponse{Cursor: cursor.Encode(), Progress: true}); err != nil {
				return err
			}
		}
	}
}

// watchStart admits a watch of prefix from cursor (empty: from this
// replica's current revisions), for Watch and for every watch of a
// WatchStream alike: it returns the cursor to start from and the shards
// under prefix, or the error that refuses the watch.
func (s *Server) watchStart(ctx context.Context, prefix string, cursor []byte) (keyspace.Cursor, []uint32, error) {
	if err := s.admit(ctx, Access{Method: "Watch", Prefix: prefix, PrefixOp: authz.OpWatch}); err != nil {
		return nil, nil, err
	}
	if len(cursor) == 0 {
		return s.localCursor(), s.router.PrefixShards(prefix), nil
	}
	c, err := keyspace.DecodeCursor(cursor, s.router.Shards())
	if err != nil {
		return nil, nil, storeerr.BadCursor.With("watch: %v", err)
	}
	return c, s.router.PrefixShards(prefix), nil
}

// watchShard serves a watch whose prefix lies on one shard: the stream's
// goroutine reads the shard's history itself. Each commit wakes every
// watcher of the shard, so a reader goroutine between the hub and the
// stream, as Watch has for several shards, would double the goroutines
// that run for every commit; with a thousand watchers, the commits' own
// goroutines queue behind them. The progress ticker is looked at after
// every batch too, so that a shard busy with changes outside the prefix
// still moves the client's cursor.
func (s *Server) watchShard(ctx context.Context, stream storev1.Store_WatchServer, shard uint32, cursor keyspace.Cursor, prefix string) error {
	ticker := time.NewTicker(s.cfg.ProgressInterval)
	defer ticker.Stop()
	progress := func() error {
		return stream.Send(&storev1.WatchResponse{Cursor: cursor.Encode(), Progress: true})
	}
	for {
		b, wait, err := s.readShard(shard, cursor[shard], prefix)
		if err != nil {
			return s.watchError(err, cursor, []uint32{shard})
		}
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-ticker.C:
				if err := progress(); err != nil {
					return err
				}
				continue
			}
		}
		cursor[shard] = b.last
		if len(b.events) > 0 {
			if err := stream.Send(&storev1.WatchResponse{Events: b.events, Cursor: cursor.Encode()}); err != nil {
				return err
			}
			s.cfg.Metrics.watchEvents.Add(float64(len(b.events)))
		}
		select {
		case <-ticker.C:
			if err := progress(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
	}
}

// followShard reads shard's history after revision from and sends the
// events under prefix, batch by batch, until ctx ends or an error occurs.
func (s *Server) followShard(ctx context.Context, shard uint32, from uint64, prefix string, out chan<- shardBatch) {
	for {
		b, wait, err := s.readShard(shard, from, prefix)
		if err != nil {
			select {
			case out <- shardBatch{shard: shard, err: err}:
			case <-ctx.Done():
			}
			return
		}
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case out <- b:
			from = b.last
		case <-ctx.Done():
			return
		}
	}
}

// readShard reads the next revisions of shard after revision from and
// returns the events under prefix among them, with the last revision
// read; or, when there are none yet, a channel closed when the shard
// advances.
func (s *Server) readShard(shard uint32, from uint64, prefix string) (shardBatch, <-chan struct{}, error) {
	entries, wait, err := s.hub.Next(shard, from, maxRevisionsPerBatch)
	if err != nil || wait != nil {
		return shardBatch{}, wait, err
	}
	return matching(entries, shard, prefix), nil, nil
}

// matching returns the events under prefix among entries, revisions of
// shard, and the last revision it looked at: all of them, or fewer once
// their events reach maxBatchBytes.
func matching(entries []statemachine.LogEntry, shard uint32, prefix string) shardBatch {
	b := shardBatch{shard: shard}
	size := 0
	for _, e := range entries {
		if size >= maxBatchBytes {
			break // the rest goes in the next response
		}
		for _, ev := range e.Changes.GetEvents() {
			if strings.HasPrefix(ev.GetKv().GetKey(), prefix) {
				b.events = append(b.events, &storev1.Event{Type: ev.GetType(), Kv: ev.GetKv(), Shard: shard})
				size += len(ev.GetKv().GetKey()) + len(ev.GetKv().GetValue())
			}
		}
		b.last = e.Revision
	}
	return b
}

// watchError turns a reader's error into the stream's final status; a
// compacted cursor gets OUT_OF_RANGE with the oldest usable cursor. Every
// shard of the watch may be compacted, not only the one whose reader
// failed first, so each of them is moved to its oldest kept revision:
// otherwise resuming from oldest_cursor would fail again on the next one.
func (s *Server) watchError(err error, cursor keyspace.Cursor, shards []uint32) error {
	var ce *watch.CompactedError
	if !errors.As(err, &ce) {
		return storeerr.ShardUnavailable.With("watch: %v", err)
	}
	s.cfg.Metrics.compacted.Inc()
	oldest := cursor.Clone()
	for _, sh := range shards {
		var other *watch.CompactedError
		if _, _, err := s.hub.Next(sh, cursor[sh], 1); errors.As(err, &other) && other.Oldest > 0 {
			oldest[sh] = other.Oldest - 1
		}
	}
	if ce.Oldest > 0 {
		oldest[ce.Shard] = ce.Oldest - 1
	}
	return storeerr.WatchCompacted(&storev1.CompactedDetail{
		Shard:             ce.Shard,
		RequestedRevision: ce.Requested,
		OldestRevision:    ce.Oldest,
		OldestCursor:      oldest.Encode(),
	})
}
