package node

import (
	"context"
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Leader preference. Raft lets any voter win a shard's election, so a
// cell's shards end up led by whichever nodes won theirs. A cross-shard
// commit's driver proposes on its own replica of every participant (the
// server's two-phase commit), and a round costs one quorum round trip on
// a shard the driver leads, twice that on one it follows (the proposal
// goes to the leader, the notice of its commit comes back): with every
// shard led by one node, a client that sends its commits there pays the
// least (DESIGN.md, Cross-shard commits).
//
// Config.LeaderPreference.Node names that node, the same on every node
// of the cell (an operator's choice, like CockroachDB's lease preferences
// or TiKV's leader weights, kept by the nodes instead of moved once by
// hand as etcd's move-leader does). The preferred node keeps every
// shard's leadership:
//
//	every Period, for each shard:
//	  led by this node, or no leader known        nothing
//	  this node is not a voter of it              nothing (a learner
//	                                              cannot lead)
//	  its ReadIndex through this node's replica   nothing this round
//	  does not complete within Period             (cut off, behind)
//	  else                                        RequestLeaderTransfer
//	                                              to this node
//
// Dragonboat's leader transfer, asked on a follower, goes to the leader,
// which sends the follower TimeoutNow once it holds every entry (at once
// when, as the ReadIndex shows, it is caught up); the follower then wins
// an election without waiting for a timeout. A transfer that has not
// finished within an election timeout is abandoned by the leader, which
// meanwhile takes no proposals: that is why only a caught-up node asks.
//
// Only the preferred node acts, so while it is down nothing moves: the
// cell elects leaders among the others as usual, and each node reports
// how many shards are led away from the preference. Once the preferred
// node is back and caught up, its loop takes the leaderships back. Each
// shard is asked for at most once a round; asked for again, while it is
// still or again led elsewhere, after 1, 2, 4, ... 64 rounds, so a node that
// cannot keep a leadership (too slow to heartbeat, say) does not make
// the shard change leaders every round; holding it over a whole round
// resets the wait.
//
// The price: the preferred node does every leader's work for every shard
// (sending each entry to every follower, serving ReadIndex, driving the
// cross-shard commits that come to it), while the others only follow; a
// cell whose load fills one node's CPU or network is slower with it.
// And a cell so configured fails over as any other: the preference is
// a placement, not a condition for availability.

// LeaderPreference says where a cell's shards should be led.
type LeaderPreference struct {
	// Node, if non-zero, is the node that takes every shard's leadership
	// it can. Give every node of the cell the same: each reports the
	// shards led elsewhere, and the preferred node acts.
	Node uint64
	// Period is how often the preferred node looks at the shards'
	// leaders (0: one election timeout, RTT × ElectionRTT).
	Period time.Duration
	// After is the loop's clock (nil: time.After); tests pass a manual
	// one.
	After func(time.Duration) <-chan time.Time
}

// maxBackoffShift caps the rounds a shard waits after a transfer that
// did not hold: 2^6 = 64.
const maxBackoffShift = 6

// period returns p's period on a node of cfg.
func (p LeaderPreference) period(cfg Config) time.Duration {
	if p.Period > 0 {
		return p.Period
	}
	return cfg.RTT * time.Duration(cfg.ElectionRTT)
}

// raftView is what the leader-preference loop needs of Raft, one shard at
// a time (shards by index).
type raftView interface {
	// leader returns the shard's leader as this node knows it.
	leader(shard uint32) (id uint64, known bool)
	// caughtUp returns nil when this node votes in the shard and its
	// replica has applied everything the shard had committed when it
	// asked.
	caughtUp(ctx context.Context, shard uint32) error
	// transfer asks for the shard's leadership to move to this node.
	transfer(shard uint32) error
}

// shardPreference is the loop's memory of one shard.
type shardPreference struct {
	next   uint64 // the first round in which the shard may be asked for again
	misses uint   // transfers asked for since the node last held the shard a whole round
	held   bool   // led by this node at the last round
}

// leaderKeeper is the preferred node's loop. Its fields are the loop's
// own (run and round run on one goroutine).
type leaderKeeper struct {
	self      uint64
	view      raftView
	period    time.Duration
	after     func(time.Duration) <-chan time.Time
	log       *zap.Logger
	transfers prometheus.Counter
	rounds    uint64
	shards    []shardPreference
}

// run runs a round every period until stop closes.
func (k *leaderKeeper) run(stop <-chan struct{}) {
	ctx, cancel := stopContext(stop)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.after(k.period):
		}
		k.round(ctx)
	}
}

