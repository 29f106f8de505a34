package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
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
	return []Fault{KillNode(), KillLeader(), RestartNode(), KillAll(), PartitionLeader(), DropLinks(), DelayLinks()}
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
		var links []*Link
		for j := range c.Size() {
			if j != i {
				links = append(links, c.RaftLink(i, j), c.RaftLink(j, i))
			}
		}
		for _, l := range links {
			l.Block()
		}
		heal := func() error {
			for _, l := range links {
				l.Unblock()
			}
			return nil
		}
		return fmt.Sprintf("partition node %d (leader of shard %d)", i+1, shard), heal, nil
	}}
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
