package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// ClusterConfig describes a store cluster of `troupe store` processes:
// the store of a cell, its nodes run as separate processes.
type ClusterConfig struct {
	// Binary is the troupe binary; each node runs its `store` command.
	Binary string
	// Dir holds node i's data in node-<i>/ and its output in node-<i>.log,
	// and the cell's CA and certificates in pki/ (certs.go).
	Dir string
	// Nodes is the number of store nodes (replicas of every shard).
	Nodes int
	// Shards is the cell's shard count.
	Shards int
	// RTT is the round trip Raft's timing is counted in (--rtt); an
	// election takes 20 of them.
	RTT time.Duration
	// SnapshotEntries is the number of Raft entries between snapshots, and
	// CompactionOverhead the entries kept before each: both small, so that
	// a node back from a fault that missed more than a few hundred
	// entries catches up from a snapshot of the leader's state, not from
	// its log (LagNode makes sure one does).
	SnapshotEntries    int
	CompactionOverhead int
	// TxnTimeout is how long a cross-shard transaction may stay prepared
	// before the leaders of its shards resolve it (--txn-timeout; 0: the
	// store's default).
	TxnTimeout time.Duration
}

// DefaultClusterConfig returns three nodes and two shards of the binary,
// with their data in dir.
func DefaultClusterConfig(binary, dir string) ClusterConfig {
	return ClusterConfig{Binary: binary, Dir: dir, Nodes: 3, Shards: 2, RTT: 10 * time.Millisecond, SnapshotEntries: 500, CompactionOverhead: 50}
}

// Validate says precisely what is wrong with c, if anything.
func (c ClusterConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("faults: ClusterConfig."+format, args...))
	}
	if c.Binary == "" {
		add("Binary is empty: need the path of a troupe binary")
	}
	if c.Dir == "" {
		add("Dir is empty")
	}
	if c.Nodes < 1 || c.Nodes > 9 {
		add("Nodes is %d, want 1 to 9", c.Nodes)
	}
	if c.Shards < 1 {
		add("Shards is %d, want at least 1", c.Shards)
	}
	if c.RTT < time.Millisecond {
		add("RTT is %v, want at least 1ms", c.RTT)
	}
	if c.SnapshotEntries < 1 {
		add("SnapshotEntries is %d, want at least 1", c.SnapshotEntries)
	}
	if c.CompactionOverhead < 0 {
		add("CompactionOverhead is %d, want at least 0", c.CompactionOverhead)
	}
	if c.TxnTimeout < 0 {
		add("TxnTimeout is %v, want a positive duration (0: the store's default)", c.TxnTimeout)
	}
	return errors.Join(errs...)
}

// Addresses inside every node's namespace: node i's Raft listener is
// raftAddr(i) in its own namespace, and in each other node's namespace
// that address is the Link to it; the gRPC listener is the same in all.
const grpcAddr = "127.0.0.1:7000"

func raftAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", 7101+i) }

// A Cluster runs store nodes as processes, each in a network namespace of
// its own, joined by Links: raft[i][j] carries node i's connections to
// node j, front[i] the harness's clients' connections to node i. Its
// methods are safe for concurrent use. Nodes are numbered from 0 here;
// node i has Raft replica ID i+1. Every node serves TLS only, with a
// certificate of the cell's own CA (certs.go).
type Cluster struct {
	cfg    ClusterConfig
	nodes  []*process
	raft   [][]*Link
	front  []*Link
	admin  *pki.Source // the harness's clients' credentials
	conns  []*grpc.ClientConn
	direct []storev1.StoreClient // node i's own answers, through front[i]

	mu       sync.Mutex
	problems []string // nodes that exited without being asked to
}

// process is one node's process, or the lack of one.
type process struct {
	id      int // Raft replica ID
	ns      *netns
	args    []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd      // nil when not running
	exited   chan struct{}  // closed when cmd has ended
	stopping syscall.Signal // what the harness sent it (0: nothing)
}

