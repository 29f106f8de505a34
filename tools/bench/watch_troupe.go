package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

var _ WatchSystem = (*Troupe)(nil)

// WatchStart implements WatchSystem: the cursor of a linearizable Range
// of the prefix (one key), which covers every commit acknowledged before.
func (t *Troupe) WatchStart(ctx context.Context, prefix string) (WatchFrom, error) {
	resp, err := storev1.NewStoreClient(t.conns[0]).Range(ctx, &storev1.RangeRequest{Prefix: prefix, Limit: 1})
	if err != nil {
		return nil, err
	}
	return resp.GetCursor(), nil
}

// Watch implements WatchSystem: a watch of the prefix from the cursor
// on the WatchStream of the connection of the endpoint id picks (as
// sessions do), through that connection's clientlib.WatchMux, which
// carries all the watches of the connection over one stream, as
// clientv3 does etcd's. It returns once the store has acknowledged the
// watch. A watch paused because its reader fell behind
// (clientlib.ErrWatchPaused) is resumed from its last cursor, as
// clientlib's Watcher does; any other end of the watch aborts the run.
func (t *Troupe) Watch(ctx context.Context, id int, prefix string, from WatchFrom) (WatchStream, error) {
	n := t.router.Shards() // learnt by WaitReady when RouteToLeader
	if n == 0 {
		st, err := storev1.NewStoreClient(t.conns[0]).Status(ctx, &storev1.StatusRequest{})
		if err != nil {
			return nil, err
		}
		n = st.GetShardCount()
	}
	shards := keyspace.NewRouter(n).PrefixShards(prefix)
	if len(shards) != 1 {
		return nil, fmt.Errorf("bench: watch of %q spans %d shards; the watch workload's revisions need one", prefix, len(shards))
	}
	w := &troupeWatch{ctx: ctx, mux: t.watchMuxes[id%len(t.watchMuxes)], prefix: prefix, cursor: from, shard: shards[0], shards: n}
	var err error
	if w.watch, err = w.mux.Watch(ctx, prefix, from); err != nil {
		return nil, w.wrap(err)
	}
	return w, nil
}

// WatchTransport implements WatchSystem: one WatchStream per connection,
// one connection per endpoint.
func (t *Troupe) WatchTransport(n int) (connections, streams int) {
	c := min(n, len(t.conns))
	return c, c
}

// troupeWatch is a watch of a clientlib.WatchMux.
type troupeWatch struct {
	ctx    context.Context // the watch's, for resuming it
	mux    *clientlib.WatchMux
	mu     sync.Mutex // guards watch and closed: Close may come from any goroutine
	watch  *clientlib.MuxWatch
	closed bool
	prefix string
	cursor []byte // the last cursor delivered
	shard  uint32 // the prefix's shard
	shards uint32
}

// Next implements WatchStream: the response's puts, and its cursor's
// revision of the prefix's shard.
func (w *troupeWatch) Next(ctx context.Context, evs []WatchEvent) ([]WatchEvent, uint64, error) {
	resp, err := w.current().Next(ctx)
	for errors.Is(err, clientlib.ErrWatchPaused) {
		var mw *clientlib.MuxWatch
		if mw, err = w.resume(); err == nil {
			resp, err = mw.Next(ctx)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return evs, 0, ctx.Err()
		}
		return evs, 0, w.wrap(err)
	}
	for _, ev := range resp.GetEvents() {
		if ev.GetType() == storev1.EventType_EVENT_TYPE_PUT {
			evs = append(evs, WatchEvent{Revision: ev.GetKv().GetVersion(), Value: ev.GetKv().GetValue()})
		}
	}
	w.cursor = resp.GetCursor()
	cur, err := keyspace.DecodeCursor(w.cursor, w.shards)
	if err != nil {
		return evs, 0, err
	}
	return evs, cur[w.shard], nil
}

// wrap marks a compacted cursor (OUT_OF_RANGE with its CompactedDetail)
// as the store telling the watcher it fell behind.
func (w *troupeWatch) wrap(err error) error {
	if cd := storeerr.CompactedDetailOf(err); cd != nil {
		return fmt.Errorf("%w: shard %d compacted before revision %d: %v", ErrFellBehind, cd.GetShard(), cd.GetRequestedRevision(), err)
	}
	return err
}

// current is the watch's MuxWatch.
func (w *troupeWatch) current() *clientlib.MuxWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.watch
}

// resume replaces the paused MuxWatch with one from the last cursor
// delivered, unless the watch is closed.
func (w *troupeWatch) resume() (*clientlib.MuxWatch, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, context.Canceled
	}
	w.watch.Close()
	mw, err := w.mux.Watch(w.ctx, w.prefix, w.cursor)
	if err != nil {
		return nil, err
	}
	w.watch = mw
	return mw, nil
}

// Close implements WatchStream.
func (w *troupeWatch) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.watch.Close()
	return nil
}
