package node

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
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
// RemoveMember finishes it. A node joins as a non-voting member and
// promotes itself once caught up (learner.go); AddMember waits for that.
// Each member's gRPC address and version come from the record it
// published (publish.go).

var _ server.Cluster = (*raftBackend)(nil)

// Members implements server.Cluster: the shards' memberships, merged by
// node, with each member's gRPC address and version from its published
// record (left empty if it has published none, or the records cannot be
// read).
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
		add := func(id uint64, addr string) *storev1.Member {
			mem := byID[id]
			if mem == nil {
				mem = &storev1.Member{NodeId: id, RaftAddress: addr}
				byID[id] = mem
			}
			mem.Shards = append(mem.Shards, sh)
			return mem
		}
		for id, addr := range m.Nodes {
			if mem := add(id, addr); known && leader == id {
				mem.Leads = append(mem.Leads, sh)
			}
		}
		for id, addr := range m.NonVotings {
			mem := add(id, addr)
			mem.NonVoting = append(mem.NonVoting, sh)
		}
	}
	recs, err := b.nodeRecords(ctx)
	if err != nil {
		b.n.log.Debug("reading the nodes' records", zap.Error(err))
	}
	for id, mem := range byID {
		if rec := recs[id]; rec != nil {
			mem.GrpcAddress, mem.Version = rec.GetGrpcAddress(), rec.GetVersion()
		}
	}
	return slices.SortedFunc(maps.Values(byID), func(a, b *storev1.Member) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) }), nil
}

// AddMember implements server.Cluster: it adds node id to every shard
// that lacks it as a non-voting member, then waits until the node has
// promoted itself to a voter of every shard (learner.go), or ctx ends
// (ProposalTimeout without a deadline).
func (b *raftBackend) AddMember(ctx context.Context, id uint64, addr string) error {
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	ctx, cancelEarly := answerInTime(ctx)
	defer cancelEarly()
	err := b.reconfigure(ctx, "add member", func(ctx context.Context, sh uint32, m *dragonboat.Membership) error {
		if a, ok := member(m, id); ok {
			if !sameAddress(a, addr) {
				return storeerr.MemberAtOtherAddress.With("add member: shard %d: node %d is a member at %s, not %s", sh, id, a, addr)
			}
			return nil
		}
		if _, ok := m.Removed[id]; ok {
			return storeerr.MemberRemoved.With("add member: node %d was removed from the cell and cannot come back; give the new node another ID", id)
		}
		for _, others := range []map[uint64]string{m.Nodes, m.NonVotings} {
			for other, a := range others {
				if sameAddress(a, addr) {
					return storeerr.AddressTaken.With("add member: %s is the address of member %d", addr, other)
				}
			}
		}
		return b.nh.SyncRequestAddNonVoting(ctx, shardID(sh), id, addr, m.ConfigChangeID)
	})
	if err != nil {
		return err
	}
	return b.awaitVoter(ctx, id)
}

// answerInTime returns ctx ending a little before ctx's deadline (a tenth
// of the time left, at most a second), so that a request that cannot
// finish answers with its own error before its caller gives up on it.
func answerInTime(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d.Add(-min(time.Until(d)/10, time.Second)))
}

// awaitVoter waits until node id votes in every shard. If ctx ends first
// the error says which shard still waits, and that the node stays a
// non-voting member there.
func (b *raftBackend) awaitVoter(ctx context.Context, id uint64) error {
	for sh := range b.n.cfg.Shards {
		nonVoting := false
		err := b.attempt(ctx, func(ctx context.Context) error {
			m, err := b.nh.SyncGetShardMembership(ctx, shardID(sh))
			if err != nil {
				return err
			}
			if _, ok := m.Nodes[id]; ok {
				return nil
			}
			if _, ok := m.NonVotings[id]; ok {
				nonVoting = true
				return errWait
			}
			return storeerr.RemovedMeanwhile.With("add member: shard %d: node %d was removed meanwhile", sh, id)
		})
		if storeerr.Of(err) != nil {
			return err
		}
		if err != nil && nonVoting {
			def := storeerr.NotCaughtUp
			if errors.Is(ctx.Err(), context.Canceled) {
				def = storeerr.Canceled
			}
			return def.With("add member: shard %d: node %d has not caught up with the shard (is it running?); "+
				"it is left a non-voting member of shards %v, which count towards no quorum, and promotes itself to a voter "+
				"of each once caught up: repeat the add to wait for that, or remove the node", sh, id, b.nonVotingShards(id))
		}
		if err != nil {
			return raftError("add member", sh, err)
		}
	}
	return nil
}

// nonVotingShards lists the shards whose membership, as this node's
// replicas last applied it, does not have node id vote.
func (b *raftBackend) nonVotingShards(id uint64) []uint32 {
	voting := map[uint64]bool{}
	if info := b.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true}); info != nil {
		for _, si := range info.ShardInfoList {
			_, ok := si.Replicas[id]
			voting[si.ShardID] = ok
		}
	}
	var out []uint32
	for sh := range b.n.cfg.Shards {
		if !voting[shardID(sh)] {
			out = append(out, sh)
		}
	}
	return out
}

// RemoveMember implements server.Cluster. A shard's leadership moves off
// the node before it is removed: a leader that applies its own removal
// steps down at once, possibly before the others learn that the change
// committed, and they would wait for its vote. Once the node is removed
// from every shard, its published record is deleted.
func (b *raftBackend) RemoveMember(ctx context.Context, id uint64) error {
	if id == b.n.cfg.NodeID {
		return storeerr.RemoveSelf.With("remove member: node %d does not remove itself; send the request to another member", id)
	}
	err := b.reconfigure(ctx, "remove member", func(ctx context.Context, sh uint32, m *dragonboat.Membership) error {
		_, voter := m.Nodes[id]
		if _, ok := member(m, id); !ok {
			return nil
		}
		if voter && len(m.Nodes) == 1 {
			return storeerr.LastReplica.With("remove member: node %d holds shard %d's last replica", id, sh)
		}
		if leader, _, ok, err := b.nh.GetLeaderID(shardID(sh)); err == nil && ok && leader == id {
			if err := b.nh.RequestLeaderTransfer(shardID(sh), successor(m, id, b.n.cfg.NodeID)); err != nil {
				return err
			}
			return errWait
		}
		return b.nh.SyncRequestDeleteReplica(ctx, shardID(sh), id, m.ConfigChangeID)
	})
	if err == nil {
		b.forgetRecord(ctx, id)
	}
	return err
}

// reconfigure runs step on every shard in turn, each time with the
// shard's current membership, until step finds its change made (nil),
// fails for good (an error of the store's, storeerr) or ctx ends.
func (b *raftBackend) reconfigure(ctx context.Context, op string, step func(ctx context.Context, shard uint32, m *dragonboat.Membership) error) error {
	for sh := range b.n.cfg.Shards {
		err := b.attempt(ctx, func(ctx context.Context) error {
			m, err := b.nh.SyncGetShardMembership(ctx, shardID(sh))
			if err != nil {
				return err
			}
			return step(ctx, sh, m)
		})
		if storeerr.Of(err) != nil {
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

// member returns the Raft address of node id if it is a member of the
// shard m describes, voting or not.
func member(m *dragonboat.Membership, id uint64) (string, bool) {
	if a, ok := m.Nodes[id]; ok {
		return a, true
	}
	a, ok := m.NonVotings[id]
	return a, ok
}

// sameAddress compares Raft addresses as Dragonboat does.
func sameAddress(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}
