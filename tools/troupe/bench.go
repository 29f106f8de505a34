package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"strings"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// runBench runs the store workloads against Troupe alone: a cell started
// in this process, or an existing one (-endpoints). `make bench-compare`
// runs the same workloads against etcd too.
func runBench(args []string) error {
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
