// Package cell runs a whole Troupe cell in one process: a one-node store,
// one batch, service and gang scheduler, the job, node-lifecycle and
// garbage-collection controllers, an optional exec agent for this host,
// and hollow (simulated) machines. `troupe up` and the end-to-end tests
// use it; `troupe scheduler` and `troupe controller` run its Roles alone.
package cell

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
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
	// TaskUser is the host user the agents' tasks run as when their
	// template names none (empty: runtime.DefaultTaskUser()). The exec
	// agent keeps its tasks in DataDir/tasks, so that user must be able
	// to pass through DataDir.
	TaskUser string
	// Hollow simulated machines with HollowCapacity, labelled zone=z0..z3
	// and, as every hollow machine, agent.HollowLabel=true and tainted
	// agent.HollowTaint(): only jobs that tolerate it land there, the
	// others on the exec machine (zone=local, no taint).
	Hollow         int
	HollowCapacity map[string]int64
	// LeaseDuration of the agents (how fast a dead machine is noticed).
	LeaseDuration time.Duration
	// SchedulerBackoff is how long unschedulable tasks wait.
	SchedulerBackoff time.Duration
	// Insecure runs the cell without TLS or authorization. By default it
	// keeps a CA and a certificate per role in DataDir/pki (made on
	// first start, renewed when near expiry) and each role presents its
	// own: the store, the schedulers, the controllers, each agent.
	Insecure bool
	// Version of the binary, which the store node publishes.
	Version string
	Logger  *zap.Logger
}

