package server

import (
	"cmp"
	"context"
	"errors"
	"io"
	"reflect"
	"slices"
	"time"

	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

const (
	// maxWatchesPerStream bounds the watches of one WatchStream, and so
	// its memory: a watch costs its prefix, its cursor and a few words.
	maxWatchesPerStream = 100000
	// streamRequestsAhead bounds the requests read from a WatchStream
	// before its goroutine takes them; beyond it the client's sends wait
	// (gRPC flow control).
	streamRequestsAhead = 64
)

// WatchStream implements storev1.StoreServer: many watches over one
// stream, as etcd's Watch. One goroutine reads the requests; this one
// serves every watch, so that a commit wakes one goroutine per stream
// rather than one per watch, and the changes it sends for several
// watches are encoded and sent once.
//
// Watches that share a prefix and a position on a shard form a group
// (watchGroup): a round reads each shard's history once per position
// (hub.Next) and sends each group its events in one response naming all
// its watches, then waits for a shard to advance, a request or the
// progress ticker. A group behind the others (a watch created from an
// old cursor) takes one batch per round like the rest, so it does not
// hold the others up, and joins them when it reaches their position.
//
// A watch's errors end that watch alone, with a canceled response
// carrying the status Watch would have ended with: the same admission
// (watchStart), and a compacted cursor answered as watchError does. The
// stream itself never buffers: Send blocks when the client does not read
// (gRPC flow control), and the client keeps a slow watch from holding
// the others back (clientlib). Progress notifications go to every group
// each ProgressInterval, as Watch's.
func (s *Server) WatchStream(stream storev1.Store_WatchStreamServer) error {
	ctx := stream.Context()
	reqs := make(chan *storev1.WatchStreamRequest, streamRequestsAhead)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	m := &watchMux{s: s, stream: stream, watches: map[int64]*muxWatch{}, groups: map[groupKey]*watchGroup{}}
	defer func() { s.cfg.Metrics.watchers.Sub(float64(len(m.watches))) }()
	ticker := time.NewTicker(s.cfg.ProgressInterval)
	defer ticker.Stop()
	for {
		advanced, waits, err := m.serve()
		if err != nil {
			return err
		}
		var ev streamEvent
		if advanced {
			ev = pollStream(reqs, ticker.C)
		} else {
			ev = waitStream(ctx, reqs, recvErr, ticker.C, waits)
		}
		switch {
		case ev.req != nil:
			if err := m.handle(ctx, ev.req); err != nil {
				return err
			}
			// Take the requests already read before the next round.
			for range len(reqs) {
				if err := m.handle(ctx, <-reqs); err != nil {
					return err
				}
			}
		case ev.tick:
			if err := m.progress(); err != nil {
				return err
			}
		case ev.err != nil:
			if errors.Is(ev.err, io.EOF) {
				return nil // the client closed its side
			}
			return ev.err
		}
	}
}

// streamEvent is what woke a WatchStream: a request, the progress
// ticker, the end of the requests or of the stream (err), or a shard's
// advance (none of these).
type streamEvent struct {
	req  *storev1.WatchStreamRequest
	tick bool
	err  error
}

// pollStream returns a request or the ticker if either is ready, without
// waiting.
func pollStream(reqs <-chan *storev1.WatchStreamRequest, tick <-chan time.Time) streamEvent {
	select {
	case req := <-reqs:
		return streamEvent{req: req}
	case <-tick:
		return streamEvent{tick: true}
	default:
		return streamEvent{}
	}
}

// waitStream waits for a request, the ticker, the end of the stream or
// one of waits (channels closed when a shard advances).
func waitStream(ctx context.Context, reqs <-chan *storev1.WatchStreamRequest, recvErr <-chan error, tick <-chan time.Time, waits []<-chan struct{}) streamEvent {
	var wait <-chan struct{} // nil: none
	if len(waits) == 1 {
		wait = waits[0]
	}
	if len(waits) <= 1 {
		select {
		case req := <-reqs:
			return streamEvent{req: req}
		case <-tick:
			return streamEvent{tick: true}
		case err := <-recvErr:
			return streamEvent{err: err}
		case <-ctx.Done():
			return streamEvent{err: ctx.Err()}
		case <-wait:
			return streamEvent{}
		}
	}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(reqs)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tick)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(recvErr)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
	}
	for _, w := range waits {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	i, v, _ := reflect.Select(cases)
	switch i {
	case 0:
		return streamEvent{req: v.Interface().(*storev1.WatchStreamRequest)}
	case 1:
		return streamEvent{tick: true}
	case 2:
		return streamEvent{err: v.Interface().(error)}
	case 3:
		return streamEvent{err: ctx.Err()}
	}
	return streamEvent{}
}

