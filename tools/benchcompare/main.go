package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/tools/bench"
)

// options are the command line.
type options struct {
	bench.Options
	systems string
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(2)
	}
	// Both systems' members run in this process, as store nodes do in
	// troupe up and troupe store: with twice as many Ps as the default.
	node.RaiseGOMAXPROCS()
	stopProfile, err := opts.StartProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, opts)
	stop()
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("benchcompare", flag.ContinueOnError)
	if err := o.Register(fs); err != nil {
		return o, err
	}
	fs.StringVar(&o.systems, "systems", "troupe,etcd", "comma-separated systems to run, in order: troupe, etcd")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Check(fs)
}

func run(ctx context.Context, o options) error {
	workloads, err := bench.ParseWorkloads(o.Workloads, o.Params)
	if err != nil {
		return err
	}
	logger := zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.Lock(os.Stderr), zapcore.ErrorLevel))
	starters := map[string]bench.Starter{
		"troupe": func(ctx context.Context, dir string, shards int) (bench.System, func() error, error) {
			return bench.StartLocalTroupe(ctx, dir, o.Replicas, shards, logger)
		},
		"etcd": func(ctx context.Context, dir string, _ int) (bench.System, func() error, error) {
			return startEtcd(ctx, dir, o.Replicas)
		},
	}
	var order []string
	for _, name := range strings.Split(o.systems, ",") {
		name = strings.TrimSpace(name)
		if _, ok := starters[name]; !ok {
			return fmt.Errorf("unknown system %q (known: troupe, etcd)", name)
		}
		order = append(order, name)
	}

	rep := bench.NewReporter(os.Stdout, "troupe", "etcd")
	cfg := bench.Config{Duration: o.Duration, Log: os.Stderr}
	for _, name := range order {
		if err := bench.RunSystem(ctx, name, starters[name], o.Dir, workloads, o.Shards, cfg, rep); err != nil {
			return err
		}
	}
	return nil
}

// startEtcd starts an embedded etcd cluster of n members under dir and
// connects to it.
func startEtcd(ctx context.Context, dir string, n int) (bench.System, func() error, error) {
	cluster, err := startEtcdCluster(ctx, dir, n)
	if err != nil {
		return nil, nil, err
	}
	sys, err := dialEtcd(cluster.endpoints)
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	return sys, func() error {
		err := sys.Close()
		cluster.Close()
		return err
	}, nil
}