// round looks at every shard once, asks for those led elsewhere that it
// may ask for, and returns how many it asked for.
func (k *leaderKeeper) round(ctx context.Context) int {
	k.rounds++
	asked := 0
	for i := range k.shards {
		sh := uint32(i)
		s := &k.shards[i]
		leader, known := k.view.leader(sh)
		if known && leader == k.self {
			if s.held {
				s.misses, s.next = 0, 0
			}
			s.held = true
			continue
		}
		s.held = false
		if !known || k.rounds < s.next || ctx.Err() != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, k.period)
		err := k.view.caughtUp(cctx, sh)
		cancel()
		if err == nil {
			err = k.view.transfer(sh)
		}
		if err != nil {
			k.log.Debug("leader preference: shard not taken this round", zap.Uint32("shard", sh), zap.Uint64("leader", leader), zap.Error(err))
			continue
		}
		s.next = k.rounds + 1<<min(s.misses, maxBackoffShift)
		s.misses++
		asked++
		k.transfers.Inc()
		k.log.Debug("leader preference: leadership asked for", zap.Uint32("shard", sh), zap.Uint64("from", leader), zap.Uint("misses", s.misses))
	}
	return asked
}

// nodeHostView is raftView on a node's Dragonboat host.
type nodeHostView struct {
	nh   *dragonboat.NodeHost
	self uint64
}

func (v nodeHostView) leader(sh uint32) (uint64, bool) {
	id, _, ok, err := v.nh.GetLeaderID(shardID(sh))
	return id, ok && err == nil
}

// caughtUp reads the shard's membership through this node's replica: a
// ReadIndex, which completes once the replica has applied what the
// leader had committed (learner.go).
func (v nodeHostView) caughtUp(ctx context.Context, sh uint32) error {
	m, err := v.nh.SyncGetShardMembership(ctx, shardID(sh))
	if err != nil {
		return fmt.Errorf("not caught up: %w", err)
	}
	if _, ok := m.Nodes[v.self]; !ok {
		return fmt.Errorf("node %d does not vote in shard %d", v.self, sh)
	}
	return nil
}

func (v nodeHostView) transfer(sh uint32) error {
	return v.nh.RequestLeaderTransfer(shardID(sh), v.self)
}

// leaderPreferenceCollector reports, at scrape time, the shards whose
// leader, as this node knows it, is not the preferred node.
type leaderPreferenceCollector struct{ n *Node }

var descLedAway = prometheus.NewDesc("troupe_leader_preference_shards_led_away",
	"Shards with a known leader other than the preferred node (--leader-preference), as this node sees them.", nil, nil)

func (c leaderPreferenceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descLedAway }

func (c leaderPreferenceCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descLedAway, prometheus.GaugeValue, float64(c.n.shardsLedAway()))
}

// Leader returns shard i's leader as this node's Raft host knows it
// (Raft's view alone, unlike Status, which also reads the replicas).
func (n *Node) Leader(i uint32) (id uint64, known bool) {
	return nodeHostView{nh: n.nh}.leader(i)
}

// shardsLedAway counts the shards with a known leader other than the
// preferred node.
func (n *Node) shardsLedAway() int {
	away := 0
	for i := range n.cfg.Shards {
		if id, ok := n.Leader(i); ok && id != n.cfg.LeaderPreference.Node {
			away++
		}
	}
	return away
}

// startLeaderPreference registers the preference's metrics and, on the
// preferred node, starts its loop; Close ends it. Nothing without a
// preference.
func (n *Node) startLeaderPreference() {
	pref := n.cfg.LeaderPreference
	if pref.Node == 0 {
		return
	}
	n.registry.MustRegister(leaderPreferenceCollector{n})
	if pref.Node != n.cfg.NodeID {
		return
	}
	after := pref.After
	if after == nil {
		after = time.After
	}
	k := &leaderKeeper{self: n.cfg.NodeID, view: nodeHostView{nh: n.nh, self: n.cfg.NodeID}, period: pref.period(n.cfg), after: after,
		log: n.log, shards: make([]shardPreference, n.cfg.Shards),
		transfers: prometheus.NewCounter(prometheus.CounterOpts{Name: "troupe_leader_preference_transfers_total",
			Help: "Leader transfers this node, the preferred one, asked for to take a shard's leadership."})}
	n.registry.MustRegister(k.transfers)
	n.log.Info("leader preference: this node takes every shard's leadership it can", zap.Duration("period", k.period))
	n.promoting.Go(func() { k.run(n.stop) })
}
