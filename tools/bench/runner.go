package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Config is how long and how a run goes.
type Config struct {
	// Duration is the length of the timed part of each run. Zero: no time
	// bound (then MaxOps must be set).
	Duration time.Duration
	// MaxOps stops each client after this many ops; 0: no bound. With a
	// fake Now it makes a run deterministic (tests).
	MaxOps int
	// Now is the clock; nil: time.Now. Run reads it once at the start, once
	// before and once after every op, and once at the end.
	Now func() time.Time
	// Log receives progress and extra statistics (conflicts, errors) that
	// do not belong on the result lines; nil: discarded.
	Log io.Writer
}

// DefaultConfig returns a 10-second run on the wall clock.
func DefaultConfig() Config { return Config{Duration: 10 * time.Second} }

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	var errs []error
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("bench: Config.Duration is %v, want 0 or more", c.Duration))
	}
	if c.MaxOps < 0 {
		errs = append(errs, fmt.Errorf("bench: Config.MaxOps is %d, want 0 or more", c.MaxOps))
	}
	if c.Duration == 0 && c.MaxOps == 0 {
		errs = append(errs, errors.New("bench: Config has neither Duration nor MaxOps: the run would never end"))
	}
	return errors.Join(errs...)
}

// Result is what one run of one workload on one system measured.
type Result struct {
	Workload string
	System   string
	// Baseline is the workload whose latencies this one's are compared
	// with on the same system (a CrossShardWorkload's), or empty.
	Baseline string
	// Ops counts completed round trips; Conflicts those of them that did
	// not commit.
	Ops       int64
	Conflicts int64
	// Elapsed is the timed part's length, from the moment the clients
	// start to the end of the last op (as Config.Now tells).
	Elapsed time.Duration
	// Latencies is the distribution of the ops' latencies.
	Latencies Latencies
	// Watch is what the watch workload measured beyond its commits (its
	// writers' puts, which Ops and Latencies count); nil for the others.
	Watch *WatchResult
}

// OpsPerSec is the throughput of the run (0 when nothing was timed).
func (r Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Run runs workload w on system sys and returns what it measured. It opens
// w.Clients() sessions, prepares the workload, runs every client's op loop
// concurrently until cfg's bound, and closes the sessions. The first error
// of any client (or ctx's end) stops the run and is returned.
func Run(ctx context.Context, sys System, w Workload, cfg Config) (Result, error) {
	res := Result{Workload: w.Name(), System: sys.Name()}
	if x, ok := w.(CrossShardWorkload); ok {
		res.Baseline = x.Baseline()
	}
	if ww, ok := w.(*watchWorkload); ok {
		return runWatch(ctx, sys, ww, cfg)
	}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}

	n := w.Clients()
	sessions, err := openSessions(ctx, sys, w, n)
	defer closeSessions(sessions)
	if err != nil {
		return res, err
	}
	if err := w.Prepare(ctx, sessions); err != nil {
		return res, fmt.Errorf("%s/%s: prepare: %w", sys.Name(), w.Name(), err)
	}
	ops := make([]Op, n)
	for id, s := range sessions {
		ops[id] = w.Op(id, s)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type clientStats struct {
		lat       []time.Duration
		conflicts int64
	}
	stats := make([]clientStats, n)
	var wg sync.WaitGroup
	storage, reports := capability[StorageReporter](sys)
	var written0 StorageWrites
	if reports {
		written0 = storage.StorageWrites()
	}
	cpu0 := processCPU()
	start := now()
	deadline := start.Add(cfg.Duration)
	for id := range n {
		wg.Go(func() {
			st := &stats[id]
			for i := 0; cfg.MaxOps == 0 || i < cfg.MaxOps; i++ {
				if ctx.Err() != nil {
					return
				}
				t0 := now()
				committed, err := ops[id](ctx)
				t1 := now()
				if err != nil {
					cancel(fmt.Errorf("%s/%s: client %d: %w", sys.Name(), w.Name(), id, err))
					return
				}
				st.lat = append(st.lat, t1.Sub(t0))
				if !committed {
					st.conflicts++
				}
				if cfg.Duration > 0 && !t1.Before(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	end := now()
	cpu := processCPU() - cpu0
	if err := context.Cause(ctx); err != nil {
		return res, err
	}

	all := make([][]time.Duration, n)
	for id := range stats {
		all[id] = stats[id].lat
		res.Conflicts += stats[id].conflicts
	}
	res.Latencies = MergeLatencies(all...)
	res.Ops = int64(res.Latencies.Count())
	res.Elapsed = end.Sub(start)
	fmt.Fprintf(logw, "%s/%s: %d clients, %d ops (%d conflicts) in %v, mean %v, max %v, process CPU %v per op\n",
		res.System, res.Workload, n, res.Ops, res.Conflicts, res.Elapsed.Round(time.Millisecond),
		res.Latencies.Mean(), res.Latencies.Max(), cpuPerOp(cpu, res.Ops))
	if reports {
		fmt.Fprintf(logw, "%s/%s: state databases wrote %s\n", res.System, res.Workload, storage.StorageWrites().since(written0).perOp(res.Ops))
	}
	return res, nil
}

// openSessions opens n sessions of sys for workload w (client ids 0 to
// n-1); on an error it returns those it opened, for closeSessions.
func openSessions(ctx context.Context, sys System, w Workload, n int) ([]Session, error) {
	sessions := make([]Session, 0, n)
	for id := range n {
		s, err := sys.NewSession(ctx, id)
		if err != nil {
			return sessions, fmt.Errorf("%s/%s: open session %d: %w", sys.Name(), w.Name(), id, err)
		}
		sessions = append(sessions, s)
	}
	return sessions, nil
}

// closeSessions closes sessions.
func closeSessions(sessions []Session) {
	for _, s := range sessions {
		_ = s.Close()
	}
}

// MergeResults is one workload's results on one system taken as one run:
// their ops, conflicts and timed lengths summed and their latencies
// pooled (a system's turns in rounds). A Watch part is the first
// result's: watch runs in one round only.
func MergeResults(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0] // a run alone (RunSystem): nothing to pool
	}
	m := rs[0]
	m.Ops, m.Conflicts, m.Elapsed = 0, 0, 0
	parts := make([][]time.Duration, len(rs))
	for i, r := range rs {
		m.Ops += r.Ops
		m.Conflicts += r.Conflicts
		m.Elapsed += r.Elapsed
		parts[i] = r.Latencies.sorted
	}
	m.Latencies = MergeLatencies(parts...)
	return m
}
