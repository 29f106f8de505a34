package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Bounds on one watch response, as the server's: revisions covered, and
// event bytes (a response always holds at least one whole revision).
const (
	maxRevisionsPerBatch = 256
	maxBatchBytes        = 1 << 20
)

// errWatcherClosed is the cause of a Watcher's end by Close; it matches
// context.Canceled, as a clientlib.Watcher's does.
var errWatcherClosed = fmt.Errorf("watcher closed: %w", context.Canceled)

// Watcher follows the changes under a prefix of a Store. Next is called
// by one goroutine at a time; Close may be called by any goroutine, at
// any time.
type Watcher struct {
	s      *Store
	prefix string
	ctx    context.Context
	cancel context.CancelCauseFunc

	// Guarded by s.mu.
	pos    uint64 // the revision delivered through
	parked bool   // blocked in Next with nothing left to deliver
	err    error  // set once the watch has ended
}

// Watch starts following the changes under prefix after cursor (from
// List or an earlier response). An empty cursor means "from now": the
// store's revision when Watch is called. The watch ends when ctx ends or
// Close is called.
func (s *Store) Watch(ctx context.Context, prefix string, cursor []byte) *Watcher {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &Watcher{s: s, prefix: prefix, ctx: wctx, cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(cursor) == 0 {
		var err error
		if w.pos, err = s.revision(); err != nil {
			w.err = fmt.Errorf("memstore: watch %q: read the current revision: %w", prefix, err)
		}
	} else if c, err := keyspace.DecodeCursor(cursor, 1); err != nil {
		// The server's answer to a cursor it cannot use.
		w.err = fmt.Errorf("memstore: watch %q: %w", prefix, storeerr.BadCursor.With("watch: %v", err))
	} else {
		w.pos = c[0]
	}
	if w.err != nil {
		return w
	}
	s.watchers[w] = struct{}{}
	s.signalWatchers()
	context.AfterFunc(wctx, func() { s.drop(w) })
	return w
}

// WatchStream is Watch as a clientlib.Store has it.
func (s *Store) WatchStream(ctx context.Context, prefix string, cursor []byte) cache.Stream {
	return s.Watch(ctx, prefix, cursor)
}

// Next blocks until the next response: the events under the prefix of one
// or more consecutive revisions, in commit order, with the cursor after
// them. It returns an error when the watch has ended: a compacted cursor
// (the server's storeerr.Compacted, with a CompactedDetail: see
// clientlib.IsCompacted), a malformed cursor (storeerr.BadCursor), or
// ctx's end or Close (matching context.Canceled or
// context.DeadlineExceeded). Once it has returned an error it returns the
// same one.
func (w *Watcher) Next() (*storev1.WatchResponse, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for w.err == nil {
		if w.ctx.Err() != nil {
			w.end(fmt.Errorf("memstore: watch %q: %w", w.prefix, context.Cause(w.ctx)))
			break
		}
		resp, err := s.read(w)
		if err != nil {
			w.end(fmt.Errorf("memstore: watch %q: %w", w.prefix, err))
			break
		}
		if resp != nil {
			return resp, nil
		}
		w.parked = true
		s.signalWatchers()
		committed := s.committed
		s.mu.Unlock()
		select {
		case <-committed:
		case <-w.ctx.Done():
		}
		s.mu.Lock()
		w.parked = false
	}
	return nil, w.err
}

// Close ends the watch.
func (w *Watcher) Close() {
	w.cancel(errWatcherClosed)
	w.s.drop(w)
}

// Cursor returns the cursor after everything Next has returned (the
// watch's starting cursor before that): the point to resume from.
func (w *Watcher) Cursor() []byte {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return keyspace.Cursor{w.pos}.Encode()
}

// end ends the watch with err; s.mu is held.
func (w *Watcher) end(err error) {
	w.err = err
	if _, ok := w.s.watchers[w]; ok {
		delete(w.s.watchers, w)
		w.s.signalWatchers()
	}
}

// drop forgets w, whose context has ended.
func (s *Store) drop(w *Watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.watchers[w]; ok {
		delete(s.watchers, w)
		s.signalWatchers()
	}
}

// signalWatchers wakes Quiesce and WaitForWatches; s.mu is held.
func (s *Store) signalWatchers() {
	close(s.watchersChanged)
	s.watchersChanged = make(chan struct{})
}

// read returns w's next response from the change log and moves w past
// it, or nil when w has seen every revision; s.mu is held. Revisions
// without events under w's prefix only move w on, as on the server.
func (s *Store) read(w *Watcher) (*storev1.WatchResponse, error) {
	cur, err := s.revision()
	if err != nil {
		return nil, err
	}
	for w.pos < cur {
		oldest, err := s.meta(engine.LogStartKey())
		if err != nil {
			return nil, err
		}
		if w.pos+1 < oldest {
			return nil, compacted(w.pos+1, oldest)
		}
		var events []*storev1.Event
		last, n, size := w.pos, 0, 0
		var rerr error
		serr := s.st.Scan(engine.LogKey(w.pos+1), engine.LogKey(cur+1), func(k, v []byte) bool {
			if n >= maxRevisionsPerBatch || size >= maxBatchBytes {
				return false // the rest goes in the next response
			}
			rev := binary.BigEndian.Uint64(k[1:])
			if rev != last+1 {
				rerr = fmt.Errorf("change log: revision %d follows %d", rev, last)
				return false
			}
			cs := &storev1.ChangeSet{}
			if rerr = proto.Unmarshal(v, cs); rerr != nil {
				rerr = fmt.Errorf("change log: revision %d: %w", rev, rerr)
				return false
			}
			for _, ev := range cs.GetEvents() {
				if strings.HasPrefix(ev.GetKv().GetKey(), w.prefix) {
					events = append(events, &storev1.Event{Type: ev.GetType(), Kv: ev.GetKv(), Shard: 0})
					size += len(ev.GetKv().GetKey()) + len(ev.GetKv().GetValue())
				}
			}
			last, n = rev, n+1
			return true
		})
		if serr != nil {
			return nil, serr
		}
		if rerr != nil {
			return nil, rerr
		}
		if last == w.pos {
			return nil, fmt.Errorf("change log: revision %d missing", w.pos+1)
		}
		w.pos = last
		if len(events) > 0 {
			return &storev1.WatchResponse{Events: events, Cursor: keyspace.Cursor{last}.Encode()}, nil
		}
	}
	return nil, nil
}

// compacted is the server's answer to a cursor older than the change
// log, with the oldest cursor it can resume from.
func compacted(requested, oldest uint64) error {
	return storeerr.WatchCompacted(&storev1.CompactedDetail{
		Shard:             0,
		RequestedRevision: requested,
		OldestRevision:    oldest,
		OldestCursor:      keyspace.Cursor{oldest - 1}.Encode(),
	})
}

// WaitForWatches blocks until at least n watches are open, or ctx ends.
// A test calls it once its informers have started, before it relies on
// Quiesce: an informer lists, then opens its watch.
func (s *Store) WaitForWatches(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		open, changed := len(s.watchers), s.watchersChanged
		s.mu.Unlock()
		if open >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("memstore: %d watches open, waiting for %d: %w", open, n, context.Cause(ctx))
		}
	}
}

// Quiesce blocks until every open watch has delivered every revision up
// to Revision() and its consumer is back in Next, or ctx ends. A consumer
// that applies a response before it asks for the next, as an informer
// does, has then applied every commit so far. A watch whose consumer
// stops calling Next without closing it holds Quiesce until ctx ends;
// watches opened after Quiesce returns are not waited for. Commits made
// while Quiesce waits are waited for too.
func (s *Store) Quiesce(ctx context.Context) error {
	for {
		s.mu.Lock()
		busy, err := s.busyWatches()
		changed := s.watchersChanged
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("memstore: %d watches still delivering: %w", busy, context.Cause(ctx))
		}
	}
}

// busyWatches counts the open watches that have not delivered every
// revision or whose consumer is not back in Next; s.mu is held.
func (s *Store) busyWatches() (int, error) {
	cur, err := s.revision()
	if err != nil {
		return 0, fmt.Errorf("memstore: %w", err)
	}
	busy := 0
	for w := range s.watchers {
		if !w.parked || w.pos < cur {
			busy++
		}
	}
	return busy, nil
}
