package bench

import (
	"context"
	"fmt"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
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

// Watch implements WatchSystem: a storev1 Watch stream from the cursor,
// on the connection of the endpoint id picks (as sessions do), as a
// clientlib.Watcher opens one (without its reconnections: a broken
// stream aborts the run). It returns once the stream's first response
// (a progress notification, within the server's ProgressInterval, when
// nothing is committed) has arrived.
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
	sctx, cancel := context.WithCancel(ctx)
	stream, err := storev1.NewStoreClient(t.conns[id%len(t.conns)]).Watch(sctx, &storev1.WatchRequest{Prefix: prefix, Cursor: from})
	if err != nil {
		cancel()
		return nil, err
	}
	w := &troupeWatch{stream: stream, cancel: cancel, shard: shards[0], shards: n}
	if w.pending, err = stream.Recv(); err != nil {
		cancel()
		return nil, w.wrap(err)
	}
	return w, nil
}

// WatchTransport implements WatchSystem: one stream per watcher, the
// streams spread over one connection per endpoint.
func (t *Troupe) WatchTransport(n int) (connections, streams int) {
	return min(n, len(t.conns)), n
}

// troupeWatch is a storev1 Watch stream.
type troupeWatch struct {
	stream  storev1.Store_WatchClient
	cancel  context.CancelFunc
	pending *storev1.WatchResponse // the first response, read by Watch
	shard   uint32                 // the prefix's shard
	shards  uint32
}

// Next implements WatchStream: the response's puts, and its cursor's
// revision of the prefix's shard.
func (w *troupeWatch) Next(ctx context.Context, evs []WatchEvent) ([]WatchEvent, uint64, error) {
	resp := w.pending
	w.pending = nil
	if resp == nil {
		var err error
		if resp, err = w.stream.Recv(); err != nil {
			if ctx.Err() != nil {
				return evs, 0, ctx.Err()
			}
			return evs, 0, w.wrap(err)
		}
	}
	for _, ev := range resp.GetEvents() {
		if ev.GetType() == storev1.EventType_EVENT_TYPE_PUT {
			evs = append(evs, WatchEvent{Revision: ev.GetKv().GetVersion(), Value: ev.GetKv().GetValue()})
		}
	}
	var through uint64
	if len(resp.GetCursor()) > 0 {
		cur, err := keyspace.DecodeCursor(resp.GetCursor(), w.shards)
		if err != nil {
			return evs, 0, err
		}
		through = cur[w.shard]
	}
	return evs, through, nil
}

// wrap marks a compacted cursor (OUT_OF_RANGE with its CompactedDetail)
// as the store telling the watcher it fell behind.
func (w *troupeWatch) wrap(err error) error {
	if cd := storeerr.CompactedDetailOf(err); cd != nil {
		return fmt.Errorf("%w: shard %d compacted before revision %d: %v", ErrFellBehind, cd.GetShard(), cd.GetRequestedRevision(), err)
	}
	return err
}

// Close implements WatchStream.
func (w *troupeWatch) Close() error {
	w.cancel()
	return nil
}
