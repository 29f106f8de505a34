// Package localstore runs a cell store cluster (several nodes, each
// serving every shard) inside one process, on loopback, for tests and
// benchmarks. It is the store of a cell, not a whole cell: tools/cell
// runs a whole cell in one process (`troupe up`).
package localstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// Config describes a local store cluster.
type Config struct {
	// Dir holds one data directory per node.
	Dir      string
	Replicas int
	Shards   int
	Logger   *zap.Logger
	// Tune, if set, adjusts each node's configuration before it starts.
	Tune func(*node.Config)
	// RestoreFrom, if set, is a backup file (node.WriteBackup) restored
	// into the data directory of the cell's one node (a restored cell
	// starts with one node) before it first starts.
	RestoreFrom string
	// Insecure runs the cell without TLS or authorization. By default
	// the cell makes a CA and certificates under Dir/pki, its nodes
	// serve TLS with the built-in rules, and clients get credentials
	// from Credentials.
	Insecure bool
}

// Cluster is a running local store cluster. Its methods are for one
// goroutine.
type Cluster struct {
	cfg   Config
	cfgs  []node.Config
	nodes []*node.Node // nil for a stopped node

	ca    *pki.CA // nil when Insecure
	mu    sync.Mutex
	creds map[pki.Identity]*pki.Source
}

