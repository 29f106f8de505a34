package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// fakeView is a raftView whose shards' leaders the test sets; a transfer
// asked for moves the leadership at once unless hold says otherwise.
type fakeView struct {
	leaders  map[uint32]uint64 // 0 or absent: no leader known
	behind   map[uint32]bool   // caughtUp fails
	asked    []uint32          // transfers, in order
	self     uint64
	noEffect bool // a transfer asked for changes nothing
}

func (v *fakeView) leader(sh uint32) (uint64, bool) { return v.leaders[sh], v.leaders[sh] != 0 }

func (v *fakeView) caughtUp(_ context.Context, sh uint32) error {
	if v.behind[sh] {
		return errors.New("behind")
	}
	return nil
}

func (v *fakeView) transfer(sh uint32) error {
	v.asked = append(v.asked, sh)
	if !v.noEffect {
		v.leaders[sh] = v.self
	}
	return nil
}

func newTestKeeper(v *fakeView, shards int) *leaderKeeper {
	return &leaderKeeper{self: v.self, view: v, period: time.Second, log: zap.NewNop(), shards: make([]shardPreference, shards),
		transfers: prometheus.NewCounter(prometheus.CounterOpts{Name: "t"})}
}

// A round asks for the shards led by another node, and only those: not
// the ones this node leads, nor those with no leader known (an election
// under way), nor those this node is behind on (cut off from the leader,
// or just restarted).
func TestLeaderKeeperAsksForShardsLedElsewhere(t *testing.T) {
	v := &fakeView{self: 1, leaders: map[uint32]uint64{0: 1, 1: 2, 3: 3, 4: 2}, behind: map[uint32]bool{4: true}}
	k := newTestKeeper(v, 5)
	if n := k.round(t.Context()); n != 2 || fmt.Sprint(v.asked) != "[1 3]" {
		t.Fatalf("round asked for %d shards, %v; want shards 1 and 3", n, v.asked)
	}
	if got := testutil.ToFloat64(k.transfers); got != 2 {
		t.Errorf("transfers counter %v, want 2", got)
	}
	delete(v.behind, 4)
	v.leaders[2] = 3
	if n := k.round(t.Context()); n != 2 || fmt.Sprint(v.asked) != "[1 3 2 4]" {
		t.Fatalf("second round asked for %d, all so far %v; want shards 2 and 4 added", n, v.asked)
	}
	if n := k.round(t.Context()); n != 0 {
		t.Fatalf("a round with every shard led here asked for %d", n)
	}
}

// While the preferred node's replicas are behind (as a node that is
// cut off sees it), rounds ask for nothing, however many.
func TestLeaderKeeperIdleWhileBehind(t *testing.T) {
	v := &fakeView{self: 1, leaders: map[uint32]uint64{0: 2, 1: 3}, behind: map[uint32]bool{0: true, 1: true}}
	k := newTestKeeper(v, 2)
	for range 100 {
		k.round(t.Context())
	}
	if len(v.asked) != 0 {
		t.Fatalf("asked for %v while behind", v.asked)
	}
}

// A shard whose transfer does not hold is asked for again after 1, 2,
// 4, ... 64 rounds, not every round; holding it a whole round resets
// the wait.
func TestLeaderKeeperBacksOff(t *testing.T) {
	v := &fakeView{self: 1, leaders: map[uint32]uint64{0: 2}, noEffect: true}
	k := newTestKeeper(v, 1)
	var askedAt []uint64
	for range 200 {
		if k.round(t.Context()) > 0 {
			askedAt = append(askedAt, k.rounds)
		}
	}
	if want := "[1 2 4 8 16 32 64 128 192]"; fmt.Sprint(askedAt) != want {
		t.Fatalf("asked in rounds %v, want %s", askedAt, want)
	}
	// Led here for two rounds (held over one), then lost: asked for at
	// once, and with the wait reset.
	v.leaders[0] = 1
	k.round(t.Context())
	k.round(t.Context())
	v.leaders[0] = 2
	start := k.rounds
	askedAt = nil
	for range 4 {
		if k.round(t.Context()) > 0 {
			askedAt = append(askedAt, k.rounds-start)
		}
	}
	if fmt.Sprint(askedAt) != "[1 2 4]" {
		t.Fatalf("after holding the shard, asked in rounds %v of 4, want [1 2 4]", askedAt)
	}
}

// prefCell is a cell of three nodes whose every node prefers node 1 as
// the leader, node 1's loop paced by clock.
type prefCell struct {
	t     *testing.T
	cfgs  []Config
	nodes []*Node
	clock *cachetest.Clock
}

func startPrefCell(t *testing.T, shards uint32) *prefCell {
	c := &prefCell{t: t, clock: cachetest.NewClock(time.Unix(0, 0))}
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		cfg := testConfig(t, t.TempDir())
		cfg.NodeID, cfg.Shards, cfg.HTTPAddr = id, shards, ""
		cfg.LeaderPreference = LeaderPreference{Node: 1, Period: time.Second, After: c.clock.After}
		members[id] = cfg.RaftAddr
		c.cfgs = append(c.cfgs, cfg)
	}
	for i := range c.cfgs {
		c.cfgs[i].InitialMembers = members
	}
	c.nodes = make([]*Node, 3)
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	return c
}

func (c *prefCell) start(i int) {
	n, err := Start(c.cfgs[i])
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i] = n
}

