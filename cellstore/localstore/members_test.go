package localstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A one-node cell grows to three nodes and shrinks back to one while a
// writer commits through node 1. The new members catch up by snapshot (the
// log was compacted before they joined) and end with the same state; a
// restarted joined node comes back; removing a node that leads a shard
// moves the leadership off it first; no acknowledged commit is lost.
func TestGrowAndShrinkWhileServing(t *testing.T) {
	const shards = 2
	c := startCell(t, 1, shards, func(nc *node.Config) {
		nc.SnapshotEntries = 20
		nc.CompactionOverhead = 5
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*testTimeout)
	defer cancel()
	admin := c.admin(0)
	for n := range 60 {
		c.put(ctx, 0, fmt.Sprintf("/grow/pre%03d", n), "v")
	}
	for sh := range c.shards {
		lr, err := c.Node(0).NodeHost().GetLogReader(uint64(sh) + 1)
		if err != nil {
			t.Fatal(err)
		}
		if first, _ := lr.GetRange(); first <= 1 {
			t.Fatalf("shard %d: the log still starts at %d; the test needs it compacted", sh, first)
		}
	}
	w := startWriter(ctx, c)

	members := []uint64{1}
	for range 2 {
		before := w.acked()
		start := time.Now()
		i, got := c.join(ctx)
		members = append(members, uint64(i+1))
		sameMembers(t, got, shards, members...)
		t.Logf("node %d joined in %v; %d commits meanwhile, at most %v apart", i+1, time.Since(start).Round(time.Millisecond),
			w.acked()-before, w.longestGap(before).Round(time.Millisecond))
		w.waitFor(ctx, t, before+20)
	}
	wait.Until(ctx, t, "the new members to receive snapshots", func() (bool, string) {
		for i := 1; i <= 2; i++ {
			for sh := range c.shards {
				if m := c.Node(i).StateMachine(sh); m == nil || m.SnapshotsRecovered() == 0 {
					return false, fmt.Sprintf("node %d shard %d has not recovered from a snapshot", i+1, sh)
				}
			}
		}
		return true, ""
	})
	// A joined node restarts as a member (not as a joiner again).
	c.StopNode(2)
	if err := c.StartNode(2); err != nil {
		t.Fatal(err)
	}

	// Pause the writer and compare the replicas.
	w.gate.Lock()
	c.waitConverged(ctx)
	want, _ := c.rangeAll(ctx, 0, "/grow/", 0)
	for i := 1; i <= 2; i++ {
		got := staleRange(ctx, t, c.client(i), "/grow/")
		if !slices.EqualFunc(got, want, func(a, b *storev1.KeyValue) bool { return proto.Equal(a, b) }) {
			t.Fatalf("node %d holds %d keys unlike node 1's %d", i+1, len(got), len(want))
		}
	}
	// Node 2 leads shard 0 and node 3 shard 1 when they are removed.
	for sh, target := range []int{1, 2} {
		wait.Until(ctx, t, fmt.Sprintf("node %d to lead shard %d", target+1, sh), func() (bool, string) {
			l, ok := c.leader(uint32(sh))
			if ok && l == target {
				return true, ""
			}
			c.Node(0).NodeHost().RequestLeaderTransfer(uint64(sh)+1, uint64(target)+1)
			return false, fmt.Sprintf("leader %d", l+1)
		})
	}
	w.gate.Unlock()

	for _, id := range []uint64{2, 3} {
		list, err := admin.ListMembers(ctx, &storev1.ListMembersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sameMembers(t, list.GetMembers(), shards, members...)
		if i := slices.IndexFunc(list.GetMembers(), func(m *storev1.Member) bool { return m.GetNodeId() == id }); len(list.GetMembers()[i].GetLeads()) == 0 {
			t.Fatalf("node %d leads no shard before its removal: %v", id, list.GetMembers())
		}
		before := w.acked()
		resp, err := admin.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: id})
		if err != nil {
			t.Fatalf("remove node %d: %v", id, err)
		}
		members = slices.DeleteFunc(members, func(m uint64) bool { return m == id })
		sameMembers(t, resp.GetMembers(), shards, members...)
		c.StopNode(int(id) - 1)
		w.waitFor(ctx, t, before+20)
	}
	acks := w.stop(t)
	t.Logf("%d commits acknowledged while the cell grew and shrank", len(acks))
	for _, a := range acks {
		g := c.get(ctx, 0, a.key, false)
		if string(g.GetKv().GetValue()) != a.value || g.GetKv().GetVersion() != a.revision {
			t.Fatalf("acknowledged %s=%q@%d, read %v", a.key, a.value, a.revision, g.GetKv())
		}
	}

	for name, tc := range map[string]struct {
		call func() error
		code codes.Code
	}{
		"re-add a removed node": {func() error {
			_, err := admin.AddMember(ctx, &storev1.AddMemberRequest{NodeId: 2, RaftAddress: "127.0.0.1:1"})
			return err
		}, codes.FailedPrecondition},
		"remove the serving node": {func() error {
			_, err := admin.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: 1})
			return err
		}, codes.FailedPrecondition},
		"another shard count": {func() error {
			_, err := admin.AddMember(ctx, &storev1.AddMemberRequest{NodeId: 9, RaftAddress: "127.0.0.1:1", ShardCount: 3})
			return err
		}, codes.FailedPrecondition},
		"no address": {func() error {
			_, err := admin.AddMember(ctx, &storev1.AddMemberRequest{NodeId: 9})
			return err
		}, codes.InvalidArgument},
	} {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}

