// Package cell runs a whole Troupe cell in one process: a one-node store,
// one batch, service and gang scheduler, the job, node-lifecycle and
// garbage-collection controllers, an optional exec agent for this host,
// and hollow (simulated) machines. `troupe up` and the end-to-end tests
// use it; `troupe scheduler` and `troupe controller` run its Roles alone.
package cell

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/localcell"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
)

// Config describes the cell.
type Config struct {
	DataDir            string
	GRPCAddr, HTTPAddr string
	// Shards of the store (0: 1).
	Shards uint32
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
	Node *node.Node
	// Roles are the schedulers and controllers (and their Client).
	*Roles
	// Exec is the exec agent's runtime (nil without one).
	Exec *runtime.Exec

	mu     sync.Mutex
	agents map[string]context.CancelFunc
	ctx    context.Context
	cfg    Config
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
	ncfg.Shards = max(cfg.Shards, 1)
	ports, err := localcell.FreePorts(1)
	if err != nil {
		return nil, err
	}
	ncfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	n, err := node.Start(ncfg)
	if err != nil {
		return nil, err
	}
	c := &Cell{Node: n, agents: map[string]context.CancelFunc{}, ctx: ctx, cfg: cfg}
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
	if c.Roles, err = NewRoles(c.ctx, c.newClient, c.Node.Registry(), c.cfg.Logger); err != nil {
		return err
	}
	var specs []SchedulerSpec
	for _, kind := range []string{profiles.Batch, profiles.Service, profiles.Gang} {
		specs = append(specs, SchedulerSpec{Name: kind + "-0", Kind: kind})
	}
	if err := c.StartSchedulers(specs, c.cfg.SchedulerBackoff); err != nil {
		return err
	}
	if err := c.StartControllers(500 * time.Millisecond); err != nil {
		return err
	}
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

// HollowName is the machine name of hollow machine i.
func HollowName(i int) string { return fmt.Sprintf("hollow-%04d", i) }

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

// Stop stops the store node (cancel Start's context first).
func (c *Cell) Stop() {
	c.Client.Close()
	c.Node.Close()
}