func (c *prefCell) stop(i int) {
	c.nodes[i].Close()
	c.nodes[i] = nil
}

// leaders returns the shards' leaders as node i sees them (0: none):
// Raft's view (Status also reads the state machines, which a restarted
// node may still be opening).
func (c *prefCell) leaders(i int) []uint64 {
	var out []uint64
	for sh := range c.cfgs[i].Shards {
		id, _ := c.nodes[i].Leader(sh)
		out = append(out, id)
	}
	return out
}

// ledBy reports whether every running node sees id leading every shard.
func (c *prefCell) ledBy(id uint64) (bool, string) {
	var seen []string
	ok := true
	for i, n := range c.nodes {
		if n == nil {
			continue
		}
		l := c.leaders(i)
		seen = append(seen, fmt.Sprintf("node %d sees %v", i+1, l))
		for _, x := range l {
			ok = ok && x == id
		}
	}
	return ok, strings.Join(seen, "; ")
}

// round lets node 1's loop run one round: it waits until the loop waits
// on the clock, and moves the clock a period on.
func (c *prefCell) round(ctx context.Context) {
	wait.Until(ctx, c.t, "node 1's leader-preference loop to wait on its clock", func() bool { return c.clock.Timers() > 0 })
	c.clock.Advance(time.Second)
}

// Every shard's leadership goes to the preferred node; while it is down
// the others lead, stay put and report the shards led away; once it is
// back it takes them again.
func TestLeaderPreferenceKeepsLeadersOnPreferredNode(t *testing.T) {
	const shards = 3
	c := startPrefCell(t, shards)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Start with node 2 leading every shard (node 1's loop is paused
	// on its clock meanwhile).
	wait.Until(ctx, t, "node 2 to lead every shard", func() (bool, string) {
		for sh := range uint32(shards) {
			if l, _, ok, _ := c.nodes[1].nh.GetLeaderID(shardID(sh)); !ok || l != 2 {
				if err := c.nodes[1].nh.RequestLeaderTransfer(shardID(sh), 2); err != nil {
					return false, err.Error()
				}
			}
		}
		return c.ledBy(2)
	})
	for i, n := range c.nodes {
		if away := n.shardsLedAway(); away != shards {
			t.Errorf("node %d reports %d shards led away, want %d", i+1, away, shards)
		}
	}
	wait.Until(ctx, t, "node 1 to lead every shard", func() (bool, string) {
		if ok, seen := c.ledBy(1); ok {
			return true, seen
		}
		c.round(ctx)
		return c.ledBy(1)
	})
	if transfers := gathered(t, c.nodes[0], "troupe_leader_preference_transfers_total"); transfers < shards {
		t.Errorf("node 1 asked for %v transfers, want at least %d", transfers, shards)
	}

	// Node 1 down: the others elect leaders and keep them.
	c.stop(0)
	wait.Until(ctx, t, "nodes 2 and 3 to elect leaders among them", func() (bool, string) {
		l2, l3 := c.leaders(1), c.leaders(2)
		for i := range l2 {
			if l2[i] == 0 || l2[i] == 1 || l2[i] != l3[i] {
				return false, fmt.Sprintf("node 2 sees %v, node 3 %v", l2, l3)
			}
		}
		return true, ""
	})
	before := leadersAndTerms(c.nodes[1])
	commitSome(ctx, t, c.nodes[1], 20)
	if after := leadersAndTerms(c.nodes[1]); after != before {
		t.Errorf("with the preferred node down, leaders moved: %s, then %s", before, after)
	}
	if away := gathered(t, c.nodes[1], "troupe_leader_preference_shards_led_away"); away != shards {
		t.Errorf("with the preferred node down, node 2 reports %v shards led away, want %d", away, shards)
	}

	// Node 1 back: once caught up it takes every shard again.
	c.start(0)
	wait.Until(ctx, t, "node 1 to lead every shard again after its restart", func() (bool, string) {
		if ok, seen := c.ledBy(1); ok {
			return true, seen
		}
		c.round(ctx)
		return c.ledBy(1)
	})
	for i, n := range c.nodes {
		if away := n.shardsLedAway(); away != 0 {
			t.Errorf("node %d reports %d shards led away, want 0", i+1, away)
		}
	}
}

// gathered returns the value of the metric named name in n's registry
// (it must have one, unlabelled).
func gathered(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("node %d has no metric %s", n.ID(), name)
	return 0
}

// leadersAndTerms describes each shard's leader and term as n sees them.
func leadersAndTerms(n *Node) string {
	var b strings.Builder
	for sh := range n.cfg.Shards {
		id, term, _, err := n.nh.GetLeaderID(shardID(sh))
		fmt.Fprintf(&b, "%d:n%d/t%d/%v ", sh, id, term, err)
	}
	return b.String()
}

// commitSome commits count puts through n, one after another.
func commitSome(ctx context.Context, t *testing.T, n *Node, count int) {
	t.Helper()
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := storev1.NewStoreClient(conn)
	for i := range count {
		k := fmt.Sprintf("/machines/m%d", i)
		resp, err := c.Commit(ctx, &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{
			Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte("v")}}}},
		}}})
		if err != nil || !resp.GetGroups()[0].GetCommitted() {
			t.Fatalf("commit %s: %v %v", k, resp, err)
		}
	}
}
