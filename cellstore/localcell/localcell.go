// Package localcell runs a store cell of several nodes inside one process,
// on loopback, for tests, benchmarks and `troupe up`.
package localcell

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/node"
)

// Config describes a local cell.
type Config struct {
	// Dir holds one data directory per node.
	Dir      string
	Replicas int
	Shards   int
	Logger   *zap.Logger
	// Tune, if set, adjusts each node's configuration before it starts.
	Tune func(*node.Config)
}

// Cell is a running local cell.
type Cell struct {
	cfgs  []node.Config
	nodes []*node.Node // nil for a stopped node
}

// Start starts the cell and waits until every node sees a leader for
// every shard, or ctx ends.
func Start(ctx context.Context, cfg Config) (*Cell, error) {
	if cfg.Replicas <= 0 || cfg.Shards <= 0 {
		return nil, fmt.Errorf("localcell: need Replicas and Shards > 0, got %d and %d", cfg.Replicas, cfg.Shards)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	ports, err := FreePorts(cfg.Replicas)
	if err != nil {
		return nil, err
	}
	members := map[uint64]string{}
	for i, p := range ports {
		members[uint64(i+1)] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	c := &Cell{}
	for i := range cfg.Replicas {
		nc := node.DefaultConfig()
		nc.NodeID = uint64(i + 1)
		nc.DataDir = filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i+1))
		nc.RaftAddr = members[nc.NodeID]
		nc.GRPCAddr = "127.0.0.1:0"
		nc.HTTPAddr = ""
		nc.InitialMembers = members
		nc.Shards = uint32(cfg.Shards)
		nc.RTT = 10 * time.Millisecond
		nc.LogDBMemory = "tiny"
		nc.Logger = cfg.Logger.With(zap.Uint64("node", nc.NodeID))
		if cfg.Tune != nil {
			cfg.Tune(&nc)
		}
		c.cfgs = append(c.cfgs, nc)
	}
	c.nodes = make([]*node.Node, len(c.cfgs))
	// Start the nodes together: a Raft peer that finds another not yet
	// listening backs off from it for up to a second (Dragonboat's circuit
	// breaker), leaving that node without a leader meanwhile.
	errs := make([]error, len(c.cfgs))
	var wg sync.WaitGroup
	for i := range c.cfgs {
		wg.Go(func() { errs[i] = c.startNode(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// StartNode (re)starts node i (0-based) from its data directory.
func (c *Cell) StartNode(i int) error {
	if c.nodes[i] != nil {
		return fmt.Errorf("localcell: node %d is running", i+1)
	}
	return c.startNode(i)
}

// startNode starts node i; nodes may start concurrently.
func (c *Cell) startNode(i int) error {
	n, err := node.Start(c.cfgs[i])
	if err != nil {
		return fmt.Errorf("localcell: node %d: %w", i+1, err)
	}
	c.nodes[i] = n
	c.cfgs[i].GRPCAddr = n.GRPCAddr() // keep the port across restarts
	return nil
}

// StopNode stops node i; its data stays for a later StartNode.
func (c *Cell) StopNode(i int) {
	if c.nodes[i] != nil {
		c.nodes[i].Close()
		c.nodes[i] = nil
	}
}

// Node returns node i, or nil if it is stopped.
func (c *Cell) Node(i int) *node.Node { return c.nodes[i] }

// Size is the number of nodes, running or not.
func (c *Cell) Size() int { return len(c.nodes) }

// Endpoints returns the gRPC address of every running node.
func (c *Cell) Endpoints() []string {
	var out []string
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n.GRPCAddr())
		}
	}
	return out
}

// WaitReady waits until every running node sees a leader for every shard.
func (c *Cell) WaitReady(ctx context.Context) error {
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every node.
func (c *Cell) Close() error {
	for i := range c.nodes {
		c.StopNode(i)
	}
	return nil
}
