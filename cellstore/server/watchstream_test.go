package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// muxTestStream is a Store_WatchStreamServer whose requests the test
// sends and whose responses it reads, through channels.
type muxTestStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   chan *storev1.WatchStreamRequest
	out  chan *storev1.WatchStreamResponse
	done chan error // WatchStream's return
}

func (m *muxTestStream) Context() context.Context { return m.ctx }

func (m *muxTestStream) Send(r *storev1.WatchStreamResponse) error {
	select {
	case m.out <- r:
		return nil
	case <-m.ctx.Done():
		return m.ctx.Err()
	}
}

func (m *muxTestStream) Recv() (*storev1.WatchStreamRequest, error) {
	select {
	case r := <-m.in:
		return r, nil
	case <-m.ctx.Done():
		return nil, m.ctx.Err()
	}
}

// startMux runs s.WatchStream on a test stream until ctx ends.
func startMux(ctx context.Context, s *Server) *muxTestStream {
	m := &muxTestStream{ctx: ctx, in: make(chan *storev1.WatchStreamRequest), out: make(chan *storev1.WatchStreamResponse), done: make(chan error, 1)}
	go func() { m.done <- s.WatchStream(m) }()
	return m
}

func (m *muxTestStream) send(t *testing.T, r *storev1.WatchStreamRequest) {
	t.Helper()
	select {
	case m.in <- r:
	case err := <-m.done:
		t.Fatalf("watch stream ended: %v", err)
	case <-m.ctx.Done():
		t.Fatal("timed out sending a request")
	}
}

func (m *muxTestStream) create(t *testing.T, id int64, prefix string, cursor []byte) {
	t.Helper()
	m.send(t, &storev1.WatchStreamRequest{Request: &storev1.WatchStreamRequest_Create{Create: &storev1.WatchCreate{WatchId: id, Prefix: prefix, Cursor: cursor}}})
}

func (m *muxTestStream) cancel(t *testing.T, id int64) {
	t.Helper()
	m.send(t, &storev1.WatchStreamRequest{Request: &storev1.WatchStreamRequest_Cancel{Cancel: &storev1.WatchCancel{WatchId: id}}})
}

func (m *muxTestStream) next(t *testing.T) *storev1.WatchStreamResponse {
	t.Helper()
	select {
	case r := <-m.out:
		return r
	case err := <-m.done:
		t.Fatalf("watch stream ended: %v", err)
	case <-m.ctx.Done():
		t.Fatal("timed out waiting for a watch stream response")
	}
	return nil
}

// muxRecord is what the test keeps per watch id: its events' revisions
// and its last revision of shard 0, checked to rise.
type muxRecord struct {
	t         *testing.T
	revisions map[int64][]uint64
	through   map[int64]uint64
	created   map[int64]bool
	ended     map[int64]*storev1.WatchStreamResponse
	responses int // responses with events
}

func newMuxRecord(t *testing.T) *muxRecord {
	return &muxRecord{t: t, revisions: map[int64][]uint64{}, through: map[int64]uint64{}, created: map[int64]bool{}, ended: map[int64]*storev1.WatchStreamResponse{}}
}

func (r *muxRecord) take(resp *storev1.WatchStreamResponse) {
	r.t.Helper()
	if len(resp.GetEvents()) > 0 {
		r.responses++
	}
	for _, id := range resp.GetWatchIds() {
		switch {
		case resp.GetCreated():
			r.created[id] = true
		case resp.GetCanceled():
			r.ended[id] = resp
		default:
			if !r.created[id] || r.ended[id] != nil {
				r.t.Fatalf("response %v for watch %d, not live", resp, id)
			}
			for _, ev := range resp.GetEvents() {
				v := ev.GetKv().GetVersion()
				if revs := r.revisions[id]; len(revs) > 0 && v <= revs[len(revs)-1] {
					r.t.Fatalf("watch %d: revision %d after %d", id, v, revs[len(revs)-1])
				}
				r.revisions[id] = append(r.revisions[id], v)
			}
			if resp.GetRevision() < r.through[id] {
				r.t.Fatalf("watch %d: cursor back from %d to %d", id, r.through[id], resp.GetRevision())
			}
			r.through[id] = resp.GetRevision()
		}
	}
}

func commitPuts(ctx context.Context, t *testing.T, s *Server, keys ...string) []uint64 {
	t.Helper()
	var revs []uint64
	for _, k := range keys {
		resp, err := s.Commit(ctx, &storev1.CommitRequest{TxnId: k + fmt.Sprint(time.Now().UnixNano()), Groups: []*storev1.Group{{Ops: []*storev1.Op{put(k, "v")}}}})
		if err != nil || !resp.GetGroups()[0].GetCommitted() {
			t.Fatalf("commit %s: %v %v", k, resp, err)
		}
		revs = append(revs, resp.GetGroups()[0].GetRevision())
	}
	return revs
}

