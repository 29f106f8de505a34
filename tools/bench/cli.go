package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"
)

// startTimeout bounds the start of each system (election included).
const startTimeout = 2 * time.Minute

// Options are the command line shared by `troupe bench` and the
// comparison benchmark.
type Options struct {
	Duration  time.Duration
	Workloads string
	Replicas  int
	Shards    int
	Dir       string
	Params    Params
	// CPUProfile, if set, receives a CPU profile of the run.
	CPUProfile string
}

// Register defines the options' flags on fs, with defaults (the duration's
// from $DURATION, else 10s; watch's rate from $WATCH_RATE, else none).
func (o *Options) Register(fs *flag.FlagSet) error {
	o.Params = DefaultParams()
	defDuration := 10 * time.Second
	if env := os.Getenv("DURATION"); env != "" {
		d, err := parseDuration(env)
		if err != nil {
			return fmt.Errorf("DURATION=%q: %w", env, err)
		}
		defDuration = d
	}
	// $WATCH_RATE, as $DURATION, reaches a run through make:
	// WATCH_RATE=100 make bench-compare WORKLOADS=watch.
	if env := os.Getenv("WATCH_RATE"); env != "" {
		r, err := strconv.ParseFloat(env, 64)
		if err != nil {
			return fmt.Errorf("WATCH_RATE=%q: %w", env, err)
		}
		o.Params.WatchRate = r
	}
	fs.DurationVar(&o.Duration, "duration", defDuration, "length of each timed run (default from $DURATION, else 10s)")
	fs.StringVar(&o.Workloads, "workloads", DefaultWorkloads, "comma-separated workloads to run: seq, cas, place, place4, split4, and watch (not run by default)")
	fs.IntVar(&o.Replicas, "replicas", 3, "replicas (members) of each system's cell")
	fs.IntVar(&o.Shards, "shards", 1, "Troupe shards of the cell for every workload but place4 and split4, which get a 4-shard cell (with more than 1, place's groups are mostly cross-shard)")
	fs.StringVar(&o.Dir, "dir", "", "parent of the temporary data directories (default: the system's temporary directory)")
	fs.IntVar(&o.Params.Clients, "clients", o.Params.Clients, "concurrent clients of cas, place, place4 and split4, and writers of watch")
	fs.IntVar(&o.Params.Keys, "keys", o.Params.Keys, "keys of cas (and watch)")
	fs.IntVar(&o.Params.ValueSize, "value-size", o.Params.ValueSize, "value size in bytes")
	fs.IntVar(&o.Params.Machines, "machines", o.Params.Machines, "machines of place, place4 and split4")
	fs.IntVar(&o.Params.Watchers, "watchers", o.Params.Watchers, "watchers of watch")
	fs.Float64Var(&o.Params.WatchRate, "watch-rate", o.Params.WatchRate, "commits a second of watch's writers in all, to compare systems at one rate (default from $WATCH_RATE, else 0: as fast as they go)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	return nil
}

// Check validates the parsed options.
func (o *Options) Check(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.Duration <= 0 {
		return fmt.Errorf("-duration is %v, want more than 0", o.Duration)
	}
	if o.Replicas < 1 || o.Shards < 1 {
		return fmt.Errorf("-replicas %d, -shards %d: want at least 1 each", o.Replicas, o.Shards)
	}
	return o.Params.Validate()
}

// StartProfile starts the CPU profile the options ask for; stop ends it.
func (o *Options) StartProfile() (stop func(), err error) { return StartCPUProfile(o.CPUProfile) }

// StartCPUProfile starts a CPU profile of the process into path (empty:
// none) and returns what stops it; stopping also writes the process's
// allocations so far (the "allocs" profile) to path + ".allocs", for
// `go tool pprof -sample_index=alloc_space`.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if a, err := os.Create(path + ".allocs"); err == nil {
			pprof.Lookup("allocs").WriteTo(a, 0)
			a.Close()
		}
	}, nil
}

// parseDuration accepts a Go duration ("10s") or a number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(secs * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// Starter starts a system of shards shards under dir (systems without
// shards ignore the count); close stops it.
type Starter func(ctx context.Context, dir string, shards int) (sys System, close func() error, err error)

