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

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/bench"
)

// benchCommand is `troupe bench`: the store workloads against Troupe
// alone, a cell started in this process or an existing one (--endpoint).
// `make bench-compare` runs the same workloads against etcd too. `troupe
// bench cache` measures the client library's cache, `troupe bench
// schedule` the schedulers.
func (a *app) benchCommand() *cobra.Command {
	var (
		o                  bench.Options
		network            bench.Network
		endpoint, security string
		logStore           string
		tf                 tlsFlags
		goFlags            = flag.NewFlagSet("bench", flag.ContinueOnError)
	)
	registerErr := o.Register(goFlags)
	network.Register(goFlags)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run benchmarks (store workloads, cache, schedule)",
		Long: `Run the store workloads against Troupe: a cell started in this process, or an
existing one (--endpoint, with its credentials). bench cache measures the
client library's cache, bench schedule the schedulers.`,
		Example: "  troupe bench --duration 5s --workloads seq,cas",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if registerErr != nil {
				return registerErr
			}
			if err := o.Check(goFlags); err != nil {
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
				return bench.LocalCell{Replicas: o.Replicas, Shards: shards, Security: bench.Security(security), Network: network, LogStore: logStore, Logger: logger}.Start(ctx, dir)
			}
			if endpoint == "" {
				if err := network.Check(o.Replicas); err != nil {
					return err
				}
				node.RaiseGOMAXPROCS() // the cell runs in this process
			} else {
				if network != (bench.Network{}) || logStore != "" {
					return errors.New("--link-delay, --client-link-delay, --leader-preference and --log-store lay out a cell started in this process, not one at --endpoint")
				}
				// An existing cell serves the workloads of its own shard count.
				start = func(ctx context.Context, _ string, shards int) (bench.System, func() error, error) {
					creds, err := tf.source("bench", a.errOut)
					if err != nil {
						return nil, nil, err
					}
					t, err := bench.ConnectTroupe(ctx, strings.Split(endpoint, ","), creds)
					if err != nil {
						return nil, nil, err
					}
					if t.Shards() != shards {
						return nil, nil, errors.Join(fmt.Errorf("the cell at --endpoint has %d shards, the workloads want %d (set --shards to the cell's; place4 needs 4)",
							t.Shards(), shards), t.Close())
					}
					return t, t.Close, nil
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			rep := bench.NewReporter(a.out, "troupe", "")
			return bench.RunSystem(ctx, "troupe", start, o.Dir, workloads, o.Shards, bench.Config{Duration: o.Duration, Log: a.errOut}, rep)
		},
	}
	fs := cmd.Flags()
	fs.AddGoFlagSet(goFlags)
	fs.StringVar(&endpoint, "endpoint", "", "comma-separated gRPC addresses of an existing cell (default: start one in this process)")
	addAlias(fs, "endpoint", "endpoints")
	fs.StringVar(&logStore, "log-store", "", "the started cell's Raft log store: tan or pebble (default: troupe store's, tan)")
	fs.StringVar(&security, "security", string(bench.Secure), fmt.Sprintf("the started cell's security, one of %v: TLS and authorization, TLS alone, neither", bench.Securities))
	tf.register(fs)
	cmd.AddCommand(a.cacheBenchCommand(), a.scheduleBenchCommand())
	return cmd
}

// cacheBenchCommand is `troupe bench cache`: the memory and event rate
// of a machine and a task cache, printed as one JSON object.
func (a *app) cacheBenchCommand() *cobra.Command {
	var machines, tasks int
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Measure the client library's cache: memory and event rate",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if machines <= 0 || tasks <= 0 {
				return fmt.Errorf("--machines and --tasks must be positive")
			}
			res, err := bench.RunCacheBench(cmd.Context(), machines, tasks)
			if err != nil {
				return err
			}
			return json.NewEncoder(a.out).Encode(map[string]any{
				"bench": "cache", "machines": res.Machines, "tasks": res.Tasks,
				"heap_mb": float64(res.HeapBytes) / (1 << 20), "bytes_per_object": int(res.BytesPerObject),
				"sync_seconds": res.SyncSeconds, "events_per_sec": int(res.EventsPerSec),
			})
		},
	}
	cmd.Flags().IntVar(&machines, "machines", 10000, "machines in the cell")
	cmd.Flags().IntVar(&tasks, "tasks", 100000, "tasks in the cell")
	return cmd
}

