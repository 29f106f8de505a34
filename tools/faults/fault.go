package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A Fault is one kind of trouble for a cell. Inject causes it, choosing
// its victims with t.Rand, and returns what it did (for the report and
// the visualization) and heal, which ends it. Cluster.Heal ends every fault
// too, so an Inject that fails half-way may leave its mess behind.
type Fault struct {
	Name   string
	Inject func(ctx context.Context, t Target) (what string, heal func() error, err error)
}

// Target is what a fault acts on: the round's cell, its random numbers,
// and its workload for faults that need traffic of their own.
type Target struct {
	Cluster *Cluster
	Rand    *rand.Rand
	// Through runs n operations of the round's workload at once, each
	// aimed at node (Pinned.OpAt) through a client that reaches that
	// node only, records them in the round's history, and returns when
	// they have ended. Nil when the workload is not Pinned.
	Through func(ctx context.Context, node, n int)
}

// DefaultFaults are the faults any workload can run under.
func DefaultFaults() []Fault {
	return []Fault{KillNode(), KillLeader(), RestartNode(), KillAll(), PartitionLeader(), LagNode(), DropLinks(), DelayLinks()}
}

// KillNode kills a random node with SIGKILL; healing restarts it.
func KillNode() Fault {
	return Fault{Name: "kill-node", Inject: func(_ context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		i := rng.IntN(c.Size())
		return fmt.Sprintf("kill -9 node %d", i+1), func() error { return c.Start(i) }, c.Kill(i)
	}}
}

// KillLeader kills the leader of a random shard with SIGKILL; healing
// restarts it.
func KillLeader() Fault {
	return Fault{Name: "kill-leader", Inject: func(ctx context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		shard := rng.IntN(c.Shards())
		i, err := c.Leader(ctx, shard)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("kill -9 node %d (leader of shard %d)", i+1, shard), func() error { return c.Start(i) }, c.Kill(i)
	}}
}

// RestartNode stops a random node with SIGTERM; healing starts it again.
func RestartNode() Fault {
	return Fault{Name: "restart-node", Inject: func(_ context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		i := rng.IntN(c.Size())
		return fmt.Sprintf("stop node %d (SIGTERM)", i+1), func() error { return c.Start(i) }, c.Stop(i)
	}}
}

// KillAll kills every node with SIGKILL, under load; healing restarts
// them all. Whatever was acknowledged must survive.
func KillAll() Fault {
	return Fault{Name: "kill-all", Inject: func(_ context.Context, t Target) (string, func() error, error) {
		c := t.Cluster
		var errs []error
		for i := range c.Size() {
			errs = append(errs, c.Kill(i))
		}
		heal := func() error {
			var errs []error
			for i := range c.Size() {
				errs = append(errs, c.Start(i))
			}
			return errors.Join(errs...)
		}
		return "kill -9 every node", heal, errors.Join(errs...)
	}}
}

// PartitionLeader cuts the leader of a random shard off from the other
// nodes (every Raft link to and from it blocked; clients still reach
// it); healing reconnects it.
func PartitionLeader() Fault {
	return Fault{Name: "partition-leader", Inject: func(ctx context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		shard := rng.IntN(c.Shards())
		i, err := c.Leader(ctx, shard)
		if err != nil {
			return "", nil, err
		}
		reconnect := cutOff(c, i)
		heal := func() error { reconnect(); return nil }
		return fmt.Sprintf("partition node %d (leader of shard %d)", i+1, shard), heal, nil
	}}
}

// cutOff blocks every Raft link to and from node i and returns what
// unblocks them.
func cutOff(c *Cluster, i int) (reconnect func()) {
	var links []*Link
	for j := range c.Size() {
		if j != i {
			links = append(links, c.RaftLink(i, j), c.RaftLink(j, i))
		}
	}
	for _, l := range links {
		l.Block()
	}
	return func() {
		for _, l := range links {
			l.Unblock()
		}
	}
}

// How long LagNode waits for the other nodes to compact their logs past
// the node it cut off, and then for that node to load their snapshots.
const (
	lagWait = 10 * time.Second
	lagHeal = 30 * time.Second
)

// LagNode cuts a random node off from the other nodes' Raft traffic
// (clients still reach it) and holds it there until, for some shard,
// every other node's Raft log starts past the entries the node has
// applied (compacted into their snapshots, ClusterConfig.CompactionOverhead),
// or lagWait passes: the node can then catch up on that shard only from a
// snapshot of the leader's state. Healing reconnects it and waits for it
// to have loaded a snapshot of each such shard; a node that has not
// within lagHeal fails the heal.
func LagNode() Fault {
	return Fault{Name: "lag-node", Inject: func(ctx context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		i := rng.IntN(c.Size())
		reconnect := cutOff(c, i)
		behind, loaded := awaitCompactedPast(ctx, c, i)
		if len(behind) == 0 {
			return fmt.Sprintf("cut node %d off (no shard compacted past it before the load or %v ended)", i+1, lagWait), func() error { reconnect(); return nil }, nil
		}
		heal := func() error {
			reconnect()
			hctx, cancel := context.WithTimeout(context.Background(), lagHeal)
			defer cancel()
			return awaitSnapshots(hctx, c, i, behind, loaded)
		}
		return fmt.Sprintf("cut node %d off until shards %v compacted past it", i+1, slices.Sorted(maps.Keys(behind))), heal, nil
	}}
}

