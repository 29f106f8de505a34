package clientlib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// ErrCompacted matches (errors.Is) the error of a Watcher whose cursor is
// older than the store's change log: the changes in between are lost, and
// the caller relists and watches again (see CompactedError). It is the
// store's definition of that error, storeerr.Compacted.
var ErrCompacted error = storeerr.Compacted

// CompactedError details ErrCompacted: which shard had dropped the
// revisions the cursor needed, and the oldest cursor the store can resume
// from.
type CompactedError struct {
	Shard             uint32
	RequestedRevision uint64 // the first revision the cursor needed
	OldestRevision    uint64 // the oldest revision the shard keeps
	OldestCursor      []byte
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("watch cursor compacted: shard %d needed revision %d, the oldest kept is %d; relist, or watch from the oldest cursor",
		e.Shard, e.RequestedRevision, e.OldestRevision)
}

// Unwrap makes errors.Is(err, ErrCompacted) (storeerr.Compacted) true.
func (e *CompactedError) Unwrap() error { return ErrCompacted }

// errWatcherClosed is the cause of a Watcher's end by Close; it matches
// context.Canceled.
var errWatcherClosed = fmt.Errorf("watcher closed: %w", context.Canceled)

// Watcher follows the changes under a prefix. Next returns them one
// response at a time; a broken stream is reopened on another endpoint from
// the last cursor delivered, so a Watcher neither skips nor repeats a
// change across reconnections. Next is called by one goroutine at a time;
// Close may be called by any goroutine, at any time.
//
// The Watchers of a Client share one WatchStream per endpoint (its
// WatchMux); a Watcher whose reader falls behind is paused there
// (ErrWatchPaused) and goes on from its cursor once its reader has
// caught up, without holding up the others. On an endpoint whose store
// has no WatchStream (an older version) each Watcher opens a Watch RPC
// of its own instead.
type Watcher struct {
	c      *Client
	prefix string
	ctx    context.Context
	cancel context.CancelCauseFunc

	// The fields below belong to the goroutine calling Next.
	cursor       []byte                                 // resume point: the last cursor delivered
	recv         func() (*storev1.WatchResponse, error) // the open stream's next response; nil: none open
	streamCancel func()
	streamEp     int
	single       bool  // the open stream is a Watch RPC of its own
	failures     int   // consecutive failed streams
	err          error // set once the watch has ended for good
}

// Watch starts following the changes under prefix after cursor (from List
// or an earlier response). An empty cursor means "from now": Watch then
// reads the current revisions first (retried like Get; if that fails,
// Next returns the error), so that reconnections never lose what changed
// between the start and the first response. The watch ends when ctx ends
// or Close is called.
func (c *Client) Watch(ctx context.Context, prefix string, cursor []byte) *Watcher {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &Watcher{c: c, prefix: prefix, ctx: wctx, cancel: cancel, cursor: bytes.Clone(cursor)}
	if len(cursor) == 0 {
		resp, err := c.rangePage(wctx, &storev1.RangeRequest{Prefix: prefix, Limit: 1}, 1)
		if err != nil {
			w.err = fmt.Errorf("clientlib: watch %q: read the current cursor: %w", prefix, err)
		} else {
			w.cursor = resp.GetCursor()
		}
	}
	return w
}

// Next blocks until the next response: events of one shard in commit
// order, or a progress notification that only moves the cursor. It
// returns an error when the watch has ended: a compacted cursor (matching
// ErrCompacted, detailed by a *CompactedError), ctx's end or Close, an
// answer that is not retryable, or RetryPolicy.MaxAttempts consecutive
// failed reconnections. Once it has returned an error it returns the same
// one.
func (w *Watcher) Next() (*storev1.WatchResponse, error) {
	for w.err == nil {
		if w.recv == nil {
			if err := w.open(); err != nil {
				w.broken(err)
				continue
			}
		}
		resp, err := w.recv()
		if errors.Is(err, ErrWatchPaused) {
			// Every response before the pause is delivered: go on from
			// the cursor, a reconnection that is no failure.
			w.closeStream()
			w.c.metrics.retries.WithLabelValues("Watch").Inc()
			w.c.log.Debug("watch paused: its reader fell behind; resuming from its cursor", zap.String("prefix", w.prefix))
			continue
		}
		if err != nil {
			w.broken(err)
			continue
		}
		if len(resp.GetCursor()) > 0 {
			w.cursor = resp.GetCursor()
		}
		w.failures = 0
		return resp, nil
	}
	return nil, w.err
}

