package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
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
	rounds  int
	repeat  int
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
	fs.StringVar(&o.systems, "systems", "troupe,etcd", "comma-separated systems to run, in order: "+
		"troupe (TLS, client certificates and authorization), troupe-noauthz (TLS, every request allowed), troupe-insecure (plaintext), "+
		"etcd (TLS, client certificates), etcd-insecure (plaintext)")
	fs.IntVar(&o.rounds, "rounds", 1, "with more than 1, start every system at once and run each workload in this many rounds, "+
		"the systems taking turns of -duration/rounds within each round; each system's turns are reported as one run "+
		"(a machine whose speed drifts then weighs on every system alike; not with watch)")
	fs.IntVar(&o.repeat, "repeat", 1, "run the comparison this many times, each in a process of its own, the systems in -systems order, then in reverse, "+
		"and so on, and end with a line per workload giving the least, median and greatest of its ratios over the runs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	order, err := parseSystems(o.systems)
	if err != nil {
		return o, err
	}
	if o.rounds < 1 {
		return o, fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	}
	if o.repeat < 1 {
		return o, fmt.Errorf("-repeat %d: want at least 1", o.repeat)
	}
	if o.repeat > 1 && o.CPUProfile != "" {
		return o, fmt.Errorf("-repeat %d with -cpuprofile: profile one run at a time", o.repeat)
	}
	if o.rounds > 1 && len(slices.Compact(slices.Sorted(slices.Values(order)))) != len(order) {
		return o, fmt.Errorf("-rounds %d: -systems %q names a system twice; in rounds every system runs once at a time", o.rounds, o.systems)
	}
	return o, o.Check(fs)
}

// The systems benchcompare runs: Troupe and etcd secured as each is by
// default (TLS 1.3 with client certificates; Troupe authorizes every key
// of every request, etcd has its RBAC off, as it is unless enabled), and
// the variants that show what TLS and authorization cost.
const (
	sysTroupe         = "troupe"          // bench.Secure
	sysTroupeNoAuthz  = "troupe-noauthz"  // bench.Unauthorized
	sysTroupeInsecure = "troupe-insecure" // bench.Insecure
	sysEtcd           = "etcd"            // peer and client TLS, client certificates
	sysEtcdInsecure   = "etcd-insecure"   // plaintext
)

// knownSystems lists them.
var knownSystems = []string{sysTroupe, sysTroupeNoAuthz, sysTroupeInsecure, sysEtcd, sysEtcdInsecure}

// parseSystems parses -systems: known names. A name may come more than
// once, for A/B runs that alternate systems (troupe,troupe-noauthz,troupe,
// troupe-noauthz): each system runs afresh every time, and the ratio and
// cost lines compare the latest results.
func parseSystems(s string) ([]string, error) {
	var order []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(knownSystems, name) {
			return nil, fmt.Errorf("-systems: unknown system %q (known: %s)", name, strings.Join(knownSystems, ", "))
		}
		order = append(order, name)
	}
	return order, nil
}

// starters are the known systems' starters; each system is reported
// under its name.
func starters(o options, logger *zap.Logger) map[string]bench.Starter {
	troupe := func(name string, sec bench.Security) bench.Starter {
		return func(ctx context.Context, dir string, shards int) (bench.System, func() error, error) {
			sys, closeSys, err := bench.StartLocalTroupe(ctx, dir, o.Replicas, shards, sec, logger)
			if err != nil {
				return nil, nil, err
			}
			return named(name, sys), closeSys, nil
		}
	}
	etcd := func(name string, secure bool) bench.Starter {
		return func(ctx context.Context, dir string, _ int) (bench.System, func() error, error) {
			sys, closeSys, err := startEtcd(ctx, dir, o.Replicas, secure)
			if err != nil {
				return nil, nil, err
			}
			return named(name, sys), closeSys, nil
		}
	}
	return map[string]bench.Starter{
		sysTroupe:         troupe(sysTroupe, bench.Secure),
		sysTroupeNoAuthz:  troupe(sysTroupeNoAuthz, bench.Unauthorized),
		sysTroupeInsecure: troupe(sysTroupeInsecure, bench.Insecure),
		sysEtcd:           etcd(sysEtcd, true),
		sysEtcdInsecure:   etcd(sysEtcdInsecure, false),
	}
}

