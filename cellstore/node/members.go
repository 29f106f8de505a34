package node

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/lni/dragonboat/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/server"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Membership. Every store node holds a replica of every shard, so a node
// joins or leaves the cell by joining or leaving every shard's Raft group,
// one shard after the other. For each shard, an attempt reads the
// membership and requests the change with its config change ID (shards run
// with OrderedConfigChange) through this node's replica, which forwards it
// to the shard's leader; a request based on a membership that changed
// meanwhile is rejected, and the next attempt reads it again. A shard
// already changed is skipped, so repeating an interrupted AddMember or
// RemoveMember finishes it.

var _ server.Cluster = (*raftBackend)(nil)

// Members implements server.Cluster.
func (b *raftBackend) Members(ctx context.Context) ([]*storev1.Member, error) {
	byID := map[uint64]*storev1.Member{}
	for sh := range b.n.cfg.Shards {
		var m *dragonboat.Membership
		err := b.attempt(ctx, func(ctx context.Context) (err error) {
			m, err = b.nh.SyncGetShardMembership(ctx, shardID(sh))
			return err
		})
		if err != nil {
			return nil, raftError("list members", sh, err)
		}
		leader, _, known, _ := b.nh.GetLeaderID(shardID(sh))
		for id, addr := range m.Nodes {
			mem := byID[id]
			if mem == nil {
				mem = &storev1.Member{NodeId: id, RaftAddress: addr}
				byID[id] = mem
			}
			mem.Shards = append(mem.Shards, sh)
			if known && leader == id {
				mem.Leads = append(mem.Leads, sh)
			}
		}
	}
	return slices.SortedFunc(maps.Values(byID), func(a, b *storev1.Member) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) }), nil
}

// AddMember implements server.Cluster.
func (b *raftBackend) AddMember(ctx context.Context, id uint64, addr string) error {
	return b.reconfigure(ctx, "add member", func(ctx context.Context, sh uint32, m *dragonboat.Membership) error {
		if a, ok := m.Nodes[id]; ok {
			if !sameAddress(a, addr) {
				return status.Errorf(codes.FailedPrecondition, "add member: shard %d: node %d is a member at %s, not %s", sh, id, a, addr)
			}
			return nil
		}
		if _, ok := m.Removed[id]; ok {
			return status.Errorf(codes.FailedPrecondition, "add member: node %d was removed from the cell and cannot come back; give the new node another ID", id)
		}
		for other, a := range m.Nodes {
			if sameAddress(a, addr) {
				return status.Errorf(codes.FailedPrecondition, "add member: %s is the address of member %d", addr, other)
			}
		}
		return b.nh.SyncRequestAddReplica(ctx, shardID(sh), id, addr, m.ConfigChangeID)
	})
}

// RemoveMember implements server.Cluster. A shard's leadership moves off
// the node before it is removed: a leader that applies its own removal
// steps down at once, possibly before the others learn that the change
// committed, and they would wait for its vote.
func (b *raftBackend) RemoveMember(ctx context.Context, id uint64) error {
	if id == b.n.cfg.NodeID {
		return status.Errorf(codes.FailedPrecondition, "remove member: node %d does not remove itself; send the request to another member", id)
	}
	return b.reconfigure(ctx, "remove member", func(ctx context.Context, sh uint32, m *dragonboat.Membership) error {
		if _, ok := m.Nodes[id]; !ok {
			return nil
		}
		if len(m.Nodes) == 1 {
			return status.Errorf(codes.FailedPrecondition, "remove member: node %d holds shard %d's last replica", id, sh)
		}
		if leader, _, ok, err := b.nh.GetLeaderID(shardID(sh)); err == nil && ok && leader == id {
			if err := b.nh.RequestLeaderTransfer(shardID(sh), successor(m, id, b.n.cfg.NodeID)); err != nil {
				return err
			}
			return errWait
		}
		return b.nh.SyncRequestDeleteReplica(ctx, shardID(sh), id, m.ConfigChangeID)
	})
}

// reconfigure runs step on every shard in turn, each time with the
// shard's current membership, until step finds its change made (nil),
// fails for good (a status error) or ctx ends.
func (b *raftBackend) reconfigure(ctx context.Context, op string, step func(ctx context.Context, shard uint32, m *dragonboat.Membership) error) error {
	for sh := range b.n.cfg.Shards {
		err := b.attempt(ctx, func(ctx context.Context) error {
			m, err := b.nh.SyncGetShardMembership(ctx, shardID(sh))
			if err != nil {
				return err
			}
			return step(ctx, sh, m)
		})
		if _, isStatus := status.FromError(err); err != nil && isStatus {
			return err
		}
		if err != nil {
			return raftError(op, sh, err)
		}
	}
	return nil
}

// successor picks the replica to lead a shard instead of id: this node's
// if it has one, else the lowest other.
func successor(m *dragonboat.Membership, id, self uint64) uint64 {
	if _, ok := m.Nodes[self]; ok {
		return self
	}
	var next uint64
	for other := range m.Nodes {
		if other != id && (next == 0 || other < next) {
			next = other
		}
	}
	return next
}

// sameAddress compares Raft addresses as Dragonboat does.
func sameAddress(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}
