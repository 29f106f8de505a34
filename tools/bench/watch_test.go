package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeWatchSystem is an in-memory WatchSystem: one revision counter, and
// every put appended to the queue of every open watch. It can misbehave
// on purpose: drop or repeat a watcher's event silently, or tell a
// watcher that it fell behind.
type fakeWatchSystem struct {
	name string
	// rendezvous makes each Put return only once every watch has taken
	// the event and come back to Next for more, that is once every
	// watcher has recorded it: with one writer the clock readings of a
	// run then come in a fixed order.
	rendezvous bool
	// drop, dup and behind map a watcher id to the revision whose event
	// it loses silently, receives twice, or at which it is told that it
	// fell behind (with nothing delivered from there on).
	drop, dup, behind map[int]uint64

	mu      sync.Mutex
	cond    *sync.Cond
	rev     uint64
	watches []*fakeWatch
}

func newFakeWatchSystem(name string) *fakeWatchSystem {
	s := &fakeWatchSystem{name: name, drop: map[int]uint64{}, dup: map[int]uint64{}, behind: map[int]uint64{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *fakeWatchSystem) Name() string { return s.name }

func (s *fakeWatchSystem) NewSession(context.Context, int) (Session, error) {
	return fakeWatchSession{s}, nil
}

func (s *fakeWatchSystem) WatchStart(context.Context, string) (WatchFrom, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return binary.BigEndian.AppendUint64(nil, s.rev), nil
}

func (s *fakeWatchSystem) Watch(_ context.Context, id int, prefix string, from WatchFrom) (WatchStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prefix != watchPrefix || binary.BigEndian.Uint64(from) != s.rev {
		return nil, errors.New("fake: watch of another prefix, or not from now")
	}
	w := &fakeWatch{s: s, id: id}
	s.watches = append(s.watches, w)
	return w, nil
}

func (s *fakeWatchSystem) WatchTransport(n int) (int, int) { return 1, n }

type fakeWatchSession struct{ s *fakeWatchSystem }

func (f fakeWatchSession) Put(_ context.Context, key string, value []byte) (uint64, error) {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.HasPrefix(key, watchPrefix) {
		return 0, errors.New("fake: put outside the watch prefix")
	}
	s.rev++
	ev := WatchEvent{Revision: s.rev, Value: bytes.Clone(value)}
	for _, w := range s.watches {
		switch {
		case w.told:
		case s.behind[w.id] == s.rev:
			w.told = true
		case s.drop[w.id] == s.rev:
		case s.dup[w.id] == s.rev:
			w.queue = append(w.queue, ev, ev)
		default:
			w.queue = append(w.queue, ev)
		}
	}
	s.cond.Broadcast()
	for s.rendezvous && !s.allIdle() {
		s.cond.Wait()
	}
	return s.rev, nil
}

// allIdle says whether every watch has taken its events and is back in
// Next. s.mu is held.
func (s *fakeWatchSystem) allIdle() bool {
	for _, w := range s.watches {
		if !w.closed && (!w.idle || len(w.queue) > 0) {
			return false
		}
	}
	return true
}

func (fakeWatchSession) PutEach(context.Context, []string, []byte) error {
	return errors.New("fake: not for watch")
}
func (fakeWatchSession) CompareAndPut(context.Context, string, uint64, []byte) (Outcome, error) {
	return Outcome{}, errors.New("fake: not for watch")
}
func (fakeWatchSession) Place(context.Context, Placement) (Outcome, error) {
	return Outcome{}, errors.New("fake: not for watch")
}
func (fakeWatchSession) Close() error { return nil }

type fakeWatch struct {
	s     *fakeWatchSystem
	id    int
	queue []WatchEvent
	// idle: the watcher is in Next, waiting; told: it fell behind.
	idle, told, closed bool
}

// Next hands over everything queued, saying the watch is through the
// current revision.
func (w *fakeWatch) Next(ctx context.Context, evs []WatchEvent) ([]WatchEvent, uint64, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	w.idle = true
	s.cond.Broadcast()
	for len(w.queue) == 0 && !w.told && !w.closed {
		s.cond.Wait()
	}
	w.idle = false
	switch {
	case w.closed:
		return evs, 0, ctx.Err()
	case len(w.queue) == 0 && w.told:
		return evs, 0, ErrFellBehind
	}
	evs = append(evs, w.queue...)
	w.queue = w.queue[:0]
	return evs, s.rev, nil
}

func (w *fakeWatch) Close() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.closed = true
	w.s.cond.Broadcast()
	return nil
}

func watchParams(clients, watchers int) Params {
	p := testParams()
	p.Clients, p.Watchers = clients, watchers
	return p
}

func runFakeWatch(t *testing.T, sys System, p Params, cfg Config) (Result, error) {
	t.Helper()
	w, err := NewWorkload(WorkloadWatch, p)
	if err != nil {
		t.Fatal(err)
	}
	return Run(context.Background(), sys, w, cfg)
}

// TestWatchKnownAnswers runs watch with one writer, 10 watchers and a
// rendezvous fake, so every clock reading has its place: the start, then
// per put the stamp, the 10 watchers' deliveries and the put's end, then
// the writers' end. A commit's latency is 11 ticks, its deliveries 1 to
// 10 ticks; the clock ticks 128 µs (2^7, which the histogram holds
// exactly) for troupe and 256 µs for etcd.
func TestWatchKnownAnswers(t *testing.T) {
	const puts, watchers = 100, 10
	var out bytes.Buffer
	rep := NewReporter(&out, "troupe", "etcd")
	for i, name := range []string{"troupe", "etcd"} {
		sys := newFakeWatchSystem(name)
		sys.rendezvous = true
		clock := &stepClock{step: time.Duration(i+1) * 128 * time.Microsecond}
		res, err := runFakeWatch(t, sys, watchParams(1, watchers), Config{MaxOps: puts, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		wr := res.Watch
		tick := clock.step
		if res.Ops != puts || res.Elapsed != (12*puts+1)*tick {
			t.Errorf("%s: %d puts in %v, want %d in %v", name, res.Ops, res.Elapsed, puts, (12*puts+1)*tick)
		}
		if got := res.Latencies.Quantile(0.5); got != 11*tick || res.Latencies.Max() != 11*tick {
			t.Errorf("%s: commit p50 %v max %v, want %v", name, got, res.Latencies.Max(), 11*tick)
		}
		if wr.Delivered != puts*watchers || wr.Delays.Count() != puts*watchers || wr.Commits != puts {
			t.Errorf("%s: %d events delivered, %d delays, %d commits; want %d, %d, %d",
				name, wr.Delivered, wr.Delays.Count(), wr.Commits, puts*watchers, puts*watchers, puts)
		}
		for _, q := range []struct {
			q    float64
			want time.Duration
		}{{0.5, 5 * tick}, {0.99, 10 * tick}, {0.001, tick}, {1, 10 * tick}} {
			if got := wr.Delays.Quantile(q.q); got != q.want {
				t.Errorf("%s: delivery quantile %v is %v, want %v", name, q.q, got, q.want)
			}
		}
		// The last delivery is the last put's tenth, one tick before the
		// put's end.
		if wr.LastDelivery != (12*puts-1)*tick {
			t.Errorf("%s: last delivery at %v, want %v", name, wr.LastDelivery, (12*puts-1)*tick)
		}
		if wr.Lost != 0 || wr.Duplicates != 0 || wr.Unexpected != 0 || wr.BehindTold != 0 || wr.Stalled != 0 {
			t.Errorf("%s: lost %d, duplicates %d, unexpected %d, told %d, stalled %d: want none", name, wr.Lost, wr.Duplicates, wr.Unexpected, wr.BehindTold, wr.Stalled)
		}
		if err := rep.Add(res); err != nil {
			t.Fatal(err)
		}
	}
	// troupe: 100 puts in 1201 ticks of 128 µs, 1000 events in 1199.
	want := `{"workload":"watch","system":"troupe","commit_ops_per_sec":650.5,"commit_p50_ms":1.408,"commit_p99_ms":1.408,` +
		`"delivery_p50_ms":0.64,"delivery_p99_ms":1.28,"events_per_sec":6515.8,"watchers":10,"watch_connections":1,"watch_streams":10,"behind_told":0,"lost":0}
{"workload":"watch","system":"etcd","commit_ops_per_sec":325.2,"commit_p50_ms":2.816,"commit_p99_ms":2.816,` +
		`"delivery_p50_ms":1.28,"delivery_p99_ms":2.56,"events_per_sec":3257.9,"watchers":10,"watch_connections":1,"watch_streams":10,"behind_told":0,"lost":0}
{"workload":"watch","ratio_ops":2,"ratio_p99":0.5,"ratio_events":2}
`
	if out.String() != want {
		t.Errorf("lines:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestWatchManyWriters checks the counts with writers and watchers
// running freely: every watcher delivers every commit once.
func TestWatchManyWriters(t *testing.T) {
	const puts, writers, watchers = 200, 4, 50
	sys := newFakeWatchSystem("troupe")
	clock := &stepClock{step: time.Microsecond}
	res, err := runFakeWatch(t, sys, watchParams(writers, watchers), Config{MaxOps: puts, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	wr := res.Watch
	if res.Ops != writers*puts || wr.Commits != writers*puts || wr.Delivered != writers*puts*watchers || wr.Watchers != watchers {
		t.Errorf("%d puts, %d commits, %d events to %d watchers; want %d puts and commits, %d events to %d",
			res.Ops, wr.Commits, wr.Delivered, wr.Watchers, writers*puts, writers*puts*watchers, watchers)
	}
	if wr.Lost != 0 || wr.Duplicates != 0 || wr.Unexpected != 0 || wr.BehindTold != 0 {
		t.Errorf("lost %d, duplicates %d, unexpected %d, told %d: want none", wr.Lost, wr.Duplicates, wr.Unexpected, wr.BehindTold)
	}
	if wr.Delays.Count() != wr.Delivered || wr.Delays.Quantile(0.5) <= 0 {
		t.Errorf("%d delays, p50 %v: want one positive delay per event", wr.Delays.Count(), wr.Delays.Quantile(0.5))
	}
}

// TestWatchSilentLossFails checks that an event a watcher never gets, or
// gets twice, fails the run, and that a watcher told it fell behind is
// counted apart and fails nothing.
func TestWatchSilentLossFails(t *testing.T) {
	const puts, writers, watchers = 50, 2, 8
	for _, c := range []struct {
		name                  string
		misbehave             func(*fakeWatchSystem)
		err                   string
		lost, dups, told, got int64
	}{
		{"lost", func(s *fakeWatchSystem) { s.drop[3] = 40 }, "1 events lost silently", 1, 0, 0, writers*puts*watchers - 1},
		{"duplicated", func(s *fakeWatchSystem) { s.dup[5] = 7 }, "1 duplicated", 0, 1, 0, writers*puts*watchers + 1},
		// Watcher 2 is told at revision 31, having delivered 30 events.
		{"told", func(s *fakeWatchSystem) { s.behind[2] = 31 }, "", 0, 0, 1, writers*puts*(watchers-1) + 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := newFakeWatchSystem("troupe")
			c.misbehave(sys)
			res, err := runFakeWatch(t, sys, watchParams(writers, watchers), Config{MaxOps: puts, Now: (&stepClock{step: time.Microsecond}).Now})
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("Run: %v, want an error containing %q", err, c.err)
			}
			wr := res.Watch
			if wr == nil {
				t.Fatal("no watch result")
			}
			if wr.Lost != c.lost || wr.Duplicates != c.dups || int64(wr.BehindTold) != c.told || wr.Delivered != c.got || wr.Unexpected != 0 {
				t.Errorf("lost %d, duplicates %d, told %d, delivered %d, unexpected %d; want %d, %d, %d, %d, 0",
					wr.Lost, wr.Duplicates, wr.BehindTold, wr.Delivered, wr.Unexpected, c.lost, c.dups, c.told, c.got)
			}
		})
	}
}

// renamed is a system under another name, as benchcompare's variants are.
type renamed struct {
	System
	name string
}

func (r renamed) Name() string   { return r.name }
func (r renamed) Unwrap() System { return r.System }

// TestWatchCapability checks that watch finds a renamed system's watch
// capability through Unwrap and refuses a system without one.
func TestWatchCapability(t *testing.T) {
	cfg := Config{MaxOps: 3, Now: (&stepClock{step: time.Microsecond}).Now}
	res, err := runFakeWatch(t, renamed{newFakeWatchSystem("x"), "troupe-insecure"}, watchParams(2, 3), cfg)
	if err != nil {
		t.Fatalf("renamed system: %v", err)
	}
	if res.System != "troupe-insecure" || res.Watch.Delivered != 18 {
		t.Errorf("renamed system: %d events to %q; want 18 to troupe-insecure", res.Watch.Delivered, res.System)
	}
	if _, err := runFakeWatch(t, newMemSystem("etcd"), watchParams(2, 3), cfg); err == nil || !strings.Contains(err.Error(), "cannot watch") {
		t.Errorf("system without watch: %v, want it refused", err)
	}
	if _, err := NewWorkload(WorkloadWatch, watchParams(2, 0)); err == nil {
		t.Error("watch accepted 0 watchers")
	}
}

// TestDelayHistogram checks the buckets (contiguous, exact below 256 µs,
// no wider than 1/128 of their lower bound) and the quantiles against
// Latencies' exact ones.
func TestDelayHistogram(t *testing.T) {
	for i := 1; i < histBuckets; i++ {
		lo, prev := histLower(i), histLower(i-1)
		if lo <= prev || histIndex(lo) != i || histIndex(lo-1) != i-1 {
			t.Fatalf("bucket %d starts at %d (bucket %d at %d): not contiguous", i, lo, i-1, prev)
		}
		if width := lo - prev; prev >= 256 && width*128 > prev || prev < 256 && width != 1 {
			t.Fatalf("bucket %d [%d, %d) too wide", i-1, prev, lo)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var h DelayHistogram
	var ds []time.Duration
	for range 10000 {
		d := time.Duration(r.ExpFloat64()*5000) * time.Microsecond
		h.Add(d)
		ds = append(ds, d)
	}
	exact := MergeLatencies(ds)
	for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		got, want := h.Quantile(q), exact.Quantile(q)
		if got > want || float64(want-got) > float64(want)/128 {
			t.Errorf("Quantile(%v) = %v, exact %v: want at most 1/128 below", q, got, want)
		}
	}
	if h.Max() != slices.Max(ds) || h.Count() != int64(len(ds)) {
		t.Errorf("max %v count %d, want %v %d", h.Max(), h.Count(), slices.Max(ds), len(ds))
	}
}
