package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// WorkloadWatch is the watch fan-out workload: Params.Watchers watchers
// of one prefix while Params.Clients clients commit puts under it.
const WorkloadWatch = "watch"

// watchPrefix is the prefix the watch workload writes and watches. Its
// first two segments fix its Troupe shard, so that every put of the run
// is on one shard and the puts' revisions order them.
const watchPrefix = "/bench/watch/"

// stampBytes is the size of the send timestamp at the start of every
// value the watch workload writes.
const stampBytes = 8

// ErrFellBehind is matched (errors.Is) by the error of a WatchStream whose
// system told the watcher that it fell behind: its position was compacted
// away, or the system cancelled the watch. The watch is over; the events
// it did not deliver are not counted as lost.
var ErrFellBehind = errors.New("bench: the system told the watcher it fell behind")

// WatchSystem is a System that can also watch. The watch workload needs
// it; Run looks for it on the system and, failing that, on what the
// system's Unwrap() System method returns (a system renamed for its
// result lines).
type WatchSystem interface {
	System
	// WatchStart returns a position from which a watch of prefix sees
	// every change committed after WatchStart returned.
	WatchStart(ctx context.Context, prefix string) (WatchFrom, error)
	// Watch opens the watch of watcher id (0..n-1, spread over the
	// system's endpoints by id, as sessions are) of the keys under prefix,
	// after from, and returns once the system has acknowledged it. The
	// watch ends when ctx ends or the stream is closed.
	Watch(ctx context.Context, id int, prefix string, from WatchFrom) (WatchStream, error)
	// WatchTransport says how n watchers reach the system: the client
	// connections and the streams on them.
	WatchTransport(n int) (connections, streams int)
}

// WatchFrom is a system's opaque watch position.
type WatchFrom []byte

// WatchStream is one watcher's stream of changes; one goroutine uses it
// at a time, but Close may be called by any.
type WatchStream interface {
	// Next blocks until the next response and appends its events, in
	// commit order, to evs. through is the revision up to which the
	// watch has delivered every change under its prefix (0: the response
	// does not say). An error matching ErrFellBehind means the system
	// told the watcher it fell behind; ctx's end ends Next with ctx's
	// error; any other error aborts the run.
	Next(ctx context.Context, evs []WatchEvent) (_ []WatchEvent, through uint64, err error)
	Close() error
}

// WatchEvent is a put a watch delivered: the revision that wrote it and
// the value written (which may belong to the system's response: it is
// read before the next Next).
type WatchEvent struct {
	Revision uint64
	Value    []byte
}

// WatchResult is what the watch workload measured beyond its commits
// (which a Result's Ops and Latencies give).
type WatchResult struct {
	Watchers int
	// Connections and Streams are the client connections and streams
	// the watchers used (WatchSystem.WatchTransport).
	Connections, Streams int
	// Commits is the number of committed puts every watcher had to
	// deliver.
	Commits int
	// Delivered counts the events delivered, over all watchers; Delays
	// are their commit-to-delivery latencies: from the writer's reading of
	// the clock just before it sent the commit to the watcher's reading
	// just after the event arrived (the commit's own latency included).
	Delivered int64
	Delays    DelayHistogram
	// LastDelivery is when the last event arrived, from the start of the
	// timed part: events are delivered at Delivered/LastDelivery a second.
	LastDelivery time.Duration
	// BehindTold counts the watchers the system told that they fell
	// behind (ErrFellBehind); their undelivered events are not lost.
	BehindTold int
	// Lost counts the committed events the other watchers did not
	// deliver: skipped, or still undelivered when the drain ended (a
	// minute, or three durations, after the writers stopped) by the
	// Stalled watchers, which had fallen that far behind without being
	// told; Duplicates the events
	// delivered again or out of revision order; Unexpected those that no
	// writer committed (a put applied twice, say). A run with Lost or
	// Duplicates fails.
	Lost, Duplicates, Unexpected int64
	Stalled                      int
}

// EventsPerSec is the delivery rate over all watchers.
func (r *WatchResult) EventsPerSec() float64 {
	if r.LastDelivery <= 0 {
		return 0
	}
	return float64(r.Delivered) / r.LastDelivery.Seconds()
}

// watchWorkload: Params.Watchers watchers of watchPrefix while
// Params.Clients clients put random keys under it, each value starting
// with its send timestamp. It runs with runWatch, not Run's op loop.
type watchWorkload struct {
	p     Params
	value []byte
}