// scheduleBenchCommand is `troupe bench schedule`: the scheduling
// benchmark for each combination of scheduler count and conflict mode,
// each on a fresh in-process store, one JSON object per run.
func (a *app) scheduleBenchCommand() *cobra.Command {
	var (
		machines, tasks, perJob, shards, gogcFlag int
		schedulers, conflicts, dirFlag, cpuprof   string
		seedFlag                                  uint64
		hollowAgents                              bool
	)
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Run the scheduling benchmark on in-process stores",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.scheduleBench(cmd.Context(), machines, tasks, perJob, shards, gogcFlag, schedulers, conflicts, dirFlag, cpuprof, seedFlag, hollowAgents)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&machines, "machines", 10000, "hollow machines in the cell")
	fs.IntVar(&tasks, "tasks", 100000, "tasks to place")
	fs.IntVar(&perJob, "tasks-per-job", 100, "tasks per job (one commit per job)")
	fs.StringVar(&schedulers, "schedulers", "1,2,4", "comma-separated batch scheduler counts to run")
	fs.StringVar(&conflicts, "conflict", "fine,coarse", "comma-separated conflict modes to run: fine, coarse")
	fs.Uint64Var(&seedFlag, "seed", 1, "seed of the tasks' requests and the schedulers' choices")
	fs.IntVar(&shards, "shards", 1, "store shards (more than 1: placements commit across shards)")
	fs.BoolVar(&hollowAgents, "hollow-agents", false, "run a hollow agent (simulated runtime) for each machine instead of only registering it")
	fs.StringVar(&dirFlag, "dir", "", "parent of the temporary data directories")
	fs.StringVar(&cpuprof, "cpuprofile", "", "write a CPU profile of the runs to this file")
	fs.IntVar(&gogcFlag, "gogc", 400, "garbage collection target percentage for the run (Go's GOGC; the cell and its schedulers share this process)")
	return cmd
}

func (a *app) scheduleBench(ctx context.Context, machines, tasks, perJob, shards, gogc int, schedulers, conflicts, dir, cpuprofile string,
	seed uint64, agents bool) error {
	debug.SetGCPercent(gogc)
	node.RaiseGOMAXPROCS()
	var counts []int
	for _, f := range strings.Split(schedulers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--schedulers: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	var modes []framework.ConflictMode
	for _, f := range strings.Split(conflicts, ",") {
		switch strings.TrimSpace(f) {
		case "fine":
			modes = append(modes, framework.Fine)
		case "coarse":
			modes = append(modes, framework.Coarse)
		default:
			return fmt.Errorf("--conflict: unknown mode %q (fine, coarse)", f)
		}
	}
	stopProfile, err := bench.StartCPUProfile(cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	out := json.NewEncoder(a.out)
	for _, n := range counts {
		for _, mode := range modes {
			runDir, err := os.MkdirTemp(dir, "troupe-bench-schedule-")
			if err != nil {
				return err
			}
			res, err := bench.RunSchedule(ctx, bench.ScheduleConfig{Machines: machines, Tasks: tasks, TasksPerJob: perJob,
				Schedulers: n, Conflict: mode, Shards: shards, HollowAgents: agents, Dir: runDir, Seed: seed})
			os.RemoveAll(runDir)
			if err != nil {
				return fmt.Errorf("%d schedulers, %v: %w", n, mode, err)
			}
			res.GOGC = gogc
			if err := out.Encode(res); err != nil {
				return err
			}
		}
	}
	return nil
}
