package clientlib

import (
	"context"
	"errors"
	"fmt"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Bounds on the responses a MuxWatch holds for its reader. Beyond them
// the watch is paused (ErrWatchPaused) rather than let grow or hold up
// the other watches of its stream.
const (
	muxQueueResponses = 4096
	muxQueueBytes     = 16 << 20
)

// ErrWatchPaused ends a MuxWatch whose reader fell so far behind that
// its queued responses reached their bound: the store was asked to stop
// the watch, and every response before the pause was delivered. Watch
// again from the last cursor delivered to go on without a gap (Watcher
// does so by itself).
var ErrWatchPaused = errors.New("clientlib: watch paused: its reader fell behind; watch again from the last cursor")

// errMuxWatchClosed ends a MuxWatch closed by its owner.
var errMuxWatchClosed = fmt.Errorf("watch closed: %w", context.Canceled)

// WatchMux carries the watches of one connection over one WatchStream of
// the store, as etcd's clientv3 carries a client's watches: a change that
// several of them match arrives once, naming them, and one goroutine
// receives for all of them. The stream is opened by the first Watch and
// closed when its last watch ends (or fails, ending them all; the next
// Watch opens a new one). Its methods are safe for concurrent use.
//
// A store without WatchStream (older than it) refuses the stream with
// codes.Unimplemented, which Watch returns: use the Watch RPC then.
type WatchMux struct {
	store storev1.StoreClient
	ctx   context.Context // streams live until it ends

	openMu sync.Mutex // held by the one registering a watch
	mu     sync.Mutex // guards stream and nextID
	stream *muxStream // nil: none open
	nextID int64
}

// NewWatchMux returns the WatchMux of store's connection. Its streams
// end when ctx ends.
func NewWatchMux(ctx context.Context, store storev1.StoreClient) *WatchMux {
	return &WatchMux{store: store, ctx: ctx}
}

// muxStream is one WatchStream and the watches on it.
type muxStream struct {
	stream storev1.Store_WatchStreamClient
	cancel context.CancelFunc
	sendMu sync.Mutex // one Send at a time

	mu      sync.Mutex // guards watches and err
	watches map[int64]*MuxWatch
	err     error // why the stream ended; nil while it runs
}

// MuxWatch is one watch of a WatchMux: the changes under a prefix after
// a cursor. One goroutine calls Next at a time; Close may be called by
// any, at any time.
type MuxWatch struct {
	mux *WatchMux
	s   *muxStream
	id  int64

	mu      sync.Mutex  // guards the fields below
	stop    func() bool // stops the Close at the end of Watch's ctx
	queue   []*storev1.WatchStreamResponse
	sizes   []int // proto sizes of queue's responses
	bytes   int   // their sum
	end     error // set once the watch is over, after queue is read
	removed bool  // the stream no longer routes responses to the watch
	wake    chan struct{}

	// cursor belongs to the goroutine calling Next.
	cursor keyspace.Cursor
}

// Watch starts a watch of prefix after cursor (empty: from the store
// node's current revisions) and returns once the store has acknowledged
// it, or with the error that refused it (what the Watch RPC would have
// ended with: PERMISSION_DENIED, a compacted cursor's OUT_OF_RANGE with
// its CompactedDetail, ...) or ended the stream (UNIMPLEMENTED from a
// store without WatchStream, UNAVAILABLE, ...). The watch ends when ctx
// ends or Close is called.
func (m *WatchMux) Watch(ctx context.Context, prefix string, cursor []byte) (*MuxWatch, error) {
	w, err := m.register()
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, w.Close)
	w.mu.Lock()
	w.stop = stop
	w.mu.Unlock()
	// A failed send means a broken stream, whose end (the store's status:
	// UNIMPLEMENTED, say) the receiver hands to every watch on it,
	// this one's creation included.
	w.s.send(&storev1.WatchStreamRequest{Request: &storev1.WatchStreamRequest_Create{Create: &storev1.WatchCreate{WatchId: w.id, Prefix: prefix, Cursor: cursor}}})
	if err := w.created(ctx); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// register adds a watch to the open stream, opening one if needed.
// Opening waits for the connection; it holds openMu, not mu, so that
// Close never waits for it.
func (m *WatchMux) register() (*MuxWatch, error) {
	m.openMu.Lock()
	defer m.openMu.Unlock()
	for {
		m.mu.Lock()
		s := m.stream
		m.mu.Unlock()
		fresh := s == nil
		if fresh {
			sctx, cancel := context.WithCancel(m.ctx)
			stream, err := m.store.WatchStream(sctx)
			if err != nil {
				cancel()
				return nil, err
			}
			s = &muxStream{stream: stream, cancel: cancel, watches: map[int64]*MuxWatch{}}
			go m.receive(s)
		}
		if w, ok, err := m.add(s, fresh); ok {
			return w, err
		}
	}
}

// add adds a watch to s, which becomes the open stream if it is fresh.
// It reports false when s, not fresh, was closed by its last watch
// since register read it: register then opens another.
func (m *WatchMux) add(s *muxStream, fresh bool) (*MuxWatch, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !fresh && m.stream != s {
		return nil, false, nil
	}
	m.stream = s
	m.nextID++
	w := &MuxWatch{mux: m, s: s, id: m.nextID, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		m.stream = nil
		return nil, true, s.err
	}
	s.watches[w.id] = w
	return w, true, nil
}

// receive hands s's responses to their watches until the stream ends,
// then ends every watch still on it with the stream's error.
func (m *WatchMux) receive(s *muxStream) {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.cancel()
			m.mu.Lock()
			if m.stream == s {
				m.stream = nil
			}
			s.mu.Lock()
			s.err = fmt.Errorf("clientlib: watch stream: %w", err)
			for _, w := range s.watches {
				w.finish(s.err)
			}
			clear(s.watches)
			s.mu.Unlock()
			m.mu.Unlock()
			return
		}
		size := resp.SizeVT()
		s.mu.Lock()
		for _, id := range resp.GetWatchIds() {
			w := s.watches[id]
			if w == nil {
				continue // closed, or paused: what follows is read again on resumption
			}
			keep, paused := w.push(resp, size)
			if !keep {
				delete(s.watches, id)
			}
			if paused {
				// The store stops sending for it at once, not when its
				// reader has drained the queue; in the background, as
				// a Send may wait for the store.
				go s.send(cancelRequest(id))
			}
		}
		s.mu.Unlock()
	}
}

