package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

const watchStreamMethod = "/troupe.store.v1.Store/WatchStream"

// oldStore is a store from before WatchStream: gRPC answers it with
// Unimplemented, as a server that does not know the method does.
type oldStore struct{ storev1.StoreServer }

func (oldStore) WatchStream(storev1.Store_WatchStreamServer) error {
	return status.Error(codes.Unimplemented, "unknown method WatchStream for service troupe.store.v1.Store")
}

// startMemStore serves a one-shard store over a MemBackend on a loopback
// port, plaintext, as it is or as an oldStore, until the test ends; it
// returns the address.
func startMemStore(t *testing.T, old bool) string {
	t.Helper()
	hub := watch.NewHub(watch.DefaultConfig(), 1)
	b, err := server.NewMemBackend(1, hub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := server.New(server.DefaultConfig(), b, hub, 1)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	if old {
		storev1.RegisterStoreServer(gs, oldStore{s})
	} else {
		storev1.RegisterStoreServer(gs, s)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// memClient is a plaintext Client of the store at addr, its RPCs
// recorded in log, its metrics registered with reg (if not nil).
func memClient(t *testing.T, addr string, log *rpcLog, reg prometheus.Registerer) *clientlib.Client {
	t.Helper()
	cfg := clientlib.DefaultConfig(addr)
	cfg.Registerer = reg
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(log.unary), grpc.WithChainStreamInterceptor(log.stream)}
	c, err := clientlib.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWatchersShareOneStream: the Watchers of a client share one
// WatchStream per endpoint; when its node stops, every one of them goes
// on from its own cursor on another node, without gaps or duplicates.
func TestWatchersShareOneStream(t *testing.T) {
	cell := startClientCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	writer := cell.client(nil, nil)
	log := &rpcLog{}
	reader := cell.client(log, nil)
	mustCommitPut(ctx, t, writer, "/mx/a/before", "old")
	_, start, err := reader.List(ctx, "/mx/")
	if err != nil {
		t.Fatal(err)
	}
	from, err := keyspace.DecodeCursor(start, cell.shards)
	if err != nil {
		t.Fatal(err)
	}
	prefixes := []string{"/mx/", "/mx/a/", "/mx/b/", "/mx/", "/mx/a/", "/mx/b/"}
	pumps := make([]*watchPump, len(prefixes))
	recs := make([]*watchRecord, len(prefixes))
	for i, p := range prefixes {
		w := reader.Watch(ctx, p, start)
		defer w.Close()
		pumps[i], recs[i] = pumpWatch(ctx, w), &watchRecord{events: map[uint32][]*storev1.Event{}}
	}
	var acks []putAck
	commit := func(n int, tag string) {
		for i := range n {
			acks = append(acks, mustCommitPut(ctx, t, writer, fmt.Sprintf("/mx/%c/%s%d", 'a'+i%3, tag, i), tag))
		}
	}
	under := func(p string) []putAck {
		var out []putAck
		for _, a := range acks {
			if strings.HasPrefix(a.key, p) {
				out = append(out, a)
			}
		}
		return out
	}
	collect := func() {
		t.Helper()
		for i, p := range prefixes {
			for !recs[i].covers(under(p)) {
				resp, err := pumps[i].next(ctx, t)
				if err != nil {
					t.Fatalf("watch %d of %q ended: %v", i, p, err)
				}
				recs[i].take(t, cell.shards, resp)
			}
			recs[i].check(t, under(p), from)
		}
	}
	commit(12, "x")
	collect()
	streams := log.of(watchStreamMethod)
	if len(streams) != 1 || len(log.of(watchMethod)) != 0 {
		t.Fatalf("%d watch streams and %d Watch RPCs for %d watchers; want one stream", len(streams), len(log.of(watchMethod)), len(prefixes))
	}
	watched := cell.nodeOf(streams[0].target)
	cell.StopNode(watched)
	t.Logf("stopped node %d (%s), the watchers' stream's", watched, cell.eps[watched])
	commit(12, "y")
	collect()
	for _, s := range log.of(watchStreamMethod)[1:] {
		if s.target == cell.eps[watched] {
			t.Fatalf("a watch stream reopened on the stopped node %s", s.target)
		}
	}
}

// TestWatchFallsBackToWatchRPC: against a store without WatchStream a
// Watcher watches with a Watch RPC of its own, and gets every change.
func TestWatchFallsBackToWatchRPC(t *testing.T) {
	addr := startMemStore(t, true)
	log := &rpcLog{}
	c := memClient(t, addr, log, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	_, start, err := c.List(ctx, "/fb/")
	if err != nil {
		t.Fatal(err)
	}
	var pumps []*watchPump
	for range 2 {
		w := c.Watch(ctx, "/fb/", start)
		defer w.Close()
		pumps = append(pumps, pumpWatch(ctx, w))
	}
	var acks []putAck
	for i := range 5 {
		acks = append(acks, mustCommitPut(ctx, t, c, fmt.Sprintf("/fb/k%d", i), "v"))
	}
	from, _ := keyspace.DecodeCursor(start, 1)
	for _, p := range pumps {
		rec := &watchRecord{events: map[uint32][]*storev1.Event{}}
		for !rec.covers(acks) {
			resp, err := p.next(ctx, t)
			if err != nil {
				t.Fatalf("watch of an old store: %v", err)
			}
			rec.take(t, 1, resp)
		}
		rec.check(t, acks, from)
	}
	if n := len(log.of(watchMethod)); n != 2 {
		t.Fatalf("%d Watch RPCs for 2 watchers of an old store", n)
	}
}

// TestWatchMuxPausesSlowReader: a watch whose reader does not keep up is
// paused once its queue reaches its bound, after every response before
// it, while another watch of the stream gets everything; a Watcher whose
// reader was that slow goes on from its cursor and misses nothing.
func TestWatchMuxPausesSlowReader(t *testing.T) {
	addr := startMemStore(t, false)
	reg := prometheus.NewRegistry()
	c := memClient(t, addr, &rpcLog{}, reg)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	cancels := make(chan int64, 8)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			return cancelSpy{cs, cancels}, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mux := clientlib.NewWatchMux(ctx, storev1.NewStoreClient(conn))
	_, start, err := c.List(ctx, "/slow/")
	if err != nil {
		t.Fatal(err)
	}
	slow, err := mux.Watch(ctx, "/slow/", start)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := mux.Watch(ctx, "/slow/", start)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	// Two Watchers of c share c's stream the same way.
	slowWatcher := c.Watch(ctx, "/slow/", start)
	defer slowWatcher.Close()
	fastWatcher := c.Watch(ctx, "/slow/", start)
	defer fastWatcher.Close()

	// 48 values of 512 KiB: three times the bound on a watch's queue.
	const n, size = 48, 512 << 10
	var acks []putAck
	rec := &watchRecord{events: map[uint32][]*storev1.Event{}}
	for i := range n {
		acks = append(acks, mustCommitPut(ctx, t, c, fmt.Sprintf("/slow/k%02d", i), strings.Repeat(string(rune('a'+i%26)), size)))
		if i == 0 {
			// The Watcher's stream opens with its first Next; then it is
			// not read until the end.
			resp, err := slowWatcher.Next()
			if err != nil {
				t.Fatalf("the slow Watcher: %v", err)
			}
			rec.take(t, 1, resp)
		}
		// Once the fast one has commit i, the response with commit i-1
		// went to the slow one's queue too: one response names both.
		for got := 0; got == 0; {
			resp, err := fast.Next(ctx)
			if err != nil {
				t.Fatalf("the fast watch after %d commits: %v", i, err)
			}
			got = len(resp.GetEvents())
		}
		for got := 0; got == 0; {
			resp, err := fastWatcher.Next()
			if err != nil {
				t.Fatalf("the fast Watcher after %d commits: %v", i, err)
			}
			got = len(resp.GetEvents())
		}
	}
	// The slow watch paused before the fast one had the last commit; the
	// store is asked to stop it then, before its queue is read.
	select {
	case <-cancels:
	case <-ctx.Done():
		t.Fatal("the paused watch was not canceled on the store before its reader drained it")
	}
	read := 0
	for {
		resp, err := slow.Next(ctx)
		if errors.Is(err, clientlib.ErrWatchPaused) {
			break
		}
		if err != nil {
			t.Fatalf("the slow watch after %d events: %v", read, err)
		}
		read += len(resp.GetEvents())
	}
	if read == 0 || read >= n {
		t.Fatalf("the slow watch was paused after %d of %d events; want some but not all", read, n)
	}
	t.Logf("paused after %d events", read)

	from, _ := keyspace.DecodeCursor(start, 1)
	for !rec.covers(acks) {
		resp, err := slowWatcher.Next()
		if err != nil {
			t.Fatalf("the slow Watcher: %v", err)
		}
		rec.take(t, 1, resp)
	}
	rec.check(t, acks, from)
	if v := clientMetricValue(t, reg, "troupe_client_retries_total", map[string]string{"method": "Watch"}); v == 0 {
		t.Fatalf("the slow Watcher was never paused and resumed (troupe_client_retries_total{method=Watch} is 0)")
	}
}

// cancelSpy reports the watch IDs of the WatchStream cancels sent on its
// stream.
type cancelSpy struct {
	grpc.ClientStream
	cancels chan<- int64
}

func (c cancelSpy) SendMsg(m any) error {
	if req, ok := m.(*storev1.WatchStreamRequest); ok && req.GetCancel() != nil {
		c.cancels <- req.GetCancel().GetWatchId()
	}
	return c.ClientStream.SendMsg(m)
}