// RunSystem runs every workload on a system, started for it by start in a
// fresh temporary directory under parent, and reports the results. It
// starts the system once per shard count the workloads need (ShardsFor:
// shards for those that need none), in the order of the workloads' first
// need, runs the workloads of that count on it in their order, and stops
// it before the next start.
func RunSystem(ctx context.Context, name string, start Starter, parent string, workloads []Workload, shards int, cfg Config, rep *Reporter) error {
	return runSystems(ctx, "troupe-bench-"+name+"-", []string{name}, map[string]Starter{name: start}, parent, workloads, shards, 1, cfg, rep)
}

// groupByShards groups workloads by the shards of the cell each runs on
// (ShardsFor), the counts in the order they first come.
func groupByShards(workloads []Workload, shards int) ([]int, map[int][]Workload) {
	byShards := map[int][]Workload{}
	var counts []int
	for _, w := range workloads {
		n := ShardsFor(w, shards)
		if byShards[n] == nil {
			counts = append(counts, n)
		}
		byShards[n] = append(byShards[n], w)
	}
	return counts, byShards
}

// RunInterleaved runs workloads on the systems names (started by start)
// at once: it starts them all, then runs each workload in rounds, the
// systems taking turns within each round, each turn cfg.Duration/rounds
// long, and reports each system's turns as one result (MergeResults).
// A machine whose speed drifts during a comparison then slows every
// system alike, where one system's run after another's does not. The
// watch workload's results do not merge: it is refused.
func RunInterleaved(ctx context.Context, names []string, start map[string]Starter, parent string, workloads []Workload, shards, rounds int, cfg Config, rep *Reporter) error {
	for _, w := range workloads {
		if w.Name() == WorkloadWatch {
			return fmt.Errorf("%s runs on its own, not in rounds", WorkloadWatch)
		}
	}
	return runSystems(ctx, "troupe-bench-interleaved-", names, start, parent, workloads, shards, rounds, cfg, rep)
}

// runSystems runs workloads on the systems names in rounds (runRounds),
// on a cell of its own for each shard count the workloads need, in a
// temporary directory under parent named by prefix.
func runSystems(ctx context.Context, prefix string, names []string, start map[string]Starter, parent string, workloads []Workload, shards, rounds int, cfg Config, rep *Reporter) (err error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()

	turn := cfg
	turn.Duration = cfg.Duration / time.Duration(rounds)
	counts, byShards := groupByShards(workloads, shards)
	for _, n := range counts {
		if err := runRounds(ctx, names, start, filepath.Join(dir, fmt.Sprintf("data-%d", n)), n, byShards[n], rounds, turn, rep); err != nil {
			return err
		}
	}
	return nil
}

// runRounds starts the systems names of shards shards under dir, runs
// each workload rounds times on each in turn, reports and stops them (one
// system and one round: RunSystem's run).
func runRounds(ctx context.Context, names []string, start map[string]Starter, dir string, shards int, workloads []Workload, rounds int, turn Config, rep *Reporter) (err error) {
	var systems []startedSystem
	defer func() {
		for i := len(systems) - 1; i >= 0; i-- {
			if cerr := systems[i].close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%s: close: %w", names[i], cerr))
			}
		}
	}()
	for _, name := range names {
		dir := filepath.Join(dir, name)
		fmt.Fprintf(os.Stderr, "%s: starting %s in %s for the %d-shard workloads\n", name, name, dir, shards)
		startCtx, cancel := context.WithTimeout(ctx, startTimeout)
		sys, closeSys, err := start[name](startCtx, dir, shards)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		systems = append(systems, startedSystem{sys, closeSys})
	}
	for _, w := range workloads {
		turns := make([][]Result, len(systems))
		for range rounds {
			for i, sys := range systems {
				res, err := Run(ctx, sys.System, w, turn)
				if err != nil {
					return err
				}
				turns[i] = append(turns[i], res)
			}
		}
		for i := range systems {
			if err := rep.Add(MergeResults(turns[i])); err != nil {
				return err
			}
		}
	}
	for i, sys := range systems {
		if r, ok := sys.System.(interface{ Retries() uint64 }); ok {
			fmt.Fprintf(os.Stderr, "%s: %d commits retried after a timeout or an unavailable replica\n", names[i], r.Retries())
		}
	}
	return nil
}

// startedSystem is a started system with what stops it.
type startedSystem struct {
	System
	close func() error
}