// watchMux is the state of one WatchStream, owned by its goroutine.
type watchMux struct {
	s       *Server
	stream  storev1.Store_WatchStreamServer
	watches map[int64]*muxWatch
	groups  map[groupKey]*watchGroup
}

// muxWatch is one watch of a stream.
type muxWatch struct {
	id     int64
	cursor keyspace.Cursor // as created; its shards' revisions are its groups'
	shards []uint32        // the shards under its prefix
	groups []*watchGroup   // groups[i] holds it on shards[i]
}

// current is the watch's cursor now.
func (w *muxWatch) current() keyspace.Cursor {
	c := w.cursor.Clone()
	for i, sh := range w.shards {
		c[sh] = w.groups[i].pos
	}
	return c
}

// groupKey identifies a group: watches of one prefix at one revision of
// one shard.
type groupKey struct {
	shard  uint32
	prefix string
	pos    uint64
}

// watchGroup is the watches of a stream that share a prefix and have
// been sent everything of a shard through revision pos.
type watchGroup struct {
	groupKey
	watches []*muxWatch
	ids     []int64 // the watches' ids, in the same order
}

// handle carries out one request. It returns an error only when the
// stream cannot go on.
func (m *watchMux) handle(ctx context.Context, req *storev1.WatchStreamRequest) error {
	switch r := req.GetRequest().(type) {
	case *storev1.WatchStreamRequest_Create:
		return m.create(ctx, r.Create)
	case *storev1.WatchStreamRequest_Cancel:
		if w := m.watches[r.Cancel.GetWatchId()]; w != nil {
			m.remove(w)
		}
		return m.stream.Send(&storev1.WatchStreamResponse{WatchIds: []int64{r.Cancel.GetWatchId()}, Canceled: true})
	}
	return storeerr.MalformedOp.With("watch stream: a request with neither create nor cancel")
}

// create starts a watch, or refuses it (alone) with the error that would
// have refused a Watch.
func (m *watchMux) create(ctx context.Context, req *storev1.WatchCreate) error {
	id := req.GetWatchId()
	if m.watches[id] != nil {
		return m.end(id, storeerr.MalformedOp.With("watch stream: watch id %d is in use", id))
	}
	if len(m.watches) >= maxWatchesPerStream {
		return m.end(id, storeerr.OverLimit.With("watch stream: %d watches, the most one stream carries", len(m.watches)))
	}
	cursor, shards, err := m.s.watchStart(ctx, req.GetPrefix(), req.GetCursor())
	if err != nil {
		return m.end(id, err)
	}
	w := &muxWatch{id: id, cursor: cursor, shards: shards, groups: make([]*watchGroup, len(shards))}
	for i, sh := range shards {
		w.groups[i] = m.join(w, groupKey{shard: sh, prefix: req.GetPrefix(), pos: cursor[sh]})
	}
	m.watches[id] = w
	m.s.cfg.Metrics.watchers.Inc()
	return m.stream.Send(&storev1.WatchStreamResponse{WatchIds: []int64{id}, Created: true, Cursor: cursor.Encode(), ShardCount: m.s.router.Shards()})
}

// join adds w to the group of k, made if there is none.
func (m *watchMux) join(w *muxWatch, k groupKey) *watchGroup {
	g := m.groups[k]
	if g == nil {
		g = &watchGroup{groupKey: k}
		m.groups[k] = g
	}
	g.watches = append(g.watches, w)
	g.ids = append(g.ids, w.id)
	return g
}

