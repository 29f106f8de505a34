package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/troupe-cluster/troupe/tools/bench"
)

var _ bench.WatchSystem = (*etcdSystem)(nil)

// WatchStart implements bench.WatchSystem: the revision of a read of the
// prefix (count only), which covers every commit acknowledged before.
func (s *etcdSystem) WatchStart(ctx context.Context, prefix string) (bench.WatchFrom, error) {
	resp, err := s.clients[0].Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint64(nil, uint64(resp.Header.Revision)), nil
}

// Watch implements bench.WatchSystem: a clientv3 Watch of the prefix
// from the revision after from, on the client of the member id picks (as
// sessions do). clientv3 carries every watch of a client whose context
// has the same metadata on one gRPC stream, so the watchers of one
// client share it. It returns once etcd has acknowledged the watch
// (WithCreatedNotify).
func (s *etcdSystem) Watch(ctx context.Context, id int, prefix string, from bench.WatchFrom) (bench.WatchStream, error) {
	if len(from) != 8 {
		return nil, fmt.Errorf("etcd watch: position of %d bytes, want 8", len(from))
	}
	rev := int64(binary.BigEndian.Uint64(from))
	wctx, cancel := context.WithCancel(ctx)
	ch := s.clients[id%len(s.clients)].Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	w := &etcdWatch{ch: ch, cancel: cancel}
	select {
	case resp, ok := <-ch:
		switch {
		case !ok:
			cancel()
			return nil, fmt.Errorf("etcd watch closed before it was created: %w", ctx.Err())
		case resp.Created:
		default:
			cancel()
			return nil, fmt.Errorf("etcd watch: first response is not the creation: %+v", resp)
		}
		if err := w.check(resp); err != nil {
			cancel()
			return nil, err
		}
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	return w, nil
}

// WatchTransport implements bench.WatchSystem: one client (connection)
// per member, one gRPC watch stream per client.
func (s *etcdSystem) WatchTransport(n int) (connections, streams int) {
	c := min(n, len(s.clients))
	return c, c
}

// etcdWatch is a clientv3 watch.
type etcdWatch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc
}

// Next implements bench.WatchStream: the response's puts, through their
// last ModRevision, or a progress notification's revision.
func (w *etcdWatch) Next(ctx context.Context, evs []bench.WatchEvent) ([]bench.WatchEvent, uint64, error) {
	var resp clientv3.WatchResponse
	var ok bool
	select {
	case resp, ok = <-w.ch:
	case <-ctx.Done():
		return evs, 0, ctx.Err()
	}
	if !ok {
		if ctx.Err() != nil {
			return evs, 0, ctx.Err()
		}
		return evs, 0, errors.New("etcd watch channel closed")
	}
	if err := w.check(resp); err != nil {
		return evs, 0, err
	}
	if resp.IsProgressNotify() {
		return evs, uint64(resp.Header.Revision), nil
	}
	var through uint64
	for _, ev := range resp.Events {
		through = uint64(ev.Kv.ModRevision)
		if ev.Type == clientv3.EventTypePut {
			evs = append(evs, bench.WatchEvent{Revision: through, Value: ev.Kv.Value})
		}
	}
	return evs, through, nil
}

// check says what is wrong with resp: a compaction or a cancellation is
// etcd telling the watcher it fell behind (or stopped serving it).
func (w *etcdWatch) check(resp clientv3.WatchResponse) error {
	switch {
	case resp.CompactRevision != 0:
		return fmt.Errorf("%w: compacted at revision %d", bench.ErrFellBehind, resp.CompactRevision)
	case resp.Canceled:
		return fmt.Errorf("%w: cancelled: %v (%s)", bench.ErrFellBehind, resp.Err(), resp.CancelReason)
	}
	return resp.Err()
}

// Close implements bench.WatchStream.
func (w *etcdWatch) Close() error {
	w.cancel()
	return nil
}
