package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// runBench runs the store workloads against Troupe alone: a cell started
// in this process, or an existing one (-endpoints). `make bench-compare`
// runs the same workloads against etcd too. `troupe bench cache` measures
// the client library's cache instead.
func runBench(args []string) error {
	if len(args) > 0 && args[0] == "cache" {
		return runCacheBench(args[1:])
	}
	var o bench.Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	if err := o.Register(fs); err != nil {
		return err
	}
	endpoints := fs.String("endpoints", "", "comma-separated gRPC addresses of an existing cell (default: start one in this process)")
	if err := fs.Parse(args); err != nil {
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
	start := func(ctx context.Context, dir string) (bench.System, func() error, error) {
		return bench.StartLocalTroupe(ctx, dir, o.Replicas, o.Shards, logger)
	}
	if *endpoints != "" {
		start = func(ctx context.Context, _ string) (bench.System, func() error, error) {
			t, err := bench.ConnectTroupe(ctx, strings.Split(*endpoints, ","))
			if err != nil {
				return nil, nil, err
			}
			return t, t.Close, nil
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := bench.NewReporter(os.Stdout, "troupe", "")
	return bench.RunSystem(ctx, "troupe", start, o.Dir, workloads, bench.Config{Duration: o.Duration, Log: os.Stderr}, rep)
}

// runCacheBench measures the memory and event rate of a machine and a
// task cache, and prints them as one JSON object.
func runCacheBench(args []string) error {
	fs := flag.NewFlagSet("bench cache", flag.ContinueOnError)
	machines := fs.Int("machines", 10000, "machines in the cell")
	tasks := fs.Int("tasks", 100000, "tasks in the cell")
	if err := fs.Parse(args); err != nil {
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