// StartCluster starts a new cell and returns once its processes are
// started; WaitReady waits for its leaders. Errors leave nothing
// behind.
func StartCluster(cfg ClusterConfig) (c *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("faults: %w", err)
	}
	c = &Cluster{cfg: cfg, raft: make([][]*Link, cfg.Nodes)}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	var members []string
	for i := range cfg.Nodes {
		members = append(members, fmt.Sprintf("%d=%s", i+1, raftAddr(i)))
	}
	for i := range cfg.Nodes {
		ns, err := newNetns()
		if err != nil {
			return c, err
		}
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i+1))
		creds := pki.DirFiles(pkiDir(cfg.Dir), certName(storeIdentity(i)))
		args := []string{
			"store", "--node-id", fmt.Sprint(i + 1), "--data-dir", dir, "--shards", fmt.Sprint(cfg.Shards),
			"--raft-addr", raftAddr(i), "--grpc-addr", grpcAddr, "--http-addr", "",
			"--initial-members", strings.Join(members, ","), "--rtt", cfg.RTT.String(),
			"--snapshot-entries", fmt.Sprint(cfg.SnapshotEntries), "--compaction-overhead", fmt.Sprint(cfg.CompactionOverhead), "--logdb-memory", "tiny",
			"--ca", creds.CA, "--cert", creds.Cert, "--key", creds.Key,
		}
		if cfg.TxnTimeout > 0 {
			args = append(args, "--txn-timeout", cfg.TxnTimeout.String())
		}
		c.nodes = append(c.nodes, &process{id: i + 1, ns: ns, logPath: dir + ".log", args: args})
	}
	for i, from := range c.nodes {
		c.raft[i] = make([]*Link, cfg.Nodes)
		for j, to := range c.nodes {
			if i == j {
				continue
			}
			ln, err := from.ns.listen(raftAddr(j))
			if err != nil {
				return c, fmt.Errorf("faults: link %d->%d: %w", i+1, j+1, err)
			}
			c.raft[i][j] = newLink(fmt.Sprintf("%d->%d", i+1, j+1), ln, func(ctx context.Context) (net.Conn, error) {
				return to.ns.dial(ctx, raftAddr(j))
			})
		}
	}
	for i, to := range c.nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return c, fmt.Errorf("faults: client link to node %d: %w", i+1, err)
		}
		c.front = append(c.front, newLink(fmt.Sprintf("client->%d", i+1), ln, func(ctx context.Context) (net.Conn, error) {
			return to.ns.dial(ctx, grpcAddr)
		}))
	}
	// Node i is dialled at its Raft and gRPC addresses in the namespaces
	// and at its front Link's in the harness's.
	var nodeHosts [][]string
	for i := range c.nodes {
		hosts, err := hostsOf(raftAddr(i), grpcAddr, c.front[i].Addr())
		if err != nil {
			return c, err
		}
		nodeHosts = append(nodeHosts, hosts)
	}
	if c.admin, err = issueCerts(pkiDir(cfg.Dir), nodeHosts); err != nil {
		return c, err
	}
	for i := range c.nodes {
		conn, err := grpc.NewClient(c.front[i].Addr(), grpc.WithTransportCredentials(pki.StoreCredentials(c.admin)))
		if err != nil {
			return c, fmt.Errorf("faults: gRPC client of node %d: %w", i+1, err)
		}
		c.conns = append(c.conns, conn)
		c.direct = append(c.direct, storev1.NewStoreClient(conn))
	}
	for i := range c.nodes {
		if err := c.Start(i); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Shards is the cell's shard count.
func (c *Cluster) Shards() int { return c.cfg.Shards }

// Endpoints are the gRPC addresses clients reach the nodes at, in node
// order.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, l := range c.front {
		out = append(out, l.Addr())
	}
	return out
}

// ClientTLS is the credentials of the harness's clients: an admin
// certificate of the cell's CA.
func (c *Cluster) ClientTLS() *pki.Source { return c.admin }

// RaftLink is the link carrying node from's connections to node to.
func (c *Cluster) RaftLink(from, to int) *Link { return c.raft[from][to] }

