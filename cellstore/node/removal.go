package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/raftio"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/storeerr"
)

// Removal. When the cell removes a node (RemoveMember, members.go), each
// of the node's replicas that applies its own removal, from a config
// change or a snapshot's membership, is stopped and unloaded by
// Dragonboat, which then answers for its shard only "shard not found".
// The node watches for that (Dragonboat's NodeUnloaded system event: a
// replica unloaded while the node is not closing was removed; the node
// stops no replica otherwise) and, from the first removed shard on:
//
//	logs at error level that it was removed, and from which shards;
//	records it in cell.json, so that it refuses to start again;
//	answers every gRPC request with storeerr.NodeRemoved, and ends the
//	streams open (watches);
//	fails /healthz with "removed";
//	closes Removed(), on which troupe store exits non-zero.
//
// A node that was down, or cut off, while the cell removed it may never
// receive its removal: its shards then stay without a leader, and
// healthz says so.

// removal is a node's removal from its cell.
type removal struct {
	At     time.Time `json:"at"`
	Shards []uint32  `json:"shards"`
}

func (r *removal) String() string {
	return fmt.Sprintf("the node was removed from the cell at %s (shards %v)", r.At.Format(time.RFC3339), r.Shards)
}

// removals tracks the node's removal; safe for concurrent use.
type removals struct {
	closing atomic.Bool // set before the node closes its Raft host

	mu      sync.Mutex
	shards  []uint32
	at      time.Time
	removed chan struct{} // closed once every shard has removed the node
}

// Removed is closed once the cell has removed this node from every one
// of its shards (RemovedShards lists those so far): the node answers
// every request with storeerr.NodeRemoved from then on, and its process
// should end (troupe store exits with RemovedError). Until then it keeps
// serving the shards not yet changed: the removal is made shard by shard,
// and each change needs a quorum of that shard's members, this node
// among them.
func (n *Node) Removed() <-chan struct{} { return n.removals.removed }

// RemovedShards lists the shards the cell has removed this node from.
func (n *Node) RemovedShards() []uint32 {
	n.removals.mu.Lock()
	defer n.removals.mu.Unlock()
	return slices.Clone(n.removals.shards)
}

// RemovedError is the error of a removed node (nil if it was not
// removed): storeerr.NodeRemoved, saying from which shards and when.
func (n *Node) RemovedError() error {
	n.removals.mu.Lock()
	defer n.removals.mu.Unlock()
	if len(n.removals.shards) == 0 {
		return nil
	}
	return storeerr.NodeRemoved.With("node %d was removed from the cell at %s (its replicas of shards %v applied the removal); it serves no more; "+
		"to add this machine again, remove its data directory and join the cell as a new node, with another node ID",
		n.cfg.NodeID, n.removals.at.Format(time.RFC3339), n.removals.shards)
}

// replicaUnloaded handles Dragonboat's NodeUnloaded event of shard index
// sh: unless the node is closing, the cell removed this node from sh.
func (n *Node) replicaUnloaded(sh uint32) {
	r := &n.removals
	if r.closing.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.shards, sh) {
		return
	}
	if len(r.shards) == 0 {
		r.at = time.Now().UTC()
	}
	r.shards = append(r.shards, sh)
	slices.Sort(r.shards)
	n.log.Error("the cell removed this node from a shard: its replica of the shard was stopped; once removed from every shard it serves no more, "+
		"and it will not start again on this data directory (remove it and join as a new node, with another node ID)",
		zap.Uint64("node", n.cfg.NodeID), zap.Uint32("shard", sh), zap.Uint32s("removed_from_shards", r.shards))
	if err := n.recordRemoval(removal{At: r.at, Shards: slices.Clone(r.shards)}); err != nil {
		n.log.Error("could not record the node's removal in its data directory", zap.Error(err))
	}
	if len(r.shards) == int(n.cfg.Shards) {
		close(r.removed)
	}
}

// recordRemoval writes the removal into cell.json.
func (n *Node) recordRemoval(rm removal) error {
	m, err := readCellMeta(n.cfg.DataDir)
	if err != nil {
		return err
	}
	m.Removed = &rm
	return writeCellMeta(n.cfg.DataDir, m)
}

// removedErr is RemovedError, cheaply nil while the node is not removed.
func (n *Node) removedErr() error {
	select {
	case <-n.removals.removed:
		return n.RemovedError()
	default:
		return nil
	}
}

// unaryRemoved answers every request of a removed node with its error.
func (n *Node) unaryRemoved(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.removedErr(); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// streamRemoved refuses streams of a removed node, and ends those open
// when it is removed, with its error.
func (n *Node) streamRemoved(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.removedErr(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	go func() {
		select {
		case <-n.removals.removed:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
	if rerr := n.removedErr(); rerr != nil && ss.Context().Err() == nil {
		return rerr
	}
	return err
}

type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }

// eventListener passes Dragonboat's system events the node acts on to it.
type eventListener struct{ n *Node }

var _ raftio.ISystemEventListener = eventListener{}

func (l eventListener) NodeUnloaded(info raftio.NodeInfo) {
	if info.ReplicaID == l.n.cfg.NodeID && info.ShardID >= 1 && info.ShardID <= uint64(l.n.cfg.Shards) {
		l.n.replicaUnloaded(uint32(info.ShardID - 1))
	}
}

func (eventListener) NodeHostShuttingDown()                       {}
func (eventListener) NodeDeleted(raftio.NodeInfo)                 {}
func (eventListener) NodeReady(raftio.NodeInfo)                   {}
func (eventListener) MembershipChanged(raftio.NodeInfo)           {}
func (eventListener) ConnectionEstablished(raftio.ConnectionInfo) {}
func (eventListener) ConnectionFailed(raftio.ConnectionInfo)      {}
func (eventListener) SendSnapshotStarted(raftio.SnapshotInfo)     {}
func (eventListener) SendSnapshotCompleted(raftio.SnapshotInfo)   {}
func (eventListener) SendSnapshotAborted(raftio.SnapshotInfo)     {}
func (eventListener) SnapshotReceived(raftio.SnapshotInfo)        {}
func (eventListener) SnapshotRecovered(raftio.SnapshotInfo)       {}
func (eventListener) SnapshotCreated(raftio.SnapshotInfo)         {}
func (eventListener) SnapshotCompacted(raftio.SnapshotInfo)       {}
func (eventListener) LogCompacted(raftio.EntryInfo)               {}
func (eventListener) LogDBCompacted(raftio.EntryInfo)             {}