// sameMembers checks that members are exactly ids, each holding every
// shard and voting in every shard.
func sameMembers(t *testing.T, members []*storev1.Member, shards uint32, ids ...uint64) {
	t.Helper()
	var got []uint64
	for _, m := range members {
		got = append(got, m.GetNodeId())
		if len(m.GetShards()) != int(shards) {
			t.Errorf("member %d holds shards %v, want all %d", m.GetNodeId(), m.GetShards(), shards)
		}
		if len(m.GetNonVoting()) != 0 {
			t.Errorf("member %d does not vote in shards %v", m.GetNodeId(), m.GetNonVoting())
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("members %v, want %v", got, ids)
	}
}

// A new member votes only once it has caught up. Nodes 2 and 3 are added
// to a one-node cell while their processes are down: each add fails with
// an error naming the shard and saying the node is left non-voting,
// ListMembers shows it so, and the writer's commits go on (a second voter
// that is down would stop them). Node 3 is removed while non-voting. Once
// node 2 runs, having missed every commit since (its shards catch up by
// snapshot), the repeated add returns with it a voter of every shard, and
// when the leader applied each promotion node 2 had already applied what
// the leader had when node 2 started. A restart starts its replicas as
// non-voting again, and they turn into voters as they load the membership.
func TestNewMemberVotesOnceCaughtUp(t *testing.T) {
	const shards = 2
	c := startCell(t, 1, shards, func(nc *node.Config) {
		nc.SnapshotEntries = 20
		nc.CompactionOverhead = 5
	})
	ctx, cancel := context.WithTimeout(t.Context(), 3*testTimeout)
	defer cancel()
	admin := c.admin(0)
	w := startWriter(ctx, c)
	w.waitFor(ctx, t, 20)

	// Nodes 2 and 3 start as joining nodes, empty, and stop at once.
	addrs := map[int]string{}
	for range 2 {
		i, err := c.StartNewNode()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = c.Node(i).RaftAddr()
		c.StopNode(i)
	}
	for _, i := range []int{1, 2} {
		id := uint64(i + 1)
		before := w.acked()
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := admin.AddMember(actx, &storev1.AddMemberRequest{NodeId: id, RaftAddress: addrs[i], ShardCount: shards})
		acancel()
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "shard 0: node "+fmt.Sprint(id)+" has not caught up") ||
			!strings.Contains(err.Error(), "non-voting member of shards [0 1]") {
			t.Fatalf("add node %d while it is down: %v, want DEADLINE_EXCEEDED saying it is left non-voting", id, err)
		}
		t.Logf("add node %d while it is down: %v", id, status.Convert(err).Message())
		w.waitFor(ctx, t, before+50)
		t.Logf("%d commits during and after the failed add of node %d", w.acked()-before, id)
		list, err := admin.ListMembers(ctx, &storev1.ListMembersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		m := list.GetMembers()[slices.IndexFunc(list.GetMembers(), func(m *storev1.Member) bool { return m.GetNodeId() == id })]
		if want := []uint32{0, 1}; !slices.Equal(m.GetShards(), want) || !slices.Equal(m.GetNonVoting(), want) || len(m.GetLeads()) != 0 {
			t.Fatalf("node %d after the failed add: %v, want a non-voting member of shards 0 and 1", id, m)
		}
	}
	resp, err := admin.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: 3})
	if err != nil {
		t.Fatalf("remove non-voting node 3: %v", err)
	}
	if got := resp.GetMembers(); len(got) != 2 || got[1].GetNodeId() != 2 || len(got[1].GetNonVoting()) != shards {
		t.Fatalf("members after removing node 3: %v", got)
	}

	// Node 2 starts, far behind: the leader's logs were compacted since.
	var leaderApplied [shards]uint64
	for sh := range uint32(shards) {
		leaderApplied[sh] = c.Node(0).StateMachine(sh).AppliedIndex()
		if lr, err := c.Node(0).NodeHost().GetLogReader(uint64(sh) + 1); err != nil {
			t.Fatal(err)
		} else if first, _ := lr.GetRange(); first <= 1 {
			t.Fatalf("shard %d: the log still starts at %d; the test needs it compacted", sh, first)
		}
	}
	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	newcomer, leader := c.Node(1), c.Node(0).NodeHost()
	added := make(chan error, 1)
	go func() {
		_, err := admin.AddMember(ctx, &storev1.AddMemberRequest{NodeId: 2, RaftAddress: addrs[1], ShardCount: shards})
		added <- err
	}()
	// Watch the leader's replicas apply the promotions.
	var promotedAt [shards]uint64
	wait.Until(ctx, t, "node 2's promotions", func() (bool, string) {
		info := leader.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
		done := 0
		for _, si := range info.ShardInfoList {
			sh := si.ShardID - 1
			if _, voter := si.Replicas[2]; voter && promotedAt[sh] == 0 {
				var applied uint64
				if m := newcomer.StateMachine(uint32(sh)); m != nil {
					applied = m.AppliedIndex()
				}
				promotedAt[sh] = max(1, applied)
			}
			if promotedAt[sh] != 0 {
				done++
			}
		}
		return done == shards, fmt.Sprintf("node 2 applied %v when promoted", promotedAt)
	})
	for sh := range shards {
		if promotedAt[sh] < leaderApplied[sh] {
			t.Errorf("shard %d: node 2 was promoted having applied index %d, short of the %d the leader had applied when it started",
				sh, promotedAt[sh], leaderApplied[sh])
		}
		if m := newcomer.StateMachine(uint32(sh)); m.SnapshotsRecovered() == 0 {
			t.Errorf("shard %d: node 2 caught up without a snapshot", sh)
		}
	}
	t.Logf("node 2 started when the leader had applied %v, was promoted having applied %v", leaderApplied, promotedAt)
	if err := <-added; err != nil {
		t.Fatalf("repeated add of node 2: %v", err)
	}
	list, err := admin.ListMembers(ctx, &storev1.ListMembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sameMembers(t, list.GetMembers(), shards, 1, 2)
	// The add returns once the cell's majority has the promotions; node 2's
	// own replicas apply them from the leader's next message on.
	wait.Until(ctx, t, "node 2 to see itself voting", func() (bool, string) {
		nv := newcomer.NonVoting()
		return len(nv) == 0, fmt.Sprintf("node 2 sees itself non-voting in shards %v", nv)
	})

	// Restarted, node 2 votes again, and can lead.
	c.StopNode(1)
	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	for sh := range uint32(shards) {
		wait.Until(ctx, t, fmt.Sprintf("restarted node 2 to lead shard %d", sh), func() (bool, string) {
			if l, ok := c.leader(sh); ok && l == 1 {
				return true, ""
			}
			c.Node(0).NodeHost().RequestLeaderTransfer(uint64(sh)+1, 2)
			return false, fmt.Sprintf("node 2 non-voting in %v", c.Node(1).NonVoting())
		})
	}
	before := w.acked()
	w.waitFor(ctx, t, before+20)
	acks := w.stop(t)
	for _, a := range acks {
		g := c.get(ctx, 0, a.key, false)
		if string(g.GetKv().GetValue()) != a.value || g.GetKv().GetVersion() != a.revision {
			t.Fatalf("acknowledged %s=%q@%d, read %v", a.key, a.value, a.revision, g.GetKv())
		}
	}
}