// remove ends w: it leaves its groups, and a group left empty goes.
func (m *watchMux) remove(w *muxWatch) {
	delete(m.watches, w.id)
	m.s.cfg.Metrics.watchers.Dec()
	for _, g := range w.groups {
		i := slices.Index(g.watches, w)
		g.watches = slices.Delete(g.watches, i, i+1)
		g.ids = slices.Delete(g.ids, i, i+1)
		if len(g.watches) == 0 && m.groups[g.groupKey] == g {
			delete(m.groups, g.groupKey)
		}
	}
}

// end tells the client that watch id is over because of err.
func (m *watchMux) end(id int64, err error) error {
	p := status.Convert(err).Proto()
	return m.stream.Send(&storev1.WatchStreamResponse{WatchIds: []int64{id}, Canceled: true,
		Error: &storev1.WatchStatus{Code: p.GetCode(), Message: p.GetMessage(), Details: p.GetDetails()}})
}

// hubRead is one read of a shard's history after a position.
type hubRead struct {
	entries []statemachine.LogEntry
	wait    <-chan struct{}
	err     error
}

// serve runs one round: every group behind its shard gets its next
// batch. It reports whether any group advanced and, if none did, the
// channels that close when their shards advance.
func (m *watchMux) serve() (advanced bool, waits []<-chan struct{}, err error) {
	type at struct {
		shard uint32
		pos   uint64
	}
	reads := map[at]hubRead{}
	groups := make([]*watchGroup, 0, len(m.groups))
	for _, g := range m.groups {
		groups = append(groups, g)
	}
	// The groups furthest on first: a group that catches up with one of
	// them this round finds it in m.groups and joins it.
	slices.SortFunc(groups, func(a, b *watchGroup) int { return cmp.Compare(b.pos, a.pos) })
	clear(m.groups)
	for _, g := range groups {
		if len(g.watches) == 0 {
			continue // its watches ended this round
		}
		k := at{g.shard, g.pos}
		r, ok := reads[k]
		if !ok {
			r.entries, r.wait, r.err = m.s.hub.Next(g.shard, g.pos, maxRevisionsPerBatch)
			reads[k] = r
			if r.wait != nil {
				waits = append(waits, r.wait)
			}
		}
		switch {
		case r.err != nil:
			if err := m.fail(g, r.err); err != nil {
				return false, nil, err
			}
			continue
		case r.wait == nil:
			b := matching(r.entries, g.shard, g.prefix)
			g.pos = b.last
			advanced = true
			if len(b.events) > 0 {
				if err := m.stream.Send(&storev1.WatchStreamResponse{WatchIds: g.ids, Shard: g.shard, Revision: b.last, Events: b.events}); err != nil {
					return false, nil, err
				}
				m.s.cfg.Metrics.watchEvents.Add(float64(len(b.events) * len(g.ids)))
			}
		}
		m.regroup(g)
	}
	if advanced {
		waits = nil
	}
	return advanced, waits, nil
}

// regroup puts g back among the stream's groups, merged into the group
// already at its key if there is one.
func (m *watchMux) regroup(g *watchGroup) {
	into := m.groups[g.groupKey]
	if into == nil {
		m.groups[g.groupKey] = g
		return
	}
	for _, w := range g.watches {
		w.groups[slices.Index(w.groups, g)] = into
	}
	into.watches = append(into.watches, g.watches...)
	into.ids = append(into.ids, g.ids...)
}

// fail ends every watch of g after a read of its shard failed: each is
// told as Watch would tell it (a compacted cursor with the oldest cursor
// it can resume from).
func (m *watchMux) fail(g *watchGroup, err error) error {
	for _, w := range slices.Clone(g.watches) {
		werr := m.s.watchError(err, w.current(), w.shards)
		m.remove(w)
		if err := m.end(w.id, werr); err != nil {
			return err
		}
	}
	return nil
}

// progress moves every group's cursors on to where the group is.
func (m *watchMux) progress() error {
	for _, g := range m.groups {
		if err := m.stream.Send(&storev1.WatchStreamResponse{WatchIds: g.ids, Shard: g.shard, Revision: g.pos, Progress: true}); err != nil {
			return err
		}
	}
	return nil
}