func (w *watchWorkload) Name() string                             { return WorkloadWatch }
func (w *watchWorkload) Clients() int                             { return w.p.Clients }
func (w *watchWorkload) Prepare(context.Context, []Session) error { return nil }

// Op is a writer's op, a put stamped with the time since the zero time
// (Run hands the workload to runWatch, which stamps from its start).
func (w *watchWorkload) Op(id int, s Session) Op {
	put := w.writer(id, s, func() time.Duration { return time.Duration(time.Now().UnixNano()) })
	return func(ctx context.Context) (bool, error) {
		_, err := put(ctx)
		return err == nil, err
	}
}

// writer returns client id's put: a random key among Params.Keys under
// watchPrefix, the value stamped with stamp() just before sending. It
// returns the revision of the put.
func (w *watchWorkload) writer(id int, s Session, stamp func() time.Duration) func(ctx context.Context) (uint64, error) {
	r := clientRand(w.p.Seed, id)
	return func(ctx context.Context) (uint64, error) {
		key := fmt.Sprintf("%sk%05d", watchPrefix, r.IntN(w.p.Keys))
		v := slices.Clone(w.value)
		binary.BigEndian.PutUint64(v, uint64(stamp()))
		return s.Put(ctx, key, v)
	}
}

// watchSystem returns sys's watch capability, looking through Unwrap.
func watchSystem(sys System) (WatchSystem, bool) { return capability[WatchSystem](sys) }

// capability returns sys as a T, or what sys's Unwrap() System method
// returns (a system renamed for its result lines), and so on.
func capability[T any](sys System) (T, bool) {
	for sys != nil {
		if c, ok := sys.(T); ok {
			return c, true
		}
		u, ok := sys.(interface{ Unwrap() System })
		if !ok {
			break
		}
		sys = u.Unwrap()
	}
	var none T
	return none, false
}

// watchDrain bounds the wait, once the writers have stopped, for every
// watcher to deliver the last commit: the larger of this and three times
// the run's duration. Generous, so that a system whose watchers lag by
// seconds gets their late deliveries measured rather than counted lost.
const watchDrain = time.Minute

