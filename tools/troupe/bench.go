package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/bench"
)

// runBench runs the store workloads against Troupe alone: a cell started
// in this process, or an existing one (-endpoints). `make bench-compare`
// runs the same workloads against etcd too. `troupe bench cache` measures
// the client library's cache, `troupe bench schedule` the schedulers.
func runBench(args []string) error {
	if len(args) > 0 && args[0] == "cache" {
		return runCacheBench(args[1:])
	}
	if len(args) > 0 && args[0] == "schedule" {
		return runScheduleBench(args[1:])
	}
	var o bench.Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	if err := o.Register(fs); err != nil {
		return err
	}
	endpoints := fs.String("endpoints", "", "comma-separated gRPC addresses of an existing cell (default: start one in this process)")
	security := fs.String("security", string(bench.Secure), fmt.Sprintf("the started cell's security, one of %v: TLS and authorization, TLS alone, neither", bench.Securities))
	tf := registerTLSFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.Check(fs); err != nil {
		return err
	}
	workloads, err := bench.ParseWorkloads(o.Workloads, o.Params)
	if err != nil {
		return err
	}
	stopProfile, err := o.StartProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	logger, err := newLogger("error")
	if err != nil {
		return err
	}
	start := func(ctx context.Context, dir string, shards int) (bench.System, func() error, error) {
		return bench.StartLocalTroupe(ctx, dir, o.Replicas, shards, bench.Security(*security), logger)
	}
	if *endpoints == "" {
		node.RaiseGOMAXPROCS() // the cell runs in this process
	} else {
		// An existing cell serves the workloads of its own shard count.
		start = func(ctx context.Context, _ string, shards int) (bench.System, func() error, error) {
			creds, err := tf.source("bench")
			if err != nil {
				return nil, nil, err
			}
			t, err := bench.ConnectTroupe(ctx, strings.Split(*endpoints, ","), creds)
			if err != nil {
				return nil, nil, err
			}
			if t.Shards() != shards {
				return nil, nil, errors.Join(fmt.Errorf("the cell at -endpoints has %d shards, the workloads want %d (set -shards to the cell's; place4 needs 4)",
					t.Shards(), shards), t.Close())
			}
			return t, t.Close, nil
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := bench.NewReporter(os.Stdout, "troupe", "")
	return bench.RunSystem(ctx, "troupe", start, o.Dir, workloads, o.Shards, bench.Config{Duration: o.Duration, Log: os.Stderr}, rep)
}

// runCacheBench measures the memory and event rate of a machine and a
// task cache, and prints them as one JSON object.
func runCacheBench(args []string) error {
	fs := flag.NewFlagSet("bench cache", flag.ContinueOnError)
	machines := fs.Int("machines", 10000, "machines in the cell")
	tasks := fs.Int("tasks", 100000, "tasks in the cell")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *machines <= 0 || *tasks <= 0 {
		return fmt.Errorf("-machines and -tasks must be positive")
	}
	res, err := bench.RunCacheBench(context.Background(), *machines, *tasks)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bench": "cache", "machines": res.Machines, "tasks": res.Tasks,
		"heap_mb": float64(res.HeapBytes) / (1 << 20), "bytes_per_object": int(res.BytesPerObject),
		"sync_seconds": res.SyncSeconds, "events_per_sec": int(res.EventsPerSec),
	})
}

// runScheduleBench runs the scheduling benchmark for each combination of
// scheduler count and conflict mode, each on a fresh in-process store,
// and prints one JSON object per run.
func runScheduleBench(args []string) error {
	fs := flag.NewFlagSet("bench schedule", flag.ContinueOnError)
	machines := fs.Int("machines", 10000, "hollow machines in the cell")
	tasks := fs.Int("tasks", 100000, "tasks to place")
	perJob := fs.Int("tasks-per-job", 100, "tasks per job (one commit per job)")
	schedulers := fs.String("schedulers", "1,2,4", "comma-separated batch scheduler counts to run")
	conflicts := fs.String("conflict", "fine,coarse", "comma-separated conflict modes to run: fine, coarse")
	seed := fs.Uint64("seed", 1, "seed of the tasks' requests and the schedulers' choices")
	shards := fs.Int("shards", 1, "store shards (more than 1: placements commit across shards)")
	agents := fs.Bool("hollow-agents", false, "run a hollow agent (simulated runtime) for each machine instead of only registering it")
	dir := fs.String("dir", "", "parent of the temporary data directories")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the runs to this file")
	gogc := fs.Int("gogc", 400, "garbage collection target percentage for the run (Go's GOGC; the cell and its schedulers share this process)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	debug.SetGCPercent(*gogc)
	node.RaiseGOMAXPROCS()
	var counts []int
	for _, f := range strings.Split(*schedulers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("-schedulers: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	var modes []framework.ConflictMode
	for _, f := range strings.Split(*conflicts, ",") {
		switch strings.TrimSpace(f) {
		case "fine":
			modes = append(modes, framework.Fine)
		case "coarse":
			modes = append(modes, framework.Coarse)
		default:
			return fmt.Errorf("-conflict: unknown mode %q (fine, coarse)", f)
		}
	}
	stopProfile, err := bench.StartCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out := json.NewEncoder(os.Stdout)
	for _, n := range counts {
		for _, mode := range modes {
			runDir, err := os.MkdirTemp(*dir, "troupe-bench-schedule-")
			if err != nil {
				return err
			}
			res, err := bench.RunSchedule(ctx, bench.ScheduleConfig{Machines: *machines, Tasks: *tasks, TasksPerJob: *perJob,
				Schedulers: n, Conflict: mode, Shards: *shards, HollowAgents: *agents, Dir: runDir, Seed: *seed})
			os.RemoveAll(runDir)
			if err != nil {
				return fmt.Errorf("%d schedulers, %v: %w", n, mode, err)
			}
			res.GOGC = *gogc
			if err := out.Encode(res); err != nil {
				return err
			}
		}
	}
	return nil
}
