package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/tools/linkproxy"
)

// Network is the network a local cell stands in for. The cell's nodes
// share one machine and talk over loopback, so on their own they pay
// CPU, not round trips; with delays on their links (the kernel here has
// no netem qdisc: the delay is added in user space, by linkproxy's delay
// lines) a benchmark pays the network round trips a cell of one machine
// per node would.
//
// With RaftDelay set, every node's Raft listener moves to a port of its
// own and a linkproxy.Link takes its advertised Raft address, forwarding
// to it: every connection a node opens to another (Dragonboat opens one
// per target for its messages) crosses that link, delayed by RaftDelay in
// each direction. One link per destination serves every sender, each
// connection with its own delay line, so each one-way path between two
// nodes is delayed once. (The fault harness needs a link per ordered
// pair, to block one direction of one pair, and so a network namespace
// per node, since every node must be given the same member addresses;
// for one delay everywhere a link per destination does the same.) With
// ClientDelay set, the benchmark's client reaches every node through a
// link of its own too.
type Network struct {
	RaftDelay   time.Duration // on every Raft link between store nodes, each way
	ClientDelay time.Duration // on every client→store gRPC link, each way
	// LeaderPreference, if set, is the node (1-based) the cell's nodes
	// keep every shard's leadership on (node.Config.LeaderPreference);
	// the run starts once every node sees it lead every shard. A
	// cross-shard commit sent there is driven by the leader of every
	// participant.
	LeaderPreference uint64
}

// Register defines the network's flags on fs.
func (n *Network) Register(fs *flag.FlagSet) {
	fs.DurationVar(&n.RaftDelay, "link-delay", 0, "one-way delay on every Raft link between the started cell's store nodes (a user-space delay line per connection; needs -replicas 2 or more)")
	fs.DurationVar(&n.ClientDelay, "client-link-delay", 0, "one-way delay on every link from the benchmark's clients to the started cell's store nodes")
	fs.Uint64Var(&n.LeaderPreference, "leader-preference", 0, "start the cell with this node (1 to -replicas) preferred as every shard's leader (troupe store --leader-preference), and run once it leads them all")
}

// Check says what is wrong with n for a cell of replicas nodes.
func (n Network) Check(replicas int) error {
	if n.RaftDelay < 0 || n.ClientDelay < 0 {
		return fmt.Errorf("link delays %v (Raft) and %v (client): want 0 or more", n.RaftDelay, n.ClientDelay)
	}
	if n.RaftDelay > 0 && replicas < 2 {
		return fmt.Errorf("-link-delay %v with %d replica: a cell of one node has no Raft links to delay", n.RaftDelay, replicas)
	}
	if n.LeaderPreference > uint64(replicas) {
		return fmt.Errorf("-leader-preference %d: the cell's nodes are 1 to %d", n.LeaderPreference, replicas)
	}
	return nil
}

// String describes n for the benchmark's log.
func (n Network) String() string {
	s := fmt.Sprintf("Raft links %v, client links %v (one way)", n.RaftDelay, n.ClientDelay)
	if n.LeaderPreference > 0 {
		s += fmt.Sprintf(", leaders preferred on node %d", n.LeaderPreference)
	}
	return s
}

// preferTune returns a node configuration hook that prefers node id as
// every shard's leader.
func preferTune(id uint64) func(*node.Config) {
	return func(nc *node.Config) { nc.LeaderPreference.Node = id }
}

// waitLedBy waits until every running node of cell sees node id (1-based)
// lead every one of its shards, or ctx ends.
func waitLedBy(ctx context.Context, cell *localstore.Cluster, shards int, id uint64) error {
	for {
		led := true
		for i := range cell.Size() {
			if n := cell.Node(i); n != nil {
				for sh := range uint32(shards) {
					l, ok := n.Leader(sh)
					led = led && ok && l == id
				}
			}
		}
		if led {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: wait for node %d to lead every shard: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// delayedLinks are the links of a local cell.
type delayedLinks struct {
	mu    sync.Mutex
	links []*linkproxy.Link
	err   error // of a link the tuning could not make
}

// raftTune returns a node configuration hook that puts a link delayed by
// delay at the node's Raft address, forwarding to a new listen address
// of the node's own. Errors are kept for err.
func (dl *delayedLinks) raftTune(delay time.Duration) func(*node.Config) {
	return func(nc *node.Config) {
		dl.mu.Lock()
		defer dl.mu.Unlock()
		// FreePorts hands out no port twice in a process, so not the
		// members' (which the cell picked and freed, but the links have
		// not all taken yet).
		ports, err := localstore.FreePorts(1)
		if err == nil {
			listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
			var l *linkproxy.Link
			if l, err = linkproxy.Forward(fmt.Sprintf("->%d", nc.NodeID), nc.RaftAddr, listen, delay); err == nil {
				dl.links = append(dl.links, l)
				nc.RaftListenAddr = listen
				return
			}
		}
		dl.err = errors.Join(dl.err, fmt.Errorf("bench: delayed Raft link to node %d: %w", nc.NodeID, err))
	}
}

// front puts a link delayed by delay in front of each endpoint and
// returns the links' addresses.
func (dl *delayedLinks) front(endpoints []string, delay time.Duration) ([]string, error) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	var addrs []string
	for i, ep := range endpoints {
		l, err := linkproxy.Forward(fmt.Sprintf("client->%d", i+1), "127.0.0.1:0", ep, delay)
		if err != nil {
			return nil, fmt.Errorf("bench: delayed client link to %s: %w", ep, err)
		}
		dl.links = append(dl.links, l)
		addrs = append(addrs, l.Addr())
	}
	return addrs, nil
}

// failed returns the error of a link the tuning could not make.
func (dl *delayedLinks) failed() error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.err
}

// close closes every link.
func (dl *delayedLinks) close() error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	var errs []error
	for _, l := range dl.links {
		errs = append(errs, l.Close())
	}
	dl.links = nil
	return errors.Join(errs...)
}

// describeLeaders says which node leads each shard, as node 1 sees it
// ("shard leaders: 0→n2 1→n1 ..."): a cross-shard commit's rounds cost
// more on the shards its driver does not lead.
func describeLeaders(cell *localstore.Cluster) string {
	n := cell.Node(0)
	if n == nil {
		return "shard leaders: unknown"
	}
	var b strings.Builder
	b.WriteString("shard leaders:")
	for _, sh := range n.Status().GetShards() {
		fmt.Fprintf(&b, " %d→n%d", sh.GetShard(), sh.GetLeaderReplicaId())
	}
	return b.String()
}