func run(ctx context.Context, o options) error {
	workloads, err := bench.ParseWorkloads(o.Workloads, o.Params)
	if err != nil {
		return err
	}
	order, err := parseSystems(o.systems)
	if err != nil {
		return err
	}
	if o.repeat > 1 {
		return repeat(ctx, os.Args[1:], order, o.repeat)
	}
	logger := zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.Lock(os.Stderr), zapcore.ErrorLevel))
	start := starters(o, logger)
	// The reporter's ratio line compares the secure pair; the cost lines
	// (costWriter) the variants.
	rep := bench.NewReporter(newCostWriter(os.Stdout, costPairs), sysTroupe, sysEtcd)
	if err := compare(ctx, o, order, start, workloads, bench.Config{Duration: o.Duration, Log: os.Stderr}, rep); err != nil {
		return err
	}
	// Systems named more than once compare more than once.
	return bench.WriteSpread(os.Stdout, rep.Comparisons())
}

// repeat runs the comparison of args (this command's arguments) n times,
// each run in a process of its own (this program again, with -repeat=1
// and the run's order of the systems), passes on what each prints, and
// ends with the spread of the runs' ratios. A process of its own, because
// one that has run cells runs the next ones differently: in one process,
// Troupe's cas took 76-86 µs of CPU per op in its first three runs and
// 93-111 in its last three (docs/measurements.md, seventh session).
func repeat(ctx context.Context, args, order []string, n int) error {
	var compared []bench.Comparison
	for i := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], childArgs(args, runOrder(order, i))...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if _, werr := os.Stdout.Write(out); werr != nil {
			return werr
		}
		if err != nil {
			return fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		cs, err := bench.ParseComparisons(out)
		if err != nil {
			return fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		compared = append(compared, cs...)
	}
	return bench.WriteSpread(os.Stdout, compared)
}

// childArgs are the arguments of one run of -repeat: args with the run's
// systems and one repetition (the flag package takes a flag's last value).
func childArgs(args, names []string) []string {
	return append(slices.Clone(args), "-repeat=1", "-systems="+strings.Join(names, ","))
}

// runOrder is the order of the systems in run i (from 0) of -repeat:
// order, then its reverse, and so on, so that a machine whose speed
// drifts favours no system.
func runOrder(order []string, i int) []string {
	if i%2 == 0 {
		return order
	}
	names := slices.Clone(order)
	slices.Reverse(names)
	return names
}

// compare runs workloads on the systems names once, one after another or
// in rounds.
func compare(ctx context.Context, o options, names []string, start map[string]bench.Starter, workloads []bench.Workload, cfg bench.Config, rep *bench.Reporter) error {
	if o.rounds > 1 {
		return bench.RunInterleaved(ctx, names, start, o.Dir, workloads, o.Shards, o.rounds, cfg, rep)
	}
	for _, name := range names {
		if err := bench.RunSystem(ctx, name, start[name], o.Dir, workloads, o.Shards, cfg, rep); err != nil {
			return err
		}
	}
	return nil
}

// startEtcd starts an embedded etcd cluster of n members under dir,
// secure (TLS with client certificates) or plaintext, and connects to it.
func startEtcd(ctx context.Context, dir string, n int, secure bool) (bench.System, func() error, error) {
	cluster, err := startEtcdCluster(ctx, dir, n, secure)
	if err != nil {
		return nil, nil, err
	}
	sys, err := dialEtcd(cluster.endpoints, cluster.clientTLS)
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

// named is sys reported under name: bench.Run labels results with
// System.Name, which is the same for every variant of a system.
func named(name string, sys bench.System) bench.System {
	n := namedSystem{System: sys, name: name}
	if r, ok := sys.(retrier); ok {
		return namedRetrier{namedSystem: n, r: r}
	}
	return n
}

// retrier is a system that counts its retried commits (bench.Troupe),
// which bench.RunSystem reports.
type retrier interface{ Retries() uint64 }

type namedSystem struct {
	bench.System
	name string
}

func (s namedSystem) Name() string { return s.name }

// Unwrap is the system renamed, where bench finds capabilities beyond
// bench.System (watching).
func (s namedSystem) Unwrap() bench.System { return s.System }

type namedRetrier struct {
	namedSystem
	r retrier
}

func (s namedRetrier) Retries() uint64 { return s.r.Retries() }