// Close ends the watch and releases its stream.
func (w *Watcher) Close() { w.cancel(errWatcherClosed) }

// open starts a stream on the current endpoint from w.cursor: a watch
// of the endpoint's WatchMux, or a Watch RPC if its store has no
// WatchStream.
func (w *Watcher) open() error {
	w.streamEp = w.c.current()
	ep := w.c.eps[w.streamEp]
	if !ep.singleWatch.Load() {
		mw, err := ep.mux.Watch(w.ctx, w.prefix, w.cursor)
		if status.Code(err) != codes.Unimplemented {
			if err != nil {
				return err
			}
			w.recv = func() (*storev1.WatchResponse, error) { return mw.Next(w.ctx) }
			w.streamCancel, w.single = mw.Close, false
			return nil
		}
		ep.singleWatch.Store(true)
		w.c.log.Debug("store has no WatchStream; watching with a stream of its own", zap.String("endpoint", ep.addr), zap.Error(err))
	}
	sctx, cancel := context.WithCancel(w.ctx)
	stream, err := ep.store.Watch(sctx, &storev1.WatchRequest{Prefix: w.prefix, Cursor: w.cursor})
	if err != nil {
		cancel()
		return err
	}
	w.recv, w.streamCancel, w.single = stream.Recv, cancel, true
	return nil
}

// closeStream releases the open stream, if any.
func (w *Watcher) closeStream() {
	if w.streamCancel != nil {
		w.streamCancel()
	}
	w.recv, w.streamCancel = nil, nil
}

// broken handles the end of a stream (or a failure to open one): it ends
// the watch for good, or waits a backoff after moving the client on from
// an endpoint that failed, so that Next opens a new stream.
func (w *Watcher) broken(err error) {
	w.closeStream()
	if w.single {
		// The store may have been upgraded since: look for WatchStream
		// again on the next stream.
		w.c.eps[w.streamEp].singleWatch.Store(false)
	}
	err = storeerr.FromError(err)
	addr := w.c.eps[w.streamEp].addr
	code := codeOf(err)
	if errors.Is(err, io.EOF) {
		code = codes.OK // the server ended the stream without an error
	}
	w.c.metrics.requests.WithLabelValues("Watch", code.String()).Inc()
	if w.ctx.Err() != nil {
		w.err = fmt.Errorf("clientlib: watch %q: %w", w.prefix, context.Cause(w.ctx))
		return
	}
	if w.c.isClosed() {
		w.err = fmt.Errorf("clientlib: watch %q: the client is closed: %w", w.prefix, err)
		return
	}
	if ce := compactedFrom(err); ce != nil {
		w.err = fmt.Errorf("clientlib: watch %q on %s: %w", w.prefix, addr, ce)
		return
	}
	// A stream the server ends or cancels (it is stopping) is reopened
	// like one that finds its node unavailable.
	if code != codes.OK && code != codes.Canceled && !retryableCode(code) {
		w.err = fmt.Errorf("clientlib: watch %q on %s: %w", w.prefix, addr, err)
		return
	}
	w.failures++
	if w.failures >= w.c.cfg.Retry.MaxAttempts {
		w.err = fmt.Errorf("clientlib: watch %q: gave up after %d failed streams in a row, last on %s: %w", w.prefix, w.failures, addr, err)
		return
	}
	if code != codes.ResourceExhausted {
		w.c.failover(w.streamEp, err)
	}
	w.c.metrics.retries.WithLabelValues("Watch").Inc()
	w.c.log.Debug("watch stream broken; reopening", zap.String("prefix", w.prefix), zap.String("endpoint", addr),
		zap.Int("failures", w.failures), zap.Error(err))
	if sleepCtx(w.ctx, w.c.cfg.Retry.backoff(w.failures, mrand.Float64())) != nil {
		w.err = fmt.Errorf("clientlib: watch %q: %w", w.prefix, context.Cause(w.ctx))
	}
}

// compactedFrom returns the CompactedError that the store's Compacted
// error (storeerr.WatchCompacted) carries, or nil: it goes by the
// CompactedDetail, which identifies that error also from a store that
// sends it without the definition's reason.
func compactedFrom(err error) *CompactedError {
	cd := storeerr.CompactedDetailOf(err)
	if cd == nil {
		return nil
	}
	return &CompactedError{Shard: cd.GetShard(), RequestedRevision: cd.GetRequestedRevision(),
		OldestRevision: cd.GetOldestRevision(), OldestCursor: cd.GetOldestCursor()}
}
