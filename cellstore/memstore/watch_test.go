package memstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

var _ clientlib.Store = (*Store)(nil)

// testTimeout bounds a test that would otherwise hang on a bug; nothing
// waits for it to pass.
const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t *testing.T, retention uint64) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Retention = retention
	s, err := NewWithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func put(t *testing.T, s *Store, key, value string) {
	t.Helper()
	commit(t, s, &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte(value)}}})
}

func del(t *testing.T, s *Store, key string) {
	t.Helper()
	commit(t, s, &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: key}}})
}

func commit(t *testing.T, s *Store, op *storev1.Op) {
	t.Helper()
	out, err := s.Commit(t.Context(), &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{op}}}})
	if err != nil || !out.GetGroups()[0].GetCommitted() {
		t.Fatalf("commit %v: %v %v", op, out, err)
	}
}

func cursorOf(rev uint64) []byte { return keyspace.Cursor{rev}.Encode() }

// show renders a response as "PUT /a/1@1 DELETE /a/1@4 -> 4".
func show(t *testing.T, resp *storev1.WatchResponse) string {
	t.Helper()
	out := ""
	for _, ev := range resp.GetEvents() {
		if ev.GetShard() != 0 {
			t.Errorf("event on shard %d in a one-shard store", ev.GetShard())
		}
		typ := "PUT"
		if ev.GetType() == storev1.EventType_EVENT_TYPE_DELETE {
			typ = "DELETE"
		}
		out += fmt.Sprintf("%s %s@%d ", typ, ev.GetKv().GetKey(), ev.GetKv().GetVersion())
	}
	c, err := keyspace.DecodeCursor(resp.GetCursor(), 1)
	if err != nil {
		t.Fatalf("response cursor: %v", err)
	}
	return fmt.Sprintf("%s-> %d", out, c[0])
}

func next(t *testing.T, w *Watcher) string {
	t.Helper()
	resp, err := w.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return show(t, resp)
}

// A watch from a List's cursor gets what was committed after it, under
// its prefix only, in responses shaped like the server's; a watch resumed
// from a response's cursor neither skips nor repeats.
func TestWatchFromCursor(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)
	put(t, s, "/a/0", "x")
	_, listed, err := s.List(ctx, "/a/")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "/a/1", "x")
	put(t, s, "/b/1", "x")
	put(t, s, "/a/2", "x")
	w := s.Watch(ctx, "/a/", listed)
	defer w.Close()
	if got, want := next(t, w), "PUT /a/1@2 PUT /a/2@4 -> 4"; got != want {
		t.Fatalf("first response %q, want %q", got, want)
	}
	resume := w.Cursor()
	del(t, s, "/a/1")
	if got, want := next(t, w), "DELETE /a/1@5 -> 5"; got != want {
		t.Fatalf("second response %q, want %q", got, want)
	}
	// Revisions without events under the prefix only move the cursor on.
	put(t, s, "/b/2", "x")
	put(t, s, "/a/3", "x")
	if got, want := next(t, w), "PUT /a/3@7 -> 7"; got != want {
		t.Fatalf("third response %q, want %q", got, want)
	}

	again := s.Watch(ctx, "/a/", resume)
	defer again.Close()
	if got, want := next(t, again), "DELETE /a/1@5 PUT /a/3@7 -> 7"; got != want {
		t.Fatalf("resumed watch %q, want %q", got, want)
	}
}

// An empty cursor means from now.
func TestWatchFromNow(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)
	put(t, s, "/a/1", "x")
	w := s.Watch(ctx, "/a/", nil)
	defer w.Close()
	put(t, s, "/a/2", "x")
	if got, want := next(t, w), "PUT /a/2@2 -> 2"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// A response covers at most 256 revisions, as the server's.