// send sends one request on the stream. A send fails only when the
// stream broke, and then its receiver sees why and ends the watches.
func (s *muxStream) send(req *storev1.WatchStreamRequest) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	_ = s.stream.Send(req)
}

// push queues resp (of size bytes) for the reader. It returns keep
// false when the watch takes no more from the stream: it ended (resp is
// canceled), or its queue is full and it pauses, and then paused is true
// (the store still has the watch).
func (w *MuxWatch) push(resp *storev1.WatchStreamResponse, size int) (keep, paused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end != nil || w.removed {
		return false, false
	}
	if !resp.GetCanceled() && (len(w.queue) >= muxQueueResponses || w.bytes+size > muxQueueBytes) {
		w.removed, paused = true, true
		w.end = ErrWatchPaused
	} else {
		w.queue = append(w.queue, resp)
		w.sizes = append(w.sizes, size)
		w.bytes += size
		w.removed = resp.GetCanceled()
	}
	w.signal()
	return !w.removed, paused
}

// finish ends the watch with err once its queue is read.
func (w *MuxWatch) finish(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removed = true
	if w.end == nil {
		w.end = err
	}
	w.signal()
}

func (w *MuxWatch) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the next queued response, or the error that ended the
// watch once none is left; it waits for either until ctx ends.
func (w *MuxWatch) take(ctx context.Context) (*storev1.WatchStreamResponse, error) {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			resp := w.queue[0]
			w.bytes -= w.sizes[0]
			w.queue[0] = nil
			w.queue, w.sizes = w.queue[1:], w.sizes[1:]
			w.mu.Unlock()
			return resp, nil
		}
		end := w.end
		w.mu.Unlock()
		if end != nil {
			return nil, end
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// created waits for the store's answer to the watch's creation.
func (w *MuxWatch) created(ctx context.Context) error {
	resp, err := w.take(ctx)
	if err != nil {
		return err
	}
	if resp.GetCanceled() {
		return w.ended(resp)
	}
	if !resp.GetCreated() {
		return fmt.Errorf("clientlib: watch stream: watch %d's first response is not its creation: %v", w.id, resp)
	}
	c, err := keyspace.DecodeCursor(resp.GetCursor(), resp.GetShardCount())
	if err != nil {
		return fmt.Errorf("clientlib: watch stream: watch %d created at a bad cursor: %w", w.id, err)
	}
	w.cursor = c
	return nil
}

// ended is the error that ends the watch after the store's canceled
// response: the status it carries, or errMuxWatchClosed when it answers
// a cancel.
func (w *MuxWatch) ended(resp *storev1.WatchStreamResponse) error {
	err := errMuxWatchClosed
	if e := resp.GetError(); e != nil {
		err = status.FromProto(&spb.Status{Code: e.GetCode(), Message: e.GetMessage(), Details: e.GetDetails()}).Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue, w.sizes, w.bytes = nil, nil, 0
	w.end = err
	return err
}

// Next blocks until the next response: events of one shard in commit
// order, or a progress notification, each with the watch's cursor after
// it, as the Watch RPC's responses. Its events are shared with the other
// watches of the stream: read them, do not change them. It returns an
// error once the watch has ended: by the store (its status, as Watch
// ends with), by the stream's end, ErrWatchPaused, ctx's end or Close.
func (w *MuxWatch) Next(ctx context.Context) (*storev1.WatchResponse, error) {
	resp, err := w.take(ctx)
	if err != nil {
		return nil, err
	}
	if resp.GetCanceled() {
		return nil, w.ended(resp)
	}
	if sh := resp.GetShard(); int(sh) >= len(w.cursor) {
		return nil, fmt.Errorf("clientlib: watch stream: a response for shard %d of a cell of %d", sh, len(w.cursor))
	}
	w.cursor[resp.GetShard()] = resp.GetRevision()
	return &storev1.WatchResponse{Events: resp.GetEvents(), Cursor: w.cursor.Encode(), Progress: resp.GetProgress()}, nil
}

// Close ends the watch: the store is asked to stop it, and the stream
// closes if no watch is left on it. Close is idempotent.
func (w *MuxWatch) Close() {
	w.mu.Lock()
	stop := w.stop
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
	m, s := w.mux, w.s
	m.mu.Lock()
	defer m.mu.Unlock()
	s.mu.Lock()
	live := s.watches[w.id] == w
	delete(s.watches, w.id)
	left := len(s.watches)
	s.mu.Unlock()
	w.mu.Lock()
	w.removed = true
	if w.end == nil {
		w.end = errMuxWatchClosed
	}
	w.signal()
	w.mu.Unlock()
	switch {
	case left == 0 && m.stream == s:
		m.stream = nil
		s.cancel()
	case live:
		// Sent in the background: a Send may wait for the store, and
		// Close must not.
		go s.send(cancelRequest(w.id))
	}
}

// cancelRequest asks the store to stop watch id.
func cancelRequest(id int64) *storev1.WatchStreamRequest {
	return &storev1.WatchStreamRequest{Request: &storev1.WatchStreamRequest_Cancel{Cancel: &storev1.WatchCancel{WatchId: id}}}
}