// Cell is a running cell.
type Cell struct {
	Node *node.Node
	// Roles are the schedulers and controllers.
	*Roles
	// Client is the cell's administrator's client (tests, tools).
	Client *clientlib.Client
	// Exec is the exec agent's runtime (nil without one).
	Exec *runtime.Exec

	mu     sync.Mutex
	agents map[string]context.CancelFunc
	ctx    context.Context
	cfg    Config
	// pkiDir holds the cell's certificates ("" when Insecure); clients
	// are the agents' clients by certificate name.
	pkiDir  string
	clients map[string]*clientlib.Client
	// events are the agents' event recorders, by their client.
	events map[*clientlib.Client]*clientlib.EventRecorder
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
	ncfg.Shards, ncfg.Version = max(cfg.Shards, 1), cfg.Version
	var err error
	if ncfg.RaftAddr, err = raftAddr(cfg.DataDir); err != nil {
		return nil, err
	}
	c := &Cell{agents: map[string]context.CancelFunc{}, ctx: ctx, cfg: cfg, clients: map[string]*clientlib.Client{}}
	if !cfg.Insecure {
		if err := c.ensurePKI(ncfg.GRPCAddr); err != nil {
			return nil, err
		}
		if ncfg.TLS, err = c.credentials(pki.LocalStore); err != nil {
			return nil, err
		}
	}
	if c.Node, err = node.Start(ncfg); err != nil {
		return nil, err
	}
	if err := c.start(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// raftAddr is the store's Raft address, which its data directory is
// bound to (Dragonboat refuses a directory started under another
// address): a free loopback port at the first start, recorded in
// dir/raft-address (beside the store's directory) and used again at
// every later start.
func raftAddr(dir string) (string, error) {
	path := filepath.Join(dir, "raft-address")
	switch b, err := os.ReadFile(path); {
	case err == nil:
		return strings.TrimSpace(string(b)), nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("reading the store's Raft address: %w", err)
	}
	ports, err := localstore.FreePorts(1)
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(addr+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("recording the store's Raft address: %w", err)
	}
	return addr, nil
}

// ensurePKI makes or renews the cell's certificates: the store's for the
// host of grpcAddr and loopback, and one per role and agent.
func (c *Cell) ensurePKI(grpcAddr string) error {
	c.pkiDir = filepath.Join(c.cfg.DataDir, "pki")
	hosts := []string{"127.0.0.1", "localhost"}
	if h, _, err := net.SplitHostPort(grpcAddr); err == nil && h != "" && !slices.Contains(hosts, h) {
		hosts = append(hosts, h)
	}
	lc := pki.LocalCell{Hosts: hosts, HollowPrefix: hollowPrefix}
	if c.cfg.ExecMachine != "" {
		lc.Machines = []string{c.cfg.ExecMachine}
	}
	_, err := pki.EnsureLocal(c.pkiDir, lc, time.Now())
	return err
}

// PKIDir is the directory of the cell's CA and certificates ("" for an
// Insecure cell).
func (c *Cell) PKIDir() string { return c.pkiDir }

// credentials loads certificate name of the cell's directory (nil for an
// Insecure cell).
func (c *Cell) credentials(name string) (*pki.Source, error) {
	if c.pkiDir == "" {
		return nil, nil
	}
	return pki.NewSource(pki.DirFiles(c.pkiDir, name), nil)
}

// newClient returns a client presenting certificate name.
func (c *Cell) newClient(name string) (*clientlib.Client, error) {
	cc := clientlib.DefaultConfig(c.Node.GRPCAddr())
	cc.Logger = c.cfg.Logger
	var err error
	if cc.TLS, err = c.credentials(name); err != nil {
		return nil, err
	}
	return clientlib.New(cc)
}

// roleClient returns a client with the identity of a scheduler or
// controller role.
func (c *Cell) roleClient(role string) (*clientlib.Client, error) {
	names := map[string]string{pki.RoleScheduler: pki.LocalScheduler, pki.RoleController: pki.LocalController}
	name, ok := names[role]
	if !ok {
		return nil, fmt.Errorf("cell: no certificate for role %q", role)
	}
	return c.newClient(name)
}

// agentClient returns the shared client of machine's agent: every hollow
// machine's agent presents one certificate (agent/hollow-*), any other
// its own.
func (c *Cell) agentClient(machine string) (*clientlib.Client, error) {
	name := pki.LocalAgent(machine)
	if strings.HasPrefix(machine, hollowPrefix) {
		name = pki.LocalHollow
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[name]; ok {
		return cl, nil
	}
	cl, err := c.newClient(name)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", machine, err)
	}
	c.clients[name] = cl
	return cl, nil
}

func (c *Cell) start() error {
	if err := c.Node.WaitReady(c.ctx); err != nil {
		return err
	}
	var err error
	if c.Client, err = c.newClient(pki.LocalAdmin); err != nil {
		return err
	}
	if c.Roles, err = NewRoles(c.ctx, c.roleClient, c.Node.Registry(), c.cfg.Logger); err != nil {
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
		labels := map[string]string{"zone": fmt.Sprintf("z%d", i%4), agent.HollowLabel: agent.HollowValue}
		if err := c.startAgent(HollowName(i), c.cfg.HollowCapacity, labels, []*troupev1.Taint{agent.HollowTaint()}, sim, ""); err != nil {
			return err
		}
	}
	return nil
}

// hollowPrefix starts every hollow machine's name.
const hollowPrefix = "hollow-"

// HollowName is the machine name of hollow machine i.
func HollowName(i int) string { return fmt.Sprintf("%s%04d", hollowPrefix, i) }

// StartAgent starts an agent for machine, without taints, serving its
// tasks' logs on logAddr when set.
func (c *Cell) StartAgent(machine string, capacity map[string]int64, labels map[string]string, rt runtime.Runtime, logAddr string) error {
	return c.startAgent(machine, capacity, labels, nil, rt, logAddr)
}

// startAgent starts an agent for machine with labels and taints.
func (c *Cell) startAgent(machine string, capacity map[string]int64, labels map[string]string, taints []*troupev1.Taint, rt runtime.Runtime, logAddr string) error {
	cl, err := c.agentClient(machine)
	if err != nil {
		return err
	}
	var creds *pki.Source
	if logAddr != "" && !strings.HasPrefix(machine, hollowPrefix) {
		if creds, err = c.credentials(pki.LocalAgent(machine)); err != nil {
			return err
		}
	}
	events, err := c.agentEvents(cl, machine)
	if err != nil {
		return err
	}
	a, err := agent.New(cl, agent.Config{Machine: machine, Capacity: capacity, Labels: labels, Taints: taints, Runtime: rt, LogAddr: logAddr, TLS: creds,
		TaskUser: c.cfg.TaskUser, Events: events, LeaseDuration: c.cfg.LeaseDuration, RenewInterval: c.cfg.LeaseDuration / 5,
		StopGrace: 10 * time.Second, Now: time.Now, Logger: c.cfg.Logger})
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

// agentEvents returns the event recorder of the agents sharing client cl
// (every hollow machine's agent shares one), made for the first of them,
// machine.
func (c *Cell) agentEvents(cl *clientlib.Client, machine string) (*clientlib.EventRecorder, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec, ok := c.events[cl]; ok {
		return rec, nil
	}
	source := "agent/" + machine
	if strings.HasPrefix(machine, hollowPrefix) {
		source = "agent/" + hollowPrefix + "*"
	}
	rec, err := c.recorder(cl, source)
	if err != nil {
		return nil, err
	}
	if c.events == nil {
		c.events = map[*clientlib.Client]*clientlib.EventRecorder{}
	}
	c.events[cl] = rec
	return rec, nil
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

// Stop closes the clients and stops the store node (cancel Start's
// context first).
func (c *Cell) Stop() {
	if c.Roles != nil {
		c.Roles.Close()
	}
	if c.Client != nil {
		c.Client.Close()
	}
	c.mu.Lock()
	for _, cl := range c.clients {
		cl.Close()
	}
	c.mu.Unlock()
	c.Node.Close()
}