func TestWatchBatches(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)
	for i := range 600 {
		put(t, s, fmt.Sprintf("/a/%d", i), "x")
	}
	w := s.Watch(ctx, "/a/", cursorOf(0))
	defer w.Close()
	for _, want := range []struct {
		events int
		cursor uint64
	}{{256, 256}, {256, 512}, {88, 600}} {
		resp, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := keyspace.DecodeCursor(resp.GetCursor(), 1)
		if len(resp.GetEvents()) != want.events || c[0] != want.cursor {
			t.Fatalf("response of %d events to %v, want %d to %d", len(resp.GetEvents()), c, want.events, want.cursor)
		}
	}
}

// A cursor older than the retention gets the server's compacted error,
// which clientlib.IsCompacted matches, with the oldest cursor to resume
// from; the boundary cursor still works.
func TestWatchCompacted(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, 3)
	for i := range 10 {
		put(t, s, fmt.Sprintf("/a/%d", i), "x")
	}
	w := s.Watch(ctx, "/a/", cursorOf(6))
	_, err := w.Next()
	if !clientlib.IsCompacted(err) || !errors.Is(err, storeerr.Compacted) || status.Code(err) != codes.OutOfRange {
		t.Fatalf("Next from revision 6 of 10 kept 3: %v, want compacted", err)
	}
	detail := storeerr.CompactedDetailOf(err)
	if detail.GetRequestedRevision() != 7 || detail.GetOldestRevision() != 8 {
		t.Fatalf("detail %v, want requested 7, oldest 8", detail)
	}
	if _, again := w.Next(); again != err {
		t.Fatalf("Next after the end: %v, want the same error %v", again, err)
	}
	w.Close()

	from := s.Watch(ctx, "/a/", detail.GetOldestCursor())
	defer from.Close()
	if got, want := next(t, from), "PUT /a/7@8 PUT /a/8@9 PUT /a/9@10 -> 10"; got != want {
		t.Fatalf("from the oldest cursor: %q, want %q", got, want)
	}
}

// A slow watch never holds a commit back: it gets what it falls behind by
// within the retention, and the compacted error beyond it.
func TestSlowWatcher(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, 5)
	within := s.Watch(ctx, "/a/", nil)
	defer within.Close()
	beyond := s.Watch(ctx, "/a/", nil)
	defer beyond.Close()
	for i := range 5 {
		put(t, s, fmt.Sprintf("/a/%d", i), "x")
	}
	if got, want := next(t, within), "PUT /a/0@1 PUT /a/1@2 PUT /a/2@3 PUT /a/3@4 PUT /a/4@5 -> 5"; got != want {
		t.Fatalf("a watch 5 behind with 5 kept: %q, want %q", got, want)
	}
	put(t, s, "/a/5", "x") // every commit returned: no watch read them
	if _, err := beyond.Next(); !clientlib.IsCompacted(err) {
		t.Fatalf("a watch 6 behind with 5 kept: %v, want compacted", err)
	}
	if got, want := next(t, within), "PUT /a/5@6 -> 6"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// An unusable cursor gets the server's InvalidArgument.
func TestWatchInvalidCursor(t *testing.T) {
	s := newStore(t, DefaultRetention)
	w := s.Watch(testCtx(t), "/a/", []byte{1, 2, 3})
	defer w.Close()
	if _, err := w.Next(); !errors.Is(err, storeerr.BadCursor) || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Next: %v, want BadCursor", err)
	}
}

// pump calls Next in a goroutine, as a consumer does.
func pump(w *Watcher) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := w.Next()
		done <- err
	}()
	return done
}

// Next blocks until a commit under the prefix, and ends on Close or the
// context's end with an error that says which.
func TestNextBlocksUntilCommitCloseOrCancel(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)

	w := s.Watch(ctx, "/a/", nil)
	done := pump(w)
	if err := s.Quiesce(ctx); err != nil { // the pump is blocked in Next
		t.Fatal(err)
	}
	put(t, s, "/b/1", "x") // not under the prefix: Next goes on waiting
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Next returned %v on a commit outside its prefix", err)
	default:
	}
	put(t, s, "/a/1", "x")
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	done = pump(w)
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after Close: %v, want context.Canceled", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	w = s.Watch(cctx, "/a/", nil)
	done = pump(w)
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after the context's end: %v, want context.Canceled", err)
	}
	if _, err := w.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next again: %v", err)
	}
}