// awaitCompactedPast polls until, for some shard, every other running
// node's Raft log starts past node i's applied index, or lagWait passes or
// ctx ends. It returns those shards with the Raft index each other node
// had compacted to then, and how many snapshots node i had loaded of
// each shard before.
func awaitCompactedPast(ctx context.Context, c *Cluster, i int) (behind map[uint32]uint64, loaded map[uint32]uint64) {
	ctx, cancel := context.WithTimeout(ctx, lagWait)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		sts := c.statuses(ctx)
		if own := sts[i]; own != nil {
			behind, loaded = map[uint32]uint64{}, map[uint32]uint64{}
			for _, ss := range own.GetShards() {
				sh := ss.GetShard()
				loaded[sh] = ss.GetSnapshotsRecovered()
				if first, ok := othersLogStart(sts, i, sh); ok && first > ss.GetAppliedIndex()+1 {
					behind[sh] = first
				}
			}
			if len(behind) > 0 {
				return behind, loaded
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-tick.C:
		}
	}
}

// othersLogStart is the lowest first Raft index of shard sh among the
// nodes other than i; false if none of them answered.
func othersLogStart(sts []*storev1.StatusResponse, i int, sh uint32) (uint64, bool) {
	first, ok := uint64(0), false
	for j, st := range sts {
		if j == i || st == nil {
			continue
		}
		for _, ss := range st.GetShards() {
			if ss.GetShard() == sh && (!ok || ss.GetRaftLogFirstIndex() < first) {
				first, ok = ss.GetRaftLogFirstIndex(), true
			}
		}
	}
	return first, ok
}

// awaitSnapshots polls until node i has loaded more snapshots of each
// shard in behind than loaded says it had, and applied past the index
// the others had compacted to, or ctx ends.
func awaitSnapshots(ctx context.Context, c *Cluster, i int, behind, loaded map[uint32]uint64) error {
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		var missing []string
		st := c.statuses(ctx)[i]
		if st == nil {
			missing = append(missing, "it does not answer")
		}
		for sh, first := range behind {
			var got *storev1.ShardStatus
			for _, ss := range st.GetShards() {
				if ss.GetShard() == sh {
					got = ss
				}
			}
			if st != nil && (got.GetSnapshotsRecovered() <= loaded[sh] || got.GetAppliedIndex() < first) {
				missing = append(missing, fmt.Sprintf("shard %d (snapshots loaded %d, applied %d, the others' logs start at %d)",
					sh, got.GetSnapshotsRecovered()-min(got.GetSnapshotsRecovered(), loaded[sh]), got.GetAppliedIndex(), first))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			slices.Sort(missing)
			return fmt.Errorf("node %d did not catch up from a snapshot: %s", i+1, strings.Join(missing, "; "))
		case <-tick.C:
		}
	}
}

// DropLinks blocks a random third of the one-way Raft links (at least
// one): what they carry is lost, as on paths that drop every packet, and
// the blocked directions need not be symmetric. Healing unblocks them.
func DropLinks() Fault {
	return Fault{Name: "drop-links", Inject: func(_ context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		links := someLinks(c, rng, 3)
		for _, l := range links {
			l.Block()
		}
		heal := func() error {
			for _, l := range links {
				l.Unblock()
			}
			return nil
		}
		return "drop Raft traffic on " + linkNames(links), heal, nil
	}}
}

// DelayLinks delays about half of the one-way Raft links (at least one)
// by one random delay between 1 and 10 RTTs; healing removes the delay.
func DelayLinks() Fault {
	return Fault{Name: "delay-links", Inject: func(_ context.Context, t Target) (string, func() error, error) {
		c, rng := t.Cluster, t.Rand
		links := someLinks(c, rng, 2)
		d := c.cfg.RTT * time.Duration(1+rng.IntN(10))
		for _, l := range links {
			l.SetDelay(d)
		}
		heal := func() error {
			for _, l := range links {
				l.SetDelay(0)
			}
			return nil
		}
		return fmt.Sprintf("delay Raft traffic on %s by %v", linkNames(links), d), heal, nil
	}}
}

// someLinks picks each one-way Raft link with probability 1/oneIn, and
// one at random if that picked none.
func someLinks(c *Cluster, rng *rand.Rand, oneIn int) []*Link {
	var all, picked []*Link
	for i := range c.Size() {
		for j := range c.Size() {
			if i != j {
				all = append(all, c.RaftLink(i, j))
			}
		}
	}
	for _, l := range all {
		if rng.IntN(oneIn) == 0 {
			picked = append(picked, l)
		}
	}
	if len(picked) == 0 && len(all) > 0 {
		picked = append(picked, all[rng.IntN(len(all))])
	}
	return picked
}

// linkNames lists links: "1->2, 3->1".
func linkNames(links []*Link) string {
	var names []string
	for _, l := range links {
		names = append(names, l.Name())
	}
	return strings.Join(names, ", ")
}