// staleRange lists prefix from a node's own replicas.
func staleRange(ctx context.Context, t *testing.T, c storev1.StoreClient, prefix string) []*storev1.KeyValue {
	t.Helper()
	var kvs []*storev1.KeyValue
	var cont []byte
	for {
		resp, err := c.Range(ctx, &storev1.RangeRequest{Prefix: prefix, Continuation: cont, Stale: true})
		if err != nil {
			t.Fatalf("stale range %s: %v", prefix, err)
		}
		kvs = append(kvs, resp.GetKvs()...)
		if cont = resp.GetContinuation(); len(cont) == 0 {
			return kvs
		}
	}
}

// writer commits one new key after another through node 1 until stopped,
// keeping the acknowledged ones. Holding gate pauses it.
type writer struct {
	gate sync.Mutex
	mu   sync.Mutex
	acks []ack
	at   []time.Time // when each ack came
	err  error
	done chan struct{}
	quit chan struct{}
}

func startWriter(ctx context.Context, c *testCluster) *writer {
	w := &writer{done: make(chan struct{}), quit: make(chan struct{})}
	client := c.client(0) // the test adds clients meanwhile
	go func() {
		defer close(w.done)
		for n := 0; ; n++ {
			select {
			case <-w.quit:
				return
			default:
			}
			w.gate.Lock()
			key, value := fmt.Sprintf("/grow/w%05d", n), fmt.Sprint(n)
			req := &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(key, value))}}
			var resp *storev1.CommitResponse
			err := c.retry(ctx, func(ctx context.Context, _ int) (err error) {
				resp, err = client.Commit(ctx, req)
				return err
			})
			w.gate.Unlock()
			if err == nil && !resp.GetGroups()[0].GetCommitted() {
				err = fmt.Errorf("commit of %s failed: %v", key, resp.GetGroups()[0].GetFailure())
			}
			w.mu.Lock()
			if err != nil {
				w.err = err
			} else {
				g := resp.GetGroups()[0]
				w.acks = append(w.acks, ack{key: key, value: value, shard: g.GetShard(), revision: g.GetRevision()})
				w.at = append(w.at, time.Now())
			}
			w.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return w
}

func (w *writer) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks)
}

// longestGap returns the longest time between two acknowledgements from
// the from-th one on.
func (w *writer) longestGap(from int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gap time.Duration
	for i := max(from, 1); i < len(w.at); i++ {
		gap = max(gap, w.at[i].Sub(w.at[i-1]))
	}
	return gap
}

// waitFor waits until n commits are acknowledged, failing if the writer
// failed.
func (w *writer) waitFor(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	wait.Until(ctx, t, fmt.Sprintf("%d acknowledged commits", n), func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			t.Fatalf("writer: %v", w.err)
		}
		return len(w.acks) >= n, fmt.Sprintf("%d so far", len(w.acks))
	})
}

// stop stops the writer and returns the acknowledged commits.
func (w *writer) stop(t *testing.T) []ack {
	t.Helper()
	close(w.quit)
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
	return w.acks
}