// LogPaths are the nodes' output files, in node order.
func (c *Cluster) LogPaths() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.logPath)
	}
	return out
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Start starts node i's process from its data directory, with the
// flags extra after its usual ones (for this run only).
func (c *Cluster) Start(i int, extra ...string) error {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("faults: start node %d: already running", n.id)
	}
	out, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("faults: start node %d: %w", n.id, err)
	}
	defer out.Close() // the process has its own copy
	fmt.Fprintf(out, "--- faults: node %d starting at %s %s\n", n.id, time.Now().Format(time.RFC3339Nano), strings.Join(extra, " "))
	cmd := exec.Command(c.cfg.Binary, append(slices.Clone(n.args), extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	// If the harness dies, so do its nodes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.ns.start(cmd); err != nil {
		return fmt.Errorf("faults: start node %d: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.stopping = cmd, exited, 0
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		switch {
		case n.stopping == 0:
			c.problem("node %d exited by itself (%v): see %s", n.id, err, n.logPath)
		case n.stopping == syscall.SIGTERM && err != nil:
			c.problem("node %d did not shut down cleanly on SIGTERM (%v): see %s", n.id, err, n.logPath)
		}
		n.cmd = nil
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

// stopTimeout bounds a graceful stop; then the node is killed.
const stopTimeout = 15 * time.Second

// Kill kills node i's process with SIGKILL and waits for it to end.
func (c *Cluster) Kill(i int) error { return c.signal(i, syscall.SIGKILL) }

// Stop stops node i's process with SIGTERM and waits for it to end; one
// that takes longer than stopTimeout is killed, and that is a problem.
func (c *Cluster) Stop(i int) error { return c.signal(i, syscall.SIGTERM) }

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	n := c.nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	if cmd == nil {
		n.mu.Unlock()
		return fmt.Errorf("faults: signal node %d: not running", n.id)
	}
	n.stopping = sig
	n.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("faults: signal node %d: %w", n.id, err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-exited:
		return nil
	case <-timer.C:
		c.problem("node %d did not stop within %v of %v: see %s", n.id, stopTimeout, sig, n.logPath)
		cmd.Process.Kill()
		<-exited
		return nil
	}
}

// problem records something the cell did that it should not have.
func (c *Cluster) problem(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// Problems are the nodes' unexpected exits so far.
func (c *Cluster) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...)
}

// Heal ends every fault: every Raft link unblocked and undelayed, every
// stopped node started.
func (c *Cluster) Heal() error {
	for i, row := range c.raft {
		for j, l := range row {
			if i != j {
				l.Unblock()
				l.SetDelay(0)
			}
		}
	}
	var errs []error
	for i := range c.nodes {
		if !c.Running(i) {
			errs = append(errs, c.Start(i))
		}
	}
	return errors.Join(errs...)
}

// statusTimeout bounds one Status call of the harness.
const statusTimeout = 500 * time.Millisecond

// statuses asks every running node for its status; nil for those that
// did not answer.
func (c *Cluster) statuses(ctx context.Context) []*storev1.StatusResponse {
	out := make([]*storev1.StatusResponse, len(c.nodes))
	var wg sync.WaitGroup
	for i := range c.nodes {
		if !c.Running(i) {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, statusTimeout)
			defer cancel()
			if st, err := c.direct[i].Status(sctx, &storev1.StatusRequest{}); err == nil {
				out[i] = st
			}
		})
	}
	wg.Wait()
	return out
}

// Leader returns the node that leads shard (0-based) in the highest term
// any running node reports.
func (c *Cluster) Leader(ctx context.Context, shard int) (int, error) {
	leader, term := -1, uint64(0)
	for i, st := range c.statuses(ctx) {
		for _, ss := range st.GetShards() {
			if int(ss.GetShard()) == shard && ss.GetIsLeader() && ss.GetTerm() >= term {
				leader, term = i, ss.GetTerm()
			}
		}
	}
	if leader < 0 {
		return 0, fmt.Errorf("faults: no running node leads shard %d", shard)
	}
	return leader, nil
}

// readyPoll is how often WaitReady asks the nodes again.
const readyPoll = 50 * time.Millisecond

// WaitReady waits until every node is running and knows a leader for
// every shard, or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		missing := c.notReady(ctx)
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("faults: cell not ready: %s: %w", missing, ctx.Err())
		case <-tick.C:
		}
	}
}

// notReady says what WaitReady is still waiting for ("": nothing).
func (c *Cluster) notReady(ctx context.Context) string {
	for i, st := range c.statuses(ctx) {
		if st == nil {
			return fmt.Sprintf("node %d does not answer", i+1)
		}
		if len(st.GetShards()) != c.cfg.Shards {
			return fmt.Sprintf("node %d reports %d of %d shards", i+1, len(st.GetShards()), c.cfg.Shards)
		}
		for _, ss := range st.GetShards() {
			if ss.GetLeaderReplicaId() == 0 {
				return fmt.Sprintf("node %d knows no leader of shard %d", i+1, ss.GetShard())
			}
		}
	}
	return ""
}

// Close kills every node, closes the links and lets the namespaces go;
// the data stays in Dir.
func (c *Cluster) Close() error {
	var errs []error
	for i := range c.nodes {
		if c.Running(i) {
			errs = append(errs, c.Kill(i))
		}
	}
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	for _, row := range c.raft {
		for _, l := range row {
			if l != nil {
				errs = append(errs, l.Close())
			}
		}
	}
	for _, l := range c.front {
		errs = append(errs, l.Close())
	}
	for _, n := range c.nodes {
		errs = append(errs, n.ns.close())
	}
	return errors.Join(errs...)
}