// Many watches of one stream: each gets every change under its prefix,
// in order, and a change is sent once for all the watches of a prefix;
// a cancelled watch gets nothing more while the others go on.
func TestWatchStreamManyWatchesAndCancel(t *testing.T) {
	s := newTestServer(t, 1, func(c *Config) { c.ProgressInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := startMux(ctx, s)
	start := keyspace.Cursor{0}.Encode()
	const n = 50
	rec := newMuxRecord(t)
	for id := range int64(n) {
		prefix := "/runs/a/"
		if id%5 == 0 {
			prefix = "/runs/b/"
		}
		m.create(t, id, prefix, start)
		rec.take(m.next(t))
	}
	if len(rec.created) != n {
		t.Fatalf("%d watches created, want %d", len(rec.created), n)
	}
	a := commitPuts(ctx, t, s, "/runs/a/1", "/runs/b/1", "/runs/c/1", "/runs/a/2")
	for rec.through[1] < a[3] || rec.through[0] < a[1] {
		rec.take(m.next(t))
	}
	for id := range int64(n) {
		want := []uint64{a[0], a[3]}
		if id%5 == 0 {
			want = []uint64{a[1]}
		}
		if !slices.Equal(rec.revisions[id], want) {
			t.Fatalf("watch %d got revisions %v, want %v", id, rec.revisions[id], want)
		}
	}
	if rec.responses > 3 {
		t.Fatalf("%d responses with events for 3 matching commits: not one per commit for all watches", rec.responses)
	}

	m.cancel(t, 7)
	for rec.ended[7] == nil {
		rec.take(m.next(t))
	}
	if rec.ended[7].GetError() != nil {
		t.Fatalf("cancel answered with an error: %v", rec.ended[7].GetError())
	}
	b := commitPuts(ctx, t, s, "/runs/a/3")
	for rec.through[1] < b[0] {
		rec.take(m.next(t))
	}
	if got := rec.revisions[7]; got[len(got)-1] != a[3] {
		t.Fatalf("cancelled watch 7 got revisions %v after its cancel", got)
	}
	if got := rec.revisions[8]; got[len(got)-1] != b[0] {
		t.Fatalf("watch 8 got %v after another's cancel, want %d last", got, b[0])
	}
}

// A watch created from an old cursor catches up a batch at a time while
// a watch at the head gets new changes at once; once caught up, the two
// are one group, sent together.
func TestWatchStreamBehindDoesNotHoldOthers(t *testing.T) {
	s := newTestServer(t, 1, func(c *Config) { c.ProgressInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const backlog = 4 * maxRevisionsPerBatch
	keys := make([]string, backlog)
	for i := range keys {
		keys[i] = fmt.Sprintf("/runs/m1/t%04d", i)
	}
	old := commitPuts(ctx, t, s, keys...)
	m := startMux(ctx, s)
	rec := newMuxRecord(t)
	m.create(t, 2, "/runs/m1/", nil) // from now
	rec.take(m.next(t))
	m.create(t, 1, "/runs/m1/", keyspace.Cursor{0}.Encode())
	// Once watch 1 is created, the stream waits to send its first batch
	// until the test reads it, after this commit.
	rec.take(m.next(t))
	if !rec.created[1] || !rec.created[2] {
		t.Fatalf("watches created: %v", rec.created)
	}
	head := commitPuts(ctx, t, s, "/runs/m1/new")[0]
	for rec.through[2] < head {
		rec.take(m.next(t))
	}
	if got := len(rec.revisions[1]); got >= backlog {
		t.Fatalf("the watch behind got all %d old events before the head watch its new one", got)
	}
	for rec.through[1] < head {
		rec.take(m.next(t))
	}
	if want := append(slices.Clone(old), head); !slices.Equal(rec.revisions[1], want) {
		t.Fatalf("the watch behind got %d events, want %d in order", len(rec.revisions[1]), len(want))
	}
	last := commitPuts(ctx, t, s, "/runs/m1/last")[0]
	resp := m.next(t)
	if ids := slices.Sorted(slices.Values(resp.GetWatchIds())); !slices.Equal(ids, []int64{1, 2}) || resp.GetRevision() != last {
		t.Fatalf("after catching up: response %v, want one for watches 1 and 2 at revision %d", resp, last)
	}
}

// A compacted cursor ends that watch alone, with OUT_OF_RANGE and the
// oldest cursor (as Watch's error); another watch of the stream goes on.
func TestWatchStreamCompactedEndsOneWatch(t *testing.T) {
	hub := watch.NewHub(watch.Config{RingRevisions: 1, RingBytes: 1 << 20, Retention: 5}, 1)
	cfg := DefaultConfig()
	cfg.LogRetention = 5
	cfg.ProgressInterval = time.Hour
	s, err := New(cfg, newMemBackend(t, 1, hub), hub, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		commitPuts(ctx, t, s, fmt.Sprintf("/runs/m1/k%d", i))
	}
	m := startMux(ctx, s)
	rec := newMuxRecord(t)
	m.create(t, 1, "/runs/m1/", nil)
	m.create(t, 2, "/runs/m1/", keyspace.Cursor{1}.Encode())
	for !rec.created[1] || rec.ended[2] == nil {
		rec.take(m.next(t))
	}
	e := rec.ended[2].GetError()
	st := status.FromProto(&spb.Status{Code: e.GetCode(), Message: e.GetMessage(), Details: e.GetDetails()})
	cd := storeerr.CompactedDetailOf(st.Err())
	if st.Code() != codes.OutOfRange || cd == nil || cd.GetRequestedRevision() != 2 || len(cd.GetOldestCursor()) == 0 {
		t.Fatalf("compacted watch ended with %v (detail %v), want OUT_OF_RANGE with a CompactedDetail from revision 2", st, cd)
	}
	rev := commitPuts(ctx, t, s, "/runs/m1/after")[0]
	for rec.through[1] < rev {
		rec.take(m.next(t))
	}
	if !slices.Equal(rec.revisions[1], []uint64{rev}) || rec.revisions[2] != nil {
		t.Fatalf("after the compaction: watch 1 got %v, watch 2 %v; want [%d] and nothing", rec.revisions[1], rec.revisions[2], rev)
	}
}

// denyPrefix refuses watches of one prefix.
type denyPrefix string

func (d denyPrefix) Authorize(_ context.Context, a Access) error {
	if a.PrefixOp == authz.OpWatch && strings.HasPrefix(a.Prefix, string(d)) {
		return storeerr.PermissionDenied.With("%s: may not watch %q", a.Method, a.Prefix)
	}
	return nil
}

// A watch its caller may not make is refused alone, with the error Watch
// gives; the stream's other watches go on, and so does the stream. A bad
// cursor and an id in use are refused the same way.
func TestWatchStreamRefusesOneWatch(t *testing.T) {
	s := newTestServer(t, 1, func(c *Config) {
		c.ProgressInterval = time.Hour
		c.Authorizer = denyPrefix("/secret/")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.Watch(&storev1.WatchRequest{Prefix: "/secret/x"}, &watchStream{ctx: ctx})
	m := startMux(ctx, s)
	rec := newMuxRecord(t)
	m.create(t, 1, "/runs/", nil)
	m.create(t, 2, "/secret/x", nil)
	m.create(t, 3, "/runs/", []byte("garbage"))
	m.create(t, 1, "/runs/", nil)
	for len(rec.ended) < 2 || !rec.created[1] {
		rec.take(m.next(t))
	}
	refused := m.next(t) // the second create of id 1
	if e := rec.ended[2].GetError(); codes.Code(e.GetCode()) != status.Code(err) || e.GetMessage() != status.Convert(err).Message() {
		t.Fatalf("denied watch ended with %v; Watch gives %v", e, err)
	}
	if e := rec.ended[3].GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument {
		t.Fatalf("bad cursor ended with %v, want INVALID_ARGUMENT", e)
	}
	if !refused.GetCanceled() || codes.Code(refused.GetError().GetCode()) != codes.InvalidArgument || !slices.Equal(refused.GetWatchIds(), []int64{1}) {
		t.Fatalf("a create with an id in use: %v, want it refused", refused)
	}
	rev := commitPuts(ctx, t, s, "/runs/x", "/secret/x")
	for rec.through[1] < rev[0] {
		rec.take(m.next(t))
	}
	if !slices.Equal(rec.revisions[1], rev[:1]) {
		t.Fatalf("watch 1 got %v, want [%d]", rec.revisions[1], rev[0])
	}
}

// Progress notifications move the cursor of every watch, also of one
// whose shard only changes outside its prefix.
func TestWatchStreamProgress(t *testing.T) {
	s := newTestServer(t, 1, func(c *Config) { c.ProgressInterval = time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := startMux(ctx, s)
	rec := newMuxRecord(t)
	m.create(t, 1, "/runs/m1/", keyspace.Cursor{0}.Encode())
	rev := commitPuts(ctx, t, s, "/runs/m2/a", "/runs/m2/b")
	for rec.through[1] < rev[1] {
		rec.take(m.next(t))
	}
	if len(rec.revisions[1]) != 0 {
		t.Fatalf("events %v outside the prefix", rec.revisions[1])
	}
}
