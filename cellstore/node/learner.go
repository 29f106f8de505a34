package node

import (
	"context"
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"
)

// The learner stage. A node joins the cell as a non-voting member of every
// shard (Dragonboat's non-voting replicas, Raft's learners): its replicas
// receive the shards' logs, or snapshots, like any follower's but count
// towards no quorum, so a newcomer far behind, or one that never comes up,
// holds up no commit.
//
//	node serving AddMember (members.go)      joining node (this file)
//	add it as non-voting, every shard  ──▶  replicas catch up (snapshot, log)
//	                                        a ReadIndex through its own replica
//	                                        completes: caught up
//	wait until it votes in every shard ◀──  promote itself, shard by shard
//
// Caught up means that a ReadIndex through the node's own replica
// completed: Dragonboat completes a ReadIndex once the local replica has
// applied the commit index the shard's leader returned for it (a
// non-voting replica forwards the ReadIndex to the leader like a
// follower), so the replica had applied everything the shard had committed
// when the read began. SyncGetShardMembership is such a read and returns
// the membership the promotion names: Dragonboat promotes a non-voting
// member that is added again as a replica with the same ID and address
// (rsm membership.isPromoteNonVoting; another address is rejected), and the
// request names the membership's config change ID like every change in
// members.go, so it cannot race another change. A replica that stops
// catching up stays non-voting; the node keeps checking while it runs, so
// a newcomer started late, or restarted, promotes itself once caught up.
//
// Dragonboat keeps no role across restarts: a replica's Raft state starts
// as its Config says (IsNonVoting), and a non-voting one turns into a
// follower as soon as the membership it loads, from its snapshot or the
// config changes it replays, makes it a voter (raft.restoreRemotes,
// raft.addNode); a replica started as a voter that meets a membership
// making it non-voting panics (raft.restore, raft.addNonVoting). So a node
// records that it joined (cell.json) and starts its replicas as non-voting
// members on every start. A cell's first members start as voters:
// Dragonboat refuses a non-voting initial member.

// recordJoin returns whether this node's replicas start as non-voting
// members because it joined a cell. A node records that it joins when it
// starts with Join holding no replica yet, before it creates any; one that
// holds replicas already started as a voter (a cell's first member, or a
// node that joined before the learner stage existed), and Join is ignored
// on restart.
func (n *Node) recordJoin(meta cellMeta) (bool, error) {
	if meta.Joined || !n.cfg.Join {
		return meta.Joined, nil
	}
	for i := range n.cfg.Shards {
		if n.nh.HasNodeInfo(shardID(i), n.cfg.NodeID) {
			return false, nil
		}
	}
	meta.Joined = true
	if err := writeCellMeta(n.cfg.DataDir, meta); err != nil {
		return false, fmt.Errorf("node: record that %s joins a cell: %w", n.cfg.DataDir, err)
	}
	return true, nil
}

// role is a node's part in a shard.
type role int

const (
	rolePending   role = iota // not a member yet (the cell has not added it)
	roleNonVoting             // a non-voting member, catching up
	roleVoter
	roleGone // no replica: removed from the shard, or the node is closing
)

// localRole is this node's role in shard sh as its replica last applied
// the membership.
func (b *raftBackend) localRole(sh uint32) role {
	info := b.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
	if info == nil {
		return roleGone
	}
	for _, si := range info.ShardInfoList {
		switch {
		case si.ShardID != shardID(sh):
		case si.IsNonVoting:
			return roleNonVoting
		case si.Replicas[b.n.cfg.NodeID] != "":
			return roleVoter
		default:
			return rolePending
		}
	}
	return roleGone
}

// promoteWhenCaughtUp runs, for shard sh, while a joined node runs: every
// heartbeat, while this node's replica is a non-voting member, it tries to
// promote it (promoteSelf). It returns once the replica votes or is gone,
// or when stop closes.
func (b *raftBackend) promoteWhenCaughtUp(sh uint32, stop <-chan struct{}) {
	ctx, cancel := stopContext(stop)
	defer cancel()
	tick := time.NewTicker(b.n.cfg.RTT * time.Duration(b.n.cfg.HeartbeatRTT))
	defer tick.Stop()
	for {
		switch b.localRole(sh) {
		case roleVoter, roleGone:
			return
		case roleNonVoting:
			promoted, err := b.promoteSelf(ctx, sh)
			if err != nil && ctx.Err() == nil {
				b.n.log.Debug("non-voting replica not promoted yet", zap.Uint32("shard", sh), zap.Error(err))
			}
			if promoted {
				b.n.log.Info("caught up: promoted to a voter", zap.Uint32("shard", sh))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// promoteSelf makes this node's replica of shard sh a voter if it has
// caught up: one ReadIndex through the replica, bounded like one attempt
// (raftBackend.attempt), then the promotion. An error means not yet (not
// caught up within the attempt, no leader, a membership that changed
// meanwhile); false without error, that the replica is no longer
// non-voting.
func (b *raftBackend) promoteSelf(ctx context.Context, sh uint32) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.n.cfg.RTT*time.Duration(2*b.n.cfg.ElectionRTT))
	defer cancel()
	m, err := b.nh.SyncGetShardMembership(ctx, shardID(sh))
	if err != nil {
		return false, err
	}
	addr, ok := m.NonVotings[b.n.cfg.NodeID]
	if !ok {
		return false, nil
	}
	if err := b.nh.SyncRequestAddReplica(ctx, shardID(sh), b.n.cfg.NodeID, addr, m.ConfigChangeID); err != nil {
		return false, err
	}
	return true, nil
}

// NonVoting lists the shards of which this node is a non-voting member
// (catching up after joining), as its replicas last applied the
// membership.
func (n *Node) NonVoting() []uint32 {
	var out []uint32
	for i := range n.cfg.Shards {
		if n.backend.localRole(i) == roleNonVoting {
			out = append(out, i)
		}
	}
	return out
}