// runWatch runs the watch workload: it opens the writers' sessions and
// the watchers' watches (all from one position read before the timed
// part, each acknowledged by the system), runs the writers as Run runs
// clients (paced at Params.WatchRate commits a second in all, if set),
// waits for every watcher to deliver the last commit (or be told it fell
// behind, or the drain bound: watchDrain), and checks every watcher's events against the
// committed revisions. Every clock reading goes through cfg.Now: the
// start, before and after every put (the stamp is the reading before),
// once per response a watcher receives, and the writers' end.
func runWatch(ctx context.Context, sys System, w *watchWorkload, cfg Config) (Result, error) {
	res := Result{Workload: w.Name(), System: sys.Name()}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	ws, ok := watchSystem(sys)
	if !ok {
		return res, fmt.Errorf("%s/%s: the system cannot watch", sys.Name(), w.Name())
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s/%s: "+format, append([]any{sys.Name(), w.Name()}, args...)...)
	}

	n := w.Clients()
	sessions, err := openSessions(ctx, sys, w, n)
	defer closeSessions(sessions)
	if err != nil {
		return res, err
	}
	from, err := ws.WatchStart(ctx, watchPrefix)
	if err != nil {
		return res, fail("watch start: %w", err)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	watchers := make([]*watcher, w.p.Watchers)
	defer func() {
		for _, wa := range watchers {
			if wa != nil {
				_ = wa.stream.Close()
			}
		}
	}()
	if err := AtOnce(make([]string, len(watchers)), func(i int, _ string) error {
		st, err := ws.Watch(watchCtx, i, watchPrefix, from)
		if err != nil {
			return fmt.Errorf("open watch %d: %w", i, err)
		}
		watchers[i] = newWatcher(st)
		return nil
	}); err != nil {
		return res, fail("%w", err)
	}
	conns, streams := ws.WatchTransport(len(watchers))

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		stopping  atomic.Bool // the drain is over: watch errors are the run's end
		watchWG   sync.WaitGroup
		writersWG sync.WaitGroup
	)
	start := now()
	since := func() time.Duration { return now().Sub(start) }
	for i, wa := range watchers {
		watchWG.Go(func() {
			defer close(wa.done)
			var buf []WatchEvent
			for {
				evs, through, err := wa.stream.Next(watchCtx, buf[:0])
				if err != nil {
					switch {
					case stopping.Load() || watchCtx.Err() != nil:
					case errors.Is(err, ErrFellBehind):
						wa.told = err
					default:
						cancel(fail("watcher %d: %w", i, err))
					}
					return
				}
				wa.record(evs, through, since())
				buf = evs
			}
		})
	}

	type writerStats struct {
		lat  []time.Duration
		revs []uint64
	}
	stats := make([]writerStats, n)
	deadline := start.Add(cfg.Duration)
	var interval time.Duration // between one writer's commits, when paced
	if w.p.WatchRate > 0 {
		interval = time.Duration(float64(n) / w.p.WatchRate * float64(time.Second))
	}
	for id := range n {
		writersWG.Go(func() {
			st := &stats[id]
			var t0 time.Time
			put := w.writer(id, sessions[id], func() time.Duration { return t0.Sub(start) })
			for i := 0; cfg.MaxOps == 0 || i < cfg.MaxOps; i++ {
				if interval > 0 {
					// Writer id's i-th commit is due at (i + id/n) intervals.
					due := start.Add(time.Duration(i)*interval + interval*time.Duration(id)/time.Duration(n))
					if err := sleepUntil(runCtx, now, due); err != nil {
						return
					}
				}
				if runCtx.Err() != nil {
					return
				}
				t0 = now()
				rev, err := put(runCtx)
				t1 := now()
				if err != nil {
					cancel(fail("client %d: %w", id, err))
					return
				}
				st.lat = append(st.lat, t1.Sub(t0))
				st.revs = append(st.revs, rev)
				if cfg.Duration > 0 && !t1.Before(deadline) {
					return
				}
			}
		})
	}
	writersWG.Wait()
	end := now()

	var lat [][]time.Duration
	var committed []uint64
	for _, st := range stats {
		lat = append(lat, st.lat)
		committed = append(committed, st.revs...)
	}
	slices.Sort(committed)
	committed = slices.Compact(committed)
	var last uint64
	if len(committed) > 0 {
		last = committed[len(committed)-1]
	}

	// The drain: every watcher delivers through the last commit, is told
	// it fell behind, or runs out of time.
	drain := time.NewTimer(max(watchDrain, 3*cfg.Duration))
	defer drain.Stop()
	timedOut := false
	for _, wa := range watchers {
		for !timedOut && runCtx.Err() == nil && wa.through.Load() < last {
			select {
			case <-wa.progress:
			case <-wa.done:
			case <-runCtx.Done():
			case <-drain.C:
				timedOut = true
			}
			if isClosed(wa.done) {
				break
			}
		}
	}
	stopping.Store(true)
	stopWatching()
	for _, wa := range watchers {
		_ = wa.stream.Close()
	}
	watchWG.Wait()
	if err := context.Cause(runCtx); err != nil {
		return res, err
	}

	res.Latencies = MergeLatencies(lat...)
	res.Ops = int64(res.Latencies.Count())
	res.Elapsed = end.Sub(start)
	wr := &WatchResult{Watchers: len(watchers), Connections: conns, Streams: streams, Commits: len(committed)}
	for _, wa := range watchers {
		missing := wa.missing(committed)
		wr.Delivered += wa.delivered
		wr.Delays.Merge(&wa.delays)
		wr.LastDelivery = max(wr.LastDelivery, wa.lastAt)
		wr.Duplicates += wa.duplicates
		wr.Unexpected += wa.delivered - wa.duplicates - int64(len(committed)-missing)
		if wa.told != nil {
			wr.BehindTold++
			continue
		}
		wr.Lost += int64(missing)
		if wa.through.Load() < last {
			wr.Stalled++
		}
	}
	res.Watch = wr
	fmt.Fprintf(logw, "%s/%s: %d writers, %d commits in %v (commit mean %v, max %v); %d watchers on %d streams over %d connections: "+
		"%d events delivered, the last %v after the writers stopped, delivery p50 %v p99 %v max %v; "+
		"%d told they fell behind, %d events lost (%d watchers stalled), %d duplicated, %d unexpected\n",
		res.System, res.Workload, n, res.Ops, res.Elapsed.Round(time.Millisecond), res.Latencies.Mean(), res.Latencies.Max(),
		wr.Watchers, wr.Streams, wr.Connections, wr.Delivered, max(0, wr.LastDelivery-res.Elapsed).Round(time.Millisecond),
		wr.Delays.Quantile(0.5), wr.Delays.Quantile(0.99), wr.Delays.Max(),
		wr.BehindTold, wr.Lost, wr.Stalled, wr.Duplicates, wr.Unexpected)
	if wr.Lost > 0 || wr.Duplicates > 0 {
		return res, fail("%d events lost silently (%d watchers stalled), %d duplicated", wr.Lost, wr.Stalled, wr.Duplicates)
	}
	return res, nil
}