// Concurrent commits reach a watch in commit order, each once.
func TestWatchOrderAcrossConcurrentCommits(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)
	const writers, each = 4, 200
	w := s.Watch(ctx, "/k/", cursorOf(0))
	defer w.Close()
	got := make(chan []*storev1.Event)
	go func() {
		var evs []*storev1.Event
		for len(evs) < writers*each {
			resp, err := w.Next()
			if err != nil {
				t.Error(err)
				break
			}
			evs = append(evs, resp.GetEvents()...)
		}
		got <- evs
	}()
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				if i%3 == 2 { // what this writer put last
					del(t, s, fmt.Sprintf("/k/%d/%d", g, (i-1)%10))
				} else {
					put(t, s, fmt.Sprintf("/k/%d/%d", g, i%10), fmt.Sprint(i))
				}
			}
		})
	}
	wg.Wait()
	evs := <-got
	if len(evs) != writers*each {
		t.Fatalf("%d events, want %d", len(evs), writers*each)
	}
	perWriter := map[int]int{}
	for i, ev := range evs {
		if ev.GetKv().GetVersion() != uint64(i+1) {
			t.Fatalf("event %d at revision %d: out of order", i, ev.GetKv().GetVersion())
		}
		var g, k int
		if _, err := fmt.Sscanf(ev.GetKv().GetKey(), "/k/%d/%d", &g, &k); err != nil {
			t.Fatalf("event on %q: %v", ev.GetKv().GetKey(), err)
		}
		perWriter[g]++
	}
	for g := range writers {
		if perWriter[g] != each {
			t.Fatalf("writer %d: %d events, want %d", g, perWriter[g], each)
		}
	}
}

// Quiesce returns once every watch's consumer has taken in every commit
// and is back in Next; a watch nobody reads holds it, until it is closed.
func TestQuiesce(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)
	if err := s.Quiesce(ctx); err != nil {
		t.Fatalf("Quiesce without watches: %v", err)
	}
	var applied atomic.Uint64 // the revision the consumer has applied
	w := s.Watch(ctx, "/a/", nil)
	defer w.Close()
	go func() {
		for {
			resp, err := w.Next()
			if err != nil {
				return
			}
			c, _ := keyspace.DecodeCursor(resp.GetCursor(), 1)
			applied.Store(c[0]) // applied before asking for more
		}
	}()
	other := s.Watch(ctx, "/b/", nil) // consumed by nobody yet
	for round := range 5 {
		for i := range 20 {
			put(t, s, fmt.Sprintf("/a/%d", i), fmt.Sprint(round))
		}
		stopped, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Quiesce(stopped); err == nil {
			t.Fatal("Quiesce returned while a watch was not being read")
		}
		// Reading other keeps up with it: it has nothing under /b/.
		done := pump(other)
		if err := s.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := applied.Load(), s.Revision(); got != want {
			t.Fatalf("round %d: consumer at revision %d after Quiesce, store at %d", round, got, want)
		}
		other.Close()
		<-done
		other = s.Watch(ctx, "/b/", nil)
	}
	other.Close()
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
}

// WaitForWatches returns once the watches are open.
func TestWaitForWatches(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, DefaultRetention)
	opened := make(chan error, 1)
	go func() { opened <- s.WaitForWatches(ctx, 2) }()
	a := s.Watch(ctx, "/a/", nil)
	defer a.Close()
	b := s.Watch(ctx, "/b/", nil)
	defer b.Close()
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.WaitForWatches(stopped, 3); err == nil {
		t.Fatal("WaitForWatches(3) returned with 2 open")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{DedupeWindow: -1}.Validate()
	for _, want := range []string{"Now is nil", "DedupeWindow is -1ns", "Retention is 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
}
