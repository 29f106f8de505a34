// Package cell runs a whole Troupe cell in one process: a one-node store,
// one batch, service and gang scheduler, the job, node-lifecycle and
// garbage-collection controllers, an optional exec agent for this host,
// and hollow (simulated) machines. `troupe up` and the end-to-end tests
// use it.
package cell

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
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

// Config describes the cell.
type Config struct {
	DataDir            string
	GRPCAddr, HTTPAddr string
	// ExecMachine, if set, runs an exec agent under that machine name with
	// ExecCapacity.
	ExecMachine  string
	ExecCapacity map[string]int64
	// Hollow simulated machines with HollowCapacity, labelled zone=z0..z3.
	Hollow         int
	HollowCapacity map[string]int64
	// LeaseDuration of the agents (how fast a dead machine is noticed).
	LeaseDuration time.Duration
	// SchedulerBackoff is how long unschedulable tasks wait.
	SchedulerBackoff time.Duration
	Logger           *zap.Logger
}

// Cell is a running cell.
type Cell struct {
	Node   *node.Node
	Client *clientlib.Client
	// Schedulers by name.
	Schedulers map[string]*scheduler.Scheduler
	// Exec is the exec agent's runtime (nil without one).
	Exec *runtime.Exec

	mu     sync.Mutex
	agents map[string]context.CancelFunc
	ctx    context.Context
	cfg    Config
	errc   chan error
}

// Start starts the cell; everything stops when ctx ends (then Close the
// node with Stop).
func Start(ctx context.Context, cfg Config) (*Cell, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 10 * time.Second
	}
	if cfg.SchedulerBackoff <= 0 {
		cfg.SchedulerBackoff = time.Second
	}
	ncfg := node.DefaultConfig()
	ncfg.DataDir, ncfg.GRPCAddr, ncfg.HTTPAddr, ncfg.Logger = filepath.Join(cfg.DataDir, "store"), cfg.GRPCAddr, cfg.HTTPAddr, cfg.Logger
	ports, err := localcell.FreePorts(1)
	if err != nil {
		return nil, err
	}
	ncfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	n, err := node.Start(ncfg)
	if err != nil {
		return nil, err
	}
	c := &Cell{Node: n, Schedulers: map[string]*scheduler.Scheduler{}, agents: map[string]context.CancelFunc{}, ctx: ctx, cfg: cfg, errc: make(chan error, 64)}
	if err := c.start(); err != nil {
		n.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cell) newClient() (*clientlib.Client, error) {
	cc := clientlib.DefaultConfig(c.Node.GRPCAddr())
	cc.Logger = c.cfg.Logger
	return clientlib.New(cc)
}

func (c *Cell) start() error {
	if err := c.Node.WaitReady(c.ctx); err != nil {
		return err
	}
	var err error
	if c.Client, err = c.newClient(); err != nil {
		return err
	}
	log := c.cfg.Logger
	// The three schedulers share this process's cell cache.
	cellCache := scheduler.NewCellCache(c.Client, log)
	for _, kind := range []string{profiles.Batch, profiles.Service, profiles.Gang} {
		prof, modes, err := profiles.New(kind, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
		if err != nil {
			return err
		}
		cl, err := c.newClient()
		if err != nil {
			return err
		}
		events, err := c.recorder(kind + "-0")
		if err != nil {
			return err
		}
		s, err := scheduler.New(cl, scheduler.Config{Name: kind + "-0", Kind: kind, Profile: prof, Modes: modes, MaxAttempts: 5,
			Backoff: c.cfg.SchedulerBackoff, PublishInterval: 5 * time.Second, Cache: cellCache, Events: events, Now: time.Now,
			Logger: log.With(zap.String("scheduler", kind))})
		if err != nil {
			return err
		}
		c.Schedulers[kind+"-0"] = s
		c.run(s.Run)
	}
	c.run(cellCache.Run)
	jobEvents, err := c.recorder("job-controller")
	if err != nil {
		return err
	}
	nodeEvents, err := c.recorder("node-controller")
	if err != nil {
		return err
	}
	jc, err := job.New(c.Client, job.Config{Now: time.Now, Logger: log, Queue: cache.DefaultQueueConfig(), Events: jobEvents})
	if err != nil {
		return err
	}
	nc, err := nodectl.New(c.Client, nodectl.Config{Now: time.Now, Interval: 500 * time.Millisecond, Logger: log, Events: nodeEvents})
	if err != nil {
		return err
	}
	gcol, err := gc.New(c.Client, gc.Config{Now: time.Now, Retention: time.Hour, Interval: time.Minute, Logger: log})
	if err != nil {
		return err
	}
	c.run(jc.Run)
	c.run(nc.Run)
	c.run(gcol.Run)
	if c.cfg.ExecMachine != "" {
		c.Exec = runtime.NewExec(filepath.Join(c.cfg.DataDir, "tasks"), c.cfg.Logger)
		if err := c.StartAgent(c.cfg.ExecMachine, c.cfg.ExecCapacity, map[string]string{"zone": "local"}, c.Exec, "127.0.0.1:0"); err != nil {
			return err
		}
	}
	sim := &runtime.Sim{DefaultDuration: 10 * time.Second}
	for i := range c.cfg.Hollow {
		if err := c.StartAgent(HollowName(i), c.cfg.HollowCapacity, map[string]string{"zone": fmt.Sprintf("z%d", i%4), "hollow": "true"}, sim, ""); err != nil {
			return err
		}
	}
	return nil
}

// recorder returns an event recorder for source, running until the cell
// stops.
func (c *Cell) recorder(source string) (*clientlib.EventRecorder, error) {
	cfg := clientlib.DefaultEventRecorderConfig(source)
	cfg.Logger = c.cfg.Logger
	r, err := clientlib.NewEventRecorder(c.Client, cfg)
	if err != nil {
		return nil, err
	}
	c.run(r.Run)
	return r, nil
}

// HollowName is the machine name of hollow machine i.
func HollowName(i int) string { return fmt.Sprintf("hollow-%04d", i) }

func (c *Cell) run(f func(context.Context) error) {
	go func() {
		if err := f(c.ctx); err != nil && c.ctx.Err() == nil {
			c.errc <- err
		}
	}()
}

// StartAgent starts an agent for machine, serving its tasks' logs on
// logAddr when set.
func (c *Cell) StartAgent(machine string, capacity map[string]int64, labels map[string]string, rt runtime.Runtime, logAddr string) error {
	a, err := agent.New(c.Client, agent.Config{Machine: machine, Capacity: capacity, Labels: labels, Runtime: rt, LogAddr: logAddr,
		LeaseDuration: c.cfg.LeaseDuration, RenewInterval: c.cfg.LeaseDuration / 5, StopGrace: 10 * time.Second,
		Now: time.Now, Logger: c.cfg.Logger})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.agents[machine] = cancel
	c.mu.Unlock()
	go func() {
		if err := a.Run(ctx); err != nil && ctx.Err() == nil {
			c.errc <- fmt.Errorf("agent %s: %w", machine, err)
		}
	}()
	return nil
}

// StopAgent stops machine's agent, as if the machine died: its lease is no
// longer renewed.
func (c *Cell) StopAgent(machine string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cancel, ok := c.agents[machine]; ok {
		cancel()
		delete(c.agents, machine)
	}
}

// Errors reports components that stopped with an error.
func (c *Cell) Errors() <-chan error { return c.errc }

// Stop stops the store node (cancel Start's context first).
func (c *Cell) Stop() {
	c.Client.Close()
	c.Node.Close()
}