// sleepUntil waits until the clock now reads t or later (on the wall
// clock: pacing is for real runs), or ctx ends.
func sleepUntil(ctx context.Context, now func() time.Time, t time.Time) error {
	d := t.Sub(now())
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watcher is one watch of the run and what it delivered. Its goroutine
// alone writes the fields but through, which the drain reads; the others
// are read once the goroutine has ended.
type watcher struct {
	stream   WatchStream
	through  atomic.Uint64
	progress chan struct{} // signalled after each response
	done     chan struct{} // closed when the goroutine ends

	delivered  int64
	duplicates int64
	last       uint64 // the last revision delivered
	// seen marks the revisions delivered, bit r-base for revision r.
	base   uint64
	seen   []uint64
	delays DelayHistogram
	lastAt time.Duration
	told   error
}

func newWatcher(st WatchStream) *watcher {
	return &watcher{stream: st, progress: make(chan struct{}, 1), done: make(chan struct{})}
}

// record takes the events of a response that arrived at (since the
// start); their values start with their send stamps, since the start.
func (wa *watcher) record(evs []WatchEvent, through uint64, at time.Duration) {
	for _, ev := range evs {
		wa.delivered++
		if ev.Revision <= wa.last {
			wa.duplicates++
			continue
		}
		wa.last = ev.Revision
		if wa.base == 0 {
			wa.base = ev.Revision
		}
		i := ev.Revision - wa.base
		for uint64(len(wa.seen)) <= i/64 {
			wa.seen = append(wa.seen, 0)
		}
		wa.seen[i/64] |= 1 << (i % 64)
		if len(ev.Value) >= stampBytes {
			sent := time.Duration(binary.BigEndian.Uint64(ev.Value))
			wa.delays.Add(at - sent)
		}
	}
	if len(evs) > 0 {
		wa.lastAt = at
	}
	wa.through.Store(max(wa.through.Load(), through, wa.last))
	select {
	case wa.progress <- struct{}{}:
	default:
	}
}

// missing counts the revisions of committed (sorted) the watcher did not
// deliver.
func (wa *watcher) missing(committed []uint64) int {
	n := 0
	for _, r := range committed {
		if r < wa.base || wa.base == 0 {
			n++
			continue
		}
		i := r - wa.base
		if i/64 >= uint64(len(wa.seen)) || wa.seen[i/64]&(1<<(i%64)) == 0 {
			n++
		}
	}
	return n
}

// DelayHistogram counts latencies in microseconds, exactly below 256 µs
// and in 128 buckets per power of two above (each bucket's width at most
// 1/128 of its lower bound), up to about 71 minutes. Quantiles are the
// lower bounds of their buckets. A histogram, not Latencies' sorted list,
// because the watch workload delivers tens of millions of events.
type DelayHistogram struct {
	counts [histBuckets]uint32
	n      int64
	max    time.Duration
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// histBuckets covers microsecond values below 2^32.
	histBuckets = (32-histSubBits)*histSub + histSub
)

// histIndex is the bucket of v microseconds.
func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	k := bits.Len64(v) - 1 // v in [2^k, 2^(k+1)), k > histSubBits
	return (k-histSubBits)*histSub + int(v>>(k-histSubBits))
}

// histLower is the smallest value of bucket i, in microseconds.
func histLower(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	k := i/histSub + histSubBits - 1
	m := uint64(i - (k-histSubBits)*histSub)
	return m << (k - histSubBits)
}

// Add counts d (negative: 0).
func (h *DelayHistogram) Add(d time.Duration) {
	d = max(d, 0)
	h.n++
	h.max = max(h.max, d)
	h.counts[min(histIndex(uint64(d/time.Microsecond)), histBuckets-1)]++
}

// Merge adds o's counts to h's.
func (h *DelayHistogram) Merge(o *DelayHistogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of latencies counted.
func (h *DelayHistogram) Count() int64 { return h.n }

// Max is the largest latency counted, exactly.
func (h *DelayHistogram) Max() time.Duration { return h.max }

// Quantile is the nearest-rank q-quantile (0 < q <= 1), as Latencies',
// to its bucket's lower bound; 0 when empty.
func (h *DelayHistogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := min(max(int64(math.Ceil(q*float64(h.n))), 1), h.n)
	var seen int64
	for i, c := range h.counts {
		seen += int64(c)
		if seen >= rank {
			return time.Duration(histLower(i)) * time.Microsecond
		}
	}
	return h.max
}
