package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/localcell"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/controllers/gc"
	"github.com/troupe-cluster/troupe/controllers/job"
	nodectl "github.com/troupe-cluster/troupe/controllers/node"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// runUp runs a whole cell in one process: a one-node store, the batch,
// service and gang schedulers, the controllers, an exec agent for this
// host and optionally hollow machines.
func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "store and task data (default: a new temporary directory)")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7000", "store gRPC address")
	httpAddr := fs.String("http-addr", "127.0.0.1:7200", "health and metrics address")
	hollow := fs.Int("hollow", 0, "simulated machines to add")
	execAgent := fs.Bool("exec", true, "run an exec agent for this host")
	level := fs.String("log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	defer log.Sync()
	if *dataDir == "" {
		if *dataDir, err = os.MkdirTemp("", "troupe-up-"); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.GRPCAddr, cfg.HTTPAddr, cfg.Logger = filepath.Join(*dataDir, "store"), *grpcAddr, *httpAddr, log
	if cfg.RaftAddr, err = freePort(); err != nil {
		return err
	}
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	if err := n.WaitReady(ctx); err != nil {
		return err
	}
	newClient := func() (*clientlib.Client, error) {
		cc := clientlib.DefaultConfig(n.GRPCAddr())
		cc.Logger = log
		return clientlib.New(cc)
	}
	var runners []func(context.Context) error
	for _, kind := range []string{profiles.Batch, profiles.Service, profiles.Gang} {
		prof, modes, err := profiles.New(kind, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
		if err != nil {
			return err
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		s, err := scheduler.New(c, scheduler.Config{Name: kind + "-0", Kind: kind, Profile: prof, Modes: modes, MaxAttempts: 5,
			Backoff: time.Second, PublishInterval: 5 * time.Second, Now: time.Now, Logger: log.With(zap.String("scheduler", kind))})
		if err != nil {
			return err
		}
		runners = append(runners, s.Run)
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	jc, err := job.New(c, job.Config{Now: time.Now, Logger: log, Queue: defaultQueue()})
	if err != nil {
		return err
	}
	nc, err := nodectl.New(c, nodectl.Config{Now: time.Now, Interval: time.Second, Logger: log})
	if err != nil {
		return err
	}
	gcol, err := gc.New(c, gc.Config{Now: time.Now, Retention: time.Hour, Interval: time.Minute, Logger: log})
	if err != nil {
		return err
	}
	runners = append(runners, jc.Run, nc.Run, gcol.Run)
	agentCfg := func(machine string, capacity map[string]int64, labels map[string]string, rt runtime.Runtime) agent.Config {
		return agent.Config{Machine: machine, Capacity: capacity, Labels: labels, Runtime: rt, LeaseDuration: 10 * time.Second,
			RenewInterval: 2 * time.Second, StopGrace: 10 * time.Second, Now: time.Now, Logger: log}
	}
	host, _ := os.Hostname()
	host = strings.ToLower(strings.ReplaceAll(host, "_", "-"))
	if *execAgent {
		a, err := agent.New(c, agentCfg(host, hostCapacity(), map[string]string{"zone": "local"}, &runtime.Exec{Dir: filepath.Join(*dataDir, "tasks")}))
		if err != nil {
			return err
		}
		runners = append(runners, a.Run)
	}
	sim := &runtime.Sim{DefaultDuration: 10 * time.Second}
	for i := range *hollow {
		a, err := agent.New(c, agentCfg(fmt.Sprintf("hollow-%04d", i), map[string]int64{"cpu": 16000, "memory": 64 << 30},
			map[string]string{"zone": fmt.Sprintf("z%d", i%4), "hollow": "true"}, sim))
		if err != nil {
			return err
		}
		runners = append(runners, a.Run)
	}
	errc := make(chan error, len(runners))
	for _, r := range runners {
		go func() { errc <- r(ctx) }()
	}
	fmt.Printf(`Troupe cell up: store at %s (metrics http://%s/metrics), data in %s
  machines: %d (exec agent for this host: %v, hollow: %d)
  schedulers: batch-0, service-0, gang-0; controllers: job, node lifecycle, gc
Try:
  bin/troupe apply -f deploy/examples/batch.yaml
  bin/troupe get jobs
  bin/troupe get tasks
Stop with Ctrl-C.
`, n.GRPCAddr(), n.HTTPAddr(), *dataDir, *hollow+btoi(*execAgent), *execAgent, *hollow)
	select {
	case <-ctx.Done():
		fmt.Println("troupe up: shutting down")
		return nil
	case err := <-errc:
		return err
	}
}

// freePort returns a free loopback address for the store's Raft traffic
// (a one-node cell talks to nobody).
func freePort() (string, error) {
	ports, err := localcell.FreePorts(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), nil
}

func defaultQueue() cache.QueueConfig { return cache.DefaultQueueConfig() }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hostCapacity is this host's CPUs (millicores) and memory (bytes).
func hostCapacity() map[string]int64 {
	capacity := map[string]int64{"cpu": int64(goruntime.NumCPU()) * 1000, "memory": 1 << 30}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return capacity
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				capacity["memory"] = kb << 10
			}
		}
	}
	return capacity
}