// Start starts the cell and waits until every node sees a leader for
// every shard, or ctx ends.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Replicas <= 0 || cfg.Shards <= 0 {
		return nil, fmt.Errorf("localstore: need Replicas and Shards > 0, got %d and %d", cfg.Replicas, cfg.Shards)
	}
	if cfg.RestoreFrom != "" && cfg.Replicas != 1 {
		return nil, fmt.Errorf("localstore: a restored cell starts with one node, not %d; add the others with StartNewNode", cfg.Replicas)
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
	c := &Cluster{cfg: cfg, creds: map[pki.Identity]*pki.Source{}}
	if !cfg.Insecure {
		if c.ca, err = pki.EnsureLocal(c.PKIDir(), pki.LocalCell{Hosts: []string{"127.0.0.1", "localhost"}}, time.Now()); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Replicas {
		nc, err := c.nodeConfig(i, members[uint64(i+1)], func(nc *node.Config) { nc.InitialMembers = members })
		if err != nil {
			return nil, err
		}
		if cfg.RestoreFrom != "" {
			if err := restore(cfg.RestoreFrom, nc); err != nil {
				return nil, err
			}
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

// nodeConfig returns the configuration of node i (0-based), whose Raft
// transport listens on raftAddr; member sets how it starts.
func (c *Cluster) nodeConfig(i int, raftAddr string, member func(*node.Config)) (node.Config, error) {
	nc := node.DefaultConfig()
	nc.NodeID = uint64(i + 1)
	nc.DataDir = filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d", i+1))
	nc.RaftAddr = raftAddr
	grpcPort, err := FreePorts(1)
	if err != nil {
		return nc, err
	}
	nc.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", grpcPort[0])
	nc.HTTPAddr = ""
	nc.Shards = uint32(c.cfg.Shards)
	nc.RTT = 10 * time.Millisecond
	nc.LogDBMemory = "tiny"
	nc.Logger = c.cfg.Logger.With(zap.Uint64("node", nc.NodeID))
	tls, err := c.Credentials(pki.Identity{Role: pki.RoleStore, Name: strconv.FormatUint(nc.NodeID, 10)})
	if err != nil {
		return nc, err
	}
	nc.TLS = tls
	member(&nc)
	if c.cfg.Tune != nil {
		c.cfg.Tune(&nc)
	}
	return nc, nil
}

// PKIDir holds the cell's CA and certificates, one pair per identity
// named as its "role/name" with '/' and '*' replaced.
func (c *Cluster) PKIDir() string { return filepath.Join(c.cfg.Dir, "pki") }

// Credentials returns credentials for id, issued by the cell's CA (the
// first call for an identity issues its certificate); nil for an
// Insecure cell.
func (c *Cluster) Credentials(id pki.Identity) (*pki.Source, error) {
	if c.ca == nil {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.creds[id]; ok {
		return s, nil
	}
	f, err := c.issue(id)
	if err != nil {
		return nil, err
	}
	s, err := pki.NewSource(f, nil)
	if err != nil {
		return nil, fmt.Errorf("localstore: %w", err)
	}
	c.creds[id] = s
	return s, nil
}

// CredentialFiles returns the files of id's credentials, for a process
// of the cell's (--ca, --cert, --key), issuing them on first use; an
// Insecure cell has none.
func (c *Cluster) CredentialFiles(id pki.Identity) (pki.Files, error) {
	if c.ca == nil {
		return pki.Files{}, errors.New("localstore: an insecure cell has no credentials")
	}
	if _, err := c.Credentials(id); err != nil {
		return pki.Files{}, err
	}
	return pki.DirFiles(c.PKIDir(), credentialName(id)), nil
}

func credentialName(id pki.Identity) string {
	return strings.NewReplacer("*", "_", "/", "-").Replace(id.String())
}

// issue issues id's certificate into the cell's directory.
func (c *Cluster) issue(id pki.Identity) (pki.Files, error) {
	name := credentialName(id)
	if err := c.ca.IssueTo(c.PKIDir(), name, pki.Leaf{Identity: id, Hosts: []string{"127.0.0.1", "localhost"}, Validity: 30 * 24 * time.Hour}, time.Now()); err != nil {
		return pki.Files{}, fmt.Errorf("localstore: %w", err)
	}
	return pki.DirFiles(c.PKIDir(), name), nil
}

// CA is the cell's certificate authority (nil for an Insecure cell), for
// tests that issue certificates of their own (expired ones, say).
func (c *Cluster) CA() *pki.CA { return c.ca }

// Admin is the credentials of the cell's administrator (nil for an
// Insecure cell).
func (c *Cluster) Admin() (*pki.Source, error) {
	return c.Credentials(pki.Identity{Role: pki.RoleAdmin, Name: "localstore"})
}

// restore restores the backup file at path into nc's data directory.
func restore(path string, nc node.Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("localstore: %w", err)
	}
	defer f.Close()
	if _, err := node.Restore(nc.DataDir, f, nc.Logger); err != nil {
		return fmt.Errorf("localstore: node %d: %w", nc.NodeID, err)
	}
	return nil
}

// StartNewNode starts one more node, with the next ID, as a joining
// member: its shards stay empty until the cell adds it (Admin.AddMember)
// and their leaders bring them up to date. It returns the node's index.
func (c *Cluster) StartNewNode() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	i := len(c.cfgs)
	nc, err := c.nodeConfig(i, fmt.Sprintf("127.0.0.1:%d", ports[0]), func(nc *node.Config) { nc.Join = true })
	if err != nil {
		return 0, err
	}
	c.cfgs = append(c.cfgs, nc)
	c.nodes = append(c.nodes, nil)
	if err := c.startNode(i); err != nil {
		c.cfgs, c.nodes = c.cfgs[:i], c.nodes[:i]
		return 0, err
	}
	return i, nil
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1, drawn below
// the kernel's ephemeral range (Linux's starts at 32768): a node keeps its
// ports across restarts, and a port of that range freed by a stopped node
// can be taken meanwhile as the local port of any outgoing connection.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		for attempt := 0; ; attempt++ {
			if attempt == maxPortAttempts {
				return nil, fmt.Errorf("localstore: no free port below %d on 127.0.0.1 in %d attempts", lastPort+1, maxPortAttempts)
			}
			port := firstPort + rand.IntN(lastPort-firstPort+1)
			if !recentPorts.take(port) {
				continue // handed out lately, perhaps not yet bound by its node
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				continue // in use
			}
			ls = append(ls, l)
			ports[i] = port
			break
		}
	}
	return ports, nil
}

// The ports FreePorts draws from, and how many it tries for one.
const (
	firstPort       = 20000
	lastPort        = 32767
	maxPortAttempts = 1000
)

// recentPorts are the last ports FreePorts handed out in this process,
// which it does not hand out again.
var recentPorts = &portRing{seen: map[int]bool{}}

type portRing struct {
	mu   sync.Mutex
	ring [4096]int
	next int
	seen map[int]bool
}

// take reports whether port was not handed out lately, and records it.
func (r *portRing) take(port int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[port] {
		return false
	}
	delete(r.seen, r.ring[r.next])
	r.ring[r.next], r.seen[port] = port, true
	r.next = (r.next + 1) % len(r.ring)
	return true
}

// StartNode (re)starts node i (0-based) from its data directory.
func (c *Cluster) StartNode(i int) error {
	if c.nodes[i] != nil {
		return fmt.Errorf("localstore: node %d is running", i+1)
	}
	return c.startNode(i)
}

// startNode starts node i; nodes may start concurrently.
func (c *Cluster) startNode(i int) error {
	n, err := node.Start(c.cfgs[i])
	if err != nil {
		return fmt.Errorf("localstore: node %d: %w", i+1, err)
	}
	c.nodes[i] = n
	c.cfgs[i].GRPCAddr = n.GRPCAddr() // keep the port across restarts
	return nil
}

// StopNode stops node i; its data stays for a later StartNode.
func (c *Cluster) StopNode(i int) {
	if c.nodes[i] != nil {
		c.nodes[i].Close()
		c.nodes[i] = nil
	}
}

// Node returns node i, or nil if it is stopped.
func (c *Cluster) Node(i int) *node.Node { return c.nodes[i] }

// Size is the number of nodes, running or not.
func (c *Cluster) Size() int { return len(c.nodes) }

// Endpoints returns the gRPC address of every running node.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n.GRPCAddr())
		}
	}
	return out
}

// WaitReady waits until every running node sees a leader for every shard.
func (c *Cluster) WaitReady(ctx context.Context) error {
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
func (c *Cluster) Close() error {
	for i := range c.nodes {
		c.StopNode(i)
	}
	return nil
}
