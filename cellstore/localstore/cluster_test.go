package localstore_test

// Integration tests of the cell store: several store nodes in one process
// on loopback, driven through the gRPC API only (plus the nodes' Raft and
// state machine figures where a test needs to know who leads or how far a
// replica got). No test sleeps: every wait polls a condition under a
// deadline.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TestCellAPI runs the API tests that can share one cell: each works under
// its own key prefix.
func TestCellAPI(t *testing.T) {
	c := startCell(t, 3, 2, func(nc *node.Config) {
		nc.Server.ProgressInterval = 20 * time.Millisecond
		nc.Server.Limits.MaxValueBytes = 4096
	})
	t.Run("CommitAnywhereReadEverywhere", func(t *testing.T) { testCommitAnywhereReadEverywhere(t, c) })
	t.Run("ExactlyOnce", func(t *testing.T) { testExactlyOnce(t, c) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, c) })
	t.Run("CrossShard", func(t *testing.T) { testCrossShard(t, c) })
	t.Run("ProgressNotifications", func(t *testing.T) { testProgressNotifications(t, c) })
	t.Run("WatchFromRangeCursor", func(t *testing.T) { testWatchFromRangeCursor(t, c) })
}

// Commits sent to any node succeed, every node then reads them
// linearizably, and Range pages over a prefix spread on all shards return
// every key once, in order.
func testCommitAnywhereReadEverywhere(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	latest := map[string]ack{}
	shardsHit := map[uint32]bool{}
	retries := 0
	defer func() {
		if retries > 0 {
			t.Logf("%d commit attempts had to be retried", retries)
		}
	}()
	commitOn := func(i int, req *storev1.CommitRequest) *storev1.CommitResponse {
		t.Helper()
		resp, attempts := c.commitTo(ctx, i, req)
		retries += attempts - 1
		for gi, g := range resp.GetGroups() {
			if !g.GetCommitted() {
				t.Fatalf("commit %s on node %d: group %d failed: %v", req.GetTxnId(), i, gi, g.GetFailure())
			}
		}
		return resp
	}
	// 40 puts and then 10 overwrites, each sent to the next node in turn
	// (retried there, never on another node).
	for n := range 50 {
		k := fmt.Sprintf("/r/k%03d", n%40)
		v := fmt.Sprintf("v%d", n)
		i := n % c.Size()
		g := commitOn(i, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(k, v))}})
		gr := g.GetGroups()[0]
		if gr.GetShard() != c.router.Shard(k) || gr.GetRevision() == 0 {
			t.Fatalf("put %s: shard %d revision %d, want shard %d and a revision", k, gr.GetShard(), gr.GetRevision(), c.router.Shard(k))
		}
		if prev, ok := latest[k]; ok && prev.shard == gr.GetShard() && gr.GetRevision() <= prev.revision {
			t.Fatalf("put %s: revision %d not after the key's previous %d", k, gr.GetRevision(), prev.revision)
		}
		latest[k] = ack{key: k, value: v, shard: gr.GetShard(), revision: gr.GetRevision()}
		shardsHit[gr.GetShard()] = true
	}
	if len(shardsHit) != int(c.shards) {
		t.Fatalf("the keys hit shards %v; the test wants all %d", shardsHit, c.shards)
	}
	// One request with a group on each shard (not atomic): each group
	// commits on its own shard.
	k0, k1 := c.keyOnShard("/r/x%d", 0), c.keyOnShard("/r/x%d", 1)
	resp := commitOn(2, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(k0, "x0")), group(putOp(k1, "x1"))}})
	for gi, k := range []string{k0, k1} {
		g := resp.GetGroups()[gi]
		if g.GetShard() != uint32(gi) {
			t.Fatalf("group %d (%s) on shard %d, want %d", gi, k, g.GetShard(), gi)
		}
		latest[k] = ack{key: k, value: "x" + strconv.Itoa(gi), shard: g.GetShard(), revision: g.GetRevision()}
	}
	// A delete, through yet another node.
	gone := "/r/k007"
	resp = commitOn(1, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(deleteOp(gone))}})
	delete(latest, gone)

	// Linearizable reads on every node see every acknowledged write.
	for i := range c.Size() {
		for _, a := range latest {
			g := c.get(ctx, i, a.key, false)
			if string(g.GetKv().GetValue()) != a.value || g.GetKv().GetVersion() != a.revision {
				t.Fatalf("node %d: %s = %q@%d, want %q@%d", i, a.key, g.GetKv().GetValue(), g.GetKv().GetVersion(), a.value, a.revision)
			}
			if g.GetRevision() < a.revision {
				t.Fatalf("node %d: read %s at shard revision %d, before its write at %d", i, a.key, g.GetRevision(), a.revision)
			}
		}
		if g := c.get(ctx, i, gone, false); g.GetKv() != nil || g.GetRevision() < resp.GetGroups()[0].GetRevision() {
			t.Fatalf("node %d: deleted %s reads as %v", i, gone, g)
		}
	}

	// Range in pages of several sizes, on every node: every key once, in
	// key order, with its value and version.
	want := make([]string, 0, len(latest))
	for k := range latest {
		want = append(want, k)
	}
	sort.Strings(want)
	for i := range c.Size() {
		for _, limit := range []uint32{1, 7, uint32(len(want)), 0} {
			kvs, cursor := c.rangeAll(ctx, i, "/r/", limit)
			var got []string
			for _, kv := range kvs {
				got = append(got, kv.GetKey())
				a := latest[kv.GetKey()]
				if string(kv.GetValue()) != a.value || kv.GetVersion() != a.revision {
					t.Fatalf("node %d range limit %d: %s = %q@%d, want %q@%d", i, limit, kv.GetKey(), kv.GetValue(), kv.GetVersion(), a.value, a.revision)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("node %d range limit %d:\n got %v\nwant %v", i, limit, got, want)
			}
			if cur := c.decodeCursor(cursor); !covers(cur, lastRevisions(c.shards, slices.Collect(maps.Values(latest)))) {
				t.Fatalf("node %d range cursor %v is behind the writes it read", i, cur)
			}
		}
	}
	// A prefix that fixes the shard key reads one shard only.
	kvs, _ := c.rangeAll(ctx, 0, k0, 0)
	if len(kvs) != 1 || kvs[0].GetKey() != k0 {
		t.Fatalf("range %s: %v", k0, kvs)
	}
}

// The same request sent twice (to two nodes, and concurrently to all) is
// applied once; the repeats say duplicate and carry the first revisions. A
// txn_id reused for other content is refused.
func testExactlyOnce(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	ctr := "/counters/once"
	// counter reads key on every node; they must agree.
	counter := func(key string) string {
		t.Helper()
		var v string
		for i := range c.Size() {
			got := string(c.get(ctx, i, key, false).GetKv().GetValue())
			if i > 0 && got != v {
				t.Fatalf("%s is %q on node 1 but %q on node %d", key, v, got, i+1)
			}
			v = got
		}
		return v
	}
	sameRevisions := func(a, b *storev1.CommitResponse) {
		t.Helper()
		if len(a.GetGroups()) != len(b.GetGroups()) {
			t.Fatalf("%d groups vs %d", len(a.GetGroups()), len(b.GetGroups()))
		}
		for i := range a.GetGroups() {
			ga, gb := a.GetGroups()[i], b.GetGroups()[i]
			if !ga.GetCommitted() || !gb.GetCommitted() || ga.GetRevision() != gb.GetRevision() || ga.GetShard() != gb.GetShard() {
				t.Fatalf("group %d: first %v, repeat %v", i, ga, gb)
			}
		}
	}

	// Sequential repeat on another node. (The first answer is not checked
	// for duplicate=false: if an attempt, the client's or the server's own,
	// timed out after the entry was applied, the answer that comes is the
	// remembered one. The counter shows what was applied.)
	req := &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp(ctr, 1, 0, 1000))}}
	first, _ := c.commitTo(ctx, 0, req)
	again, _ := c.commitTo(ctx, 1, req)
	if !again.GetDuplicate() {
		t.Fatalf("repeat on another node: duplicate=false: %v", again)
	}
	sameRevisions(first, again)
	if v := counter(ctr); v != "1" {
		t.Fatalf("counter after a commit and its repeat = %q, want 1", v)
	}

	// Concurrent copies to every node: one applies, the others are
	// duplicates of it.
	req = &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp(ctr, 10, 0, 1000))}}
	resps := make([]*storev1.CommitResponse, 2*c.Size())
	errs := make([]error, len(resps))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for j := range resps {
		wg.Go(func() {
			<-start
			resps[j], _, errs[j] = c.tryCommitTo(ctx, j%c.Size(), req)
		})
	}
	close(start)
	wg.Wait()
	applied := 0
	for j := range resps {
		if errs[j] != nil {
			t.Fatalf("concurrent copy %d: %v", j, errs[j])
		}
		if !resps[j].GetDuplicate() {
			applied++
		}
		sameRevisions(resps[0], resps[j])
	}
	if applied > 1 {
		t.Fatalf("%d of %d concurrent copies say they applied, want at most 1", applied, len(resps))
	}
	if v := counter(ctr); v != "11" {
		t.Fatalf("counter after concurrent copies = %q, want 11", v)
	}

	// A request with a group on each shard: both shards remember it.
	a, b := c.keyOnShard("/counters/a%d", 0), c.keyOnShard("/counters/b%d", 1)
	req = &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp(a, 5, 0, 100)), group(addOp(b, 7, 0, 100))}}
	first, _ = c.commitTo(ctx, 2, req)
	again, _ = c.commitTo(ctx, 0, req)
	if !again.GetDuplicate() {
		t.Fatalf("two-shard repeat: duplicate=false: %v", again)
	}
	sameRevisions(first, again)
	if va, vb := counter(a), counter(b); va != "5" || vb != "7" {
		t.Fatalf("two-shard counters = %q, %q, want 5, 7", va, vb)
	}

	// The first txn_id again, for another delta: refused, nothing applied.
	reuse := &storev1.CommitRequest{TxnId: req.GetTxnId(), Groups: []*storev1.Group{group(addOp(a, 50, 0, 100)), group(addOp(b, 70, 0, 100))}}
	got, _ := c.commitTo(ctx, 1, reuse)
	for i, g := range got.GetGroups() {
		if g.GetCommitted() || g.GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_TXN_ID_REUSED {
			t.Fatalf("reused txn_id, group %d: %v, want TXN_ID_REUSED", i, g)
		}
	}
	if va, vb := counter(a), counter(b); va != "5" || vb != "7" {
		t.Fatalf("counters after a reused txn_id = %q, %q, want 5, 7", va, vb)
	}
}

// A group spanning both shards, sent to a follower of both, commits on
// both (every replica then reads it), and an atomic request across the
// shards with a failing group writes nothing.
func testCrossShard(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a, b := c.keyOnShard("/machines/xa%d", 0), c.keyOnShard("/machines/xb%d", 1)
	resp := c.commit(ctx, 2, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(a, "A"), putOp(b, "B"))}})
	g := resp.GetGroups()[0]
	if !g.GetCommitted() || len(g.GetShardRevisions()) != 2 {
		t.Fatalf("cross-shard group: %v", g)
	}
	for i := range 3 {
		if ga, gb := c.get(ctx, i, a, false), c.get(ctx, i, b, false); string(ga.GetKv().GetValue()) != "A" || string(gb.GetKv().GetValue()) != "B" ||
			ga.GetKv().GetVersion() != g.GetShardRevisions()[0] || gb.GetKv().GetVersion() != g.GetShardRevisions()[1] {
			t.Fatalf("node %d reads %v and %v after %v", i, ga.GetKv(), gb.GetKv(), g)
		}
	}
	resp = c.commit(ctx, 0, &storev1.CommitRequest{TxnId: c.txnID(), Atomic: true, Groups: []*storev1.Group{
		group(putOp(a, "atomic")), {Conditions: []*storev1.Condition{{Key: b, Version: 1 << 40}}, Ops: []*storev1.Op{putOp(b, "atomic")}}}})
	if resp.GetGroups()[0].GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_ABORTED ||
		resp.GetGroups()[1].GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
		t.Fatalf("atomic request across shards: %v", resp)
	}
	if ga := c.get(ctx, 1, a, false); string(ga.GetKv().GetValue()) != "A" {
		t.Fatalf("%s after the aborted request: %v", a, ga.GetKv())
	}
}

// Malformed and refused requests come back with their gRPC codes; an
// oversize value fails its own group only.
func testErrors(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a, b := c.keyOnShard("/machines/a%d", 0), c.keyOnShard("/machines/b%d", 1)
	absent := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if g := c.get(ctx, 0, k, false); g.GetKv() != nil {
				t.Fatalf("%s was written: %v", k, g.GetKv())
			}
		}
	}
	expectCode := func(what string, want codes.Code, req *storev1.CommitRequest) {
		t.Helper()
		_, err := c.client(1).Commit(ctx, req)
		if status.Code(err) != want {
			t.Fatalf("%s: got %v, want %v", what, err, want)
		}
	}

	expectCode("empty txn_id", codes.InvalidArgument, &storev1.CommitRequest{Groups: []*storev1.Group{group(putOp(a, "1"))}})
	expectCode("no groups", codes.InvalidArgument, &storev1.CommitRequest{TxnId: c.txnID()})
	expectCode("empty key", codes.InvalidArgument, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp("", "1"))}})
	absent(a, b)

	// Oversize value: that group fails TOO_LARGE, the other commits.
	big := strings.Repeat("x", 4097)
	ok := c.keyOnShard("/machines/ok%d", 0)
	resp, _ := c.commitTo(ctx, 2, &storev1.CommitRequest{TxnId: c.txnID(),
		Groups: []*storev1.Group{group(putOp(a, big)), group(putOp(ok, "fits"))}})
	if g := resp.GetGroups()[0]; g.GetCommitted() || g.GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_TOO_LARGE || g.GetFailure().GetKey() != a {
		t.Fatalf("oversize group: %v, want TOO_LARGE on %s", g, a)
	}
	if g := resp.GetGroups()[1]; !g.GetCommitted() || g.GetRevision() == 0 {
		t.Fatalf("group beside the oversize one: %v, want committed", g)
	}
	if g := c.get(ctx, 1, ok, false); string(g.GetKv().GetValue()) != "fits" {
		t.Fatalf("%s = %v, want fits", ok, g.GetKv())
	}
	absent(a)

	// The same in an atomic request: everything aborts.
	other := c.keyOnShard("/machines/other%d", 0)
	resp, _ = c.commitTo(ctx, 0, &storev1.CommitRequest{TxnId: c.txnID(), Atomic: true,
		Groups: []*storev1.Group{group(putOp(other, "1")), group(putOp(a, big))}})
	if g := resp.GetGroups()[0]; g.GetCommitted() || g.GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_ABORTED {
		t.Fatalf("atomic partner of an oversize group: %v, want ABORTED", g)
	}
	if g := resp.GetGroups()[1]; g.GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_TOO_LARGE {
		t.Fatalf("atomic oversize group: %v, want TOO_LARGE", g)
	}
	absent(other, a)

	// A stale condition is a result carrying the current version.
	cur := c.get(ctx, 0, ok, false).GetKv().GetVersion()
	resp, _ = c.commitTo(ctx, 1, &storev1.CommitRequest{TxnId: c.txnID(),
		Groups: []*storev1.Group{{Conditions: []*storev1.Condition{{Key: ok, Version: cur - 1}}, Ops: []*storev1.Op{putOp(ok, "no")}}}})
	if f := resp.GetGroups()[0].GetFailure(); f.GetReason() != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH || f.GetCurrentVersion() != cur {
		t.Fatalf("stale condition: %v, want VERSION_MISMATCH at %d", f, cur)
	}
}

// An idle watch gets progress notifications, and their cursor follows the
// commits of other prefixes on the watched shard.
func testProgressNotifications(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	m := strings.TrimPrefix(c.keyOnShard("/machines/p%d", 0), "/machines/")
	prefix := "/bindings/" + m + "/"
	if sh := c.router.PrefixShards(prefix); len(sh) != 1 || sh[0] != 0 {
		t.Fatalf("prefix %s is on shards %v, want [0]", prefix, sh)
	}
	w := c.watch(ctx, 1, prefix, nil)
	resp := w.mustNext(ctx, t)
	if !resp.GetProgress() || len(resp.GetEvents()) != 0 {
		t.Fatalf("first response of an idle watch: %v, want a progress notification", resp)
	}
	start := c.decodeCursor(resp.GetCursor())

	// Commits elsewhere on shard 0 (another machine) move the cursor but
	// send no events.
	var last ack
	for n := range 3 {
		last = c.put(ctx, n%c.Size(), c.keyOnShard("/machines/q%d", 0), strconv.Itoa(n))
	}
	if last.shard != 0 || last.revision <= start[0] {
		t.Fatalf("commit on shard %d at revision %d; watch started at %d", last.shard, last.revision, start[0])
	}
	for {
		resp := w.mustNext(ctx, t)
		if !resp.GetProgress() || len(resp.GetEvents()) != 0 {
			t.Fatalf("watch on %s got %v, want progress only", prefix, resp)
		}
		cur := c.decodeCursor(resp.GetCursor())
		if cur[0] < start[0] {
			t.Fatalf("cursor went back from %d to %d", start[0], cur[0])
		}
		if cur[0] >= last.revision {
			t.Logf("progress cursor reached revision %d of shard 0", cur[0])
			return
		}
	}
}

// A watch from a Range's cursor sees exactly the changes after the read; a
// watch without cursor sees the changes after it started.
func testWatchFromRangeCursor(t *testing.T, c *testCluster) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const prefix = "/wr/"
	for n := range 6 {
		c.put(ctx, n%c.Size(), fmt.Sprintf("/wr/k%d", n), "before")
	}
	c.waitConverged(ctx)
	kvs, cursor := c.rangeAll(ctx, 2, prefix, 0)
	if len(kvs) != 6 {
		t.Fatalf("range: %d keys, want 6", len(kvs))
	}

	// After the read: new keys, an overwrite and a delete.
	var later []ack
	var want []event
	for n := 4; n < 10; n++ {
		a := c.put(ctx, n%c.Size(), fmt.Sprintf("/wr/k%d", n), "after")
		later, want = append(later, a), append(want, a.putEvent())
	}
	del := c.commit(ctx, 1, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(deleteOp("/wr/k0"))}}).GetGroups()[0]
	later = append(later, ack{shard: del.GetShard(), revision: del.GetRevision()})
	want = append(want, event{typ: storev1.EventType_EVENT_TYPE_DELETE, key: "/wr/k0", version: del.GetRevision(), shard: del.GetShard()})

	w := c.watch(ctx, 0, prefix, cursor)
	got := c.collectUntil(ctx, w, lastRevisions(c.shards, later))
	sameEventsPerShard(t, got, want)
	w.cancel()

	// Without a cursor: from the node's revisions when the watch starts,
	// which the first progress notification shows.
	c.waitConverged(ctx)
	w = c.watch(ctx, 1, prefix, nil)
	if resp := w.mustNext(ctx, t); !resp.GetProgress() || len(resp.GetEvents()) != 0 {
		t.Fatalf("first response of a new watch: %v, want progress", resp)
	}
	later, want = nil, nil
	for n := 0; n < 3; n++ {
		a := c.put(ctx, 2, fmt.Sprintf("/wr/k%d", n+1), "latest")
		later, want = append(later, a), append(want, a.putEvent())
	}
	got = c.collectUntil(ctx, w, lastRevisions(c.shards, later))
	sameEventsPerShard(t, got, want)
}

// sameEventsPerShard checks that got holds the events of want, each once,
// and in want's order on each shard.
func sameEventsPerShard(t *testing.T, got, want []event) {
	t.Helper()
	split := func(evs []event) map[uint32][]event {
		out := map[uint32][]event{}
		for _, e := range evs {
			out[e.shard] = append(out[e.shard], e)
		}
		return out
	}
	g, w := split(got), split(want)
	for sh := range g {
		if _, ok := w[sh]; !ok {
			t.Errorf("shard %d: unexpected events %v", sh, g[sh])
		}
	}
	for sh, we := range w {
		if !slices.Equal(g[sh], we) {
			t.Errorf("shard %d events:\n got %v\nwant %v", sh, g[sh], we)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// When a shard's leader stops, another node takes over within seconds,
// every acknowledged commit survives, and the old leader catches up when it
// comes back.
func TestLeaderFailure(t *testing.T) {
	c := startCell(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	latest := map[string]ack{}
	record := func(a ack) { latest[a.key] = a }
	for n := range 20 {
		record(c.put(ctx, n%c.Size(), fmt.Sprintf("/lf/k%02d", n%12), fmt.Sprintf("pre-%d", n)))
	}
	old := c.waitLeader(ctx, 0)
	oldTerm := c.Node(old).Status().GetShards()[0].GetTerm()
	c.StopNode(old)
	stopped := time.Now()
	// Note when a running node first leads shard 0, alongside the commit
	// below (only reads of the cell happen meanwhile).
	elected := make(chan time.Duration, 1)
	go func() {
		if wait.Poll(ctx, "a leader of shard 0", func() bool { _, ok := c.leader(0); return ok }) == nil {
			elected <- time.Since(stopped)
		}
	}()

	// Commit to shard 0 through the others with short attempts until one
	// is acknowledged: that is when a new leader serves.
	c.attempt = 100 * time.Millisecond
	k := c.keyOnShard("/lf/k%02d", 0)
	record(c.put(ctx, (old+1)%c.Size(), k, "first-after-stop"))
	failover := time.Since(stopped)
	c.attempt = 0
	var election time.Duration
	select {
	case election = <-elected:
	case <-ctx.Done():
		t.Fatal("no new leader seen")
	}
	nl := c.waitLeader(ctx, 0)
	st := c.Node(nl).Status().GetShards()[0]
	t.Logf("shard 0: leader node %d (term %d) stopped; node %d leads (term %d) %v later; first commit acknowledged after %v (100ms attempts)",
		old+1, oldTerm, nl+1, st.GetTerm(), election, failover)
	if nl == old || st.GetTerm() <= oldTerm {
		t.Fatalf("shard 0 is led by node %d in term %d; the old leader was node %d in term %d", nl+1, st.GetTerm(), old+1, oldTerm)
	}
	if failover > 10*time.Second {
		t.Errorf("failover took %v", failover)
	}
	for n := range 20 {
		record(c.put(ctx, old+1+n, fmt.Sprintf("/lf/k%02d", n%12), fmt.Sprintf("post-%d", n)))
	}

	checkAll := func(nodes []int) {
		t.Helper()
		for _, i := range nodes {
			for _, a := range latest {
				g := c.get(ctx, i, a.key, false)
				if string(g.GetKv().GetValue()) != a.value || g.GetKv().GetVersion() != a.revision {
					t.Fatalf("node %d: %s = %q@%d, want %q@%d", i, a.key, g.GetKv().GetValue(), g.GetKv().GetVersion(), a.value, a.revision)
				}
			}
		}
	}
	checkAll(c.running())

	// The old leader returns and converges.
	if err := c.StartNode(old); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitConverged(ctx)
	for _, i := range c.running() {
		if got, want := c.revisions(i), c.revisions(nl); !slices.Equal(got, want) {
			t.Fatalf("node %d revisions %v, new leader %v", i, got, want)
		}
	}
	checkAll([]int{old})
	// And serves commits again.
	record(c.put(ctx, old, k, "after-restart"))
	checkAll(c.running())
}

// Stopping and restarting every replica brings back the same keys,
// versions and shard revisions, and the dedupe table.
func TestRestartAllReplicas(t *testing.T) {
	c := startCell(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var reqs []*storev1.CommitRequest
	var resps []*storev1.CommitResponse
	send := func(i int, groups ...*storev1.Group) {
		req := &storev1.CommitRequest{TxnId: c.txnID(), Groups: groups}
		reqs, resps = append(reqs, req), append(resps, c.commit(ctx, i, req))
	}
	for n := range 30 {
		send(n%c.Size(), group(putOp(fmt.Sprintf("/ra/k%02d", n%12), fmt.Sprintf("v%d", n))))
	}
	send(0, group(deleteOp("/ra/k03")))
	send(1, group(addOp("/ra/ctr", 3, 0, 10)), group(addOp("/ra/ctr2", 4, 0, 10)))
	c.waitConverged(ctx)

	type snapshot struct {
		kvs  []*storev1.KeyValue
		revs []uint64
	}
	take := func(i int) snapshot {
		kvs, _ := c.rangeAll(ctx, i, "/", 5)
		return snapshot{kvs, c.revisions(i)}
	}
	var before []snapshot
	for i := range c.Size() {
		before = append(before, take(i))
		if !slices.Equal(before[i].revs, before[0].revs) {
			t.Fatalf("node %d revisions %v, node 1 %v", i, before[i].revs, before[0].revs)
		}
	}
	if want := 13 + c.Size(); len(before[0].kvs) != want { // and the nodes' records
		t.Fatalf("%d keys before the restart, want %d", len(before[0].kvs), want)
	}

	for i := range c.Size() {
		c.StopNode(i)
	}
	for i := range c.Size() {
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// A node reopens at its last flush and replays the rest of its Raft
	// log: wait (bounded) for the revisions it had.
	wait.Until(ctx, t, "the revisions from before the restart", func() (bool, string) {
		for i := range c.Size() {
			for sh := range c.shards {
				if c.Node(i).StateMachine(sh) == nil {
					return false, fmt.Sprintf("node %d has not opened shard %d", i, sh)
				}
			}
			if got := c.revisions(i); !slices.Equal(got, before[i].revs) {
				return false, fmt.Sprintf("node %d revisions %v, %v before", i, got, before[i].revs)
			}
		}
		return true, ""
	})
	c.waitConverged(ctx)
	for i := range c.Size() {
		after := take(i)
		if !slices.Equal(after.revs, before[i].revs) {
			t.Fatalf("node %d revisions %v after the restart, %v before", i, after.revs, before[i].revs)
		}
		if len(after.kvs) != len(before[i].kvs) {
			t.Fatalf("node %d: %d keys after the restart, %d before", i, len(after.kvs), len(before[i].kvs))
		}
		for j, kv := range after.kvs {
			b := before[i].kvs[j]
			if kv.GetKey() != b.GetKey() || string(kv.GetValue()) != string(b.GetValue()) || kv.GetVersion() != b.GetVersion() {
				t.Fatalf("node %d after the restart: %v, before: %v", i, kv, b)
			}
		}
	}
	// The dedupe table came back: a retry is still recognised.
	for _, j := range []int{5, len(reqs) - 1} {
		again := c.commit(ctx, 2, reqs[j])
		if !again.GetDuplicate() {
			t.Fatalf("retry of %s after the restart was applied again", reqs[j].GetTxnId())
		}
		for gi, g := range again.GetGroups() {
			if g.GetRevision() != resps[j].GetGroups()[gi].GetRevision() {
				t.Fatalf("retry of %s: group %d revision %d, first %d", reqs[j].GetTxnId(), gi, g.GetRevision(), resps[j].GetGroups()[gi].GetRevision())
			}
		}
	}
	// Revisions go on from where they were.
	a := c.put(ctx, 0, "/ra/k00", "after")
	if a.revision != before[0].revs[a.shard]+1 {
		t.Fatalf("first commit after the restart at revision %d, want %d", a.revision, before[0].revs[a.shard]+1)
	}
}

// A replica that misses more than the leader keeps in its Raft log catches
// up from a snapshot, and serves the latest state and its change log.
func TestLaggingReplicaCatchesUpBySnapshot(t *testing.T) {
	c := startCell(t, 3, 2, func(nc *node.Config) {
		nc.SnapshotEntries = 10
		nc.CompactionOverhead = 5
	})
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const prefix = "/sn/"
	for n := range 10 {
		c.put(ctx, n%c.Size(), fmt.Sprintf("/sn/k%03d", n), "early")
	}
	c.waitConverged(ctx)
	// Lag a node that leads no shard, so that no election gets in the way.
	lag := -1
	for i := range c.Size() {
		leads := false
		for sh := range c.shards {
			if l, _ := c.leader(sh); l == i {
				leads = true
			}
		}
		if !leads {
			lag = i
			break
		}
	}
	if lag < 0 {
		t.Fatal("every node leads a shard")
	}
	_, cursor := c.rangeAll(ctx, lag, prefix, 0)
	lagApplied := make([]uint64, c.shards)
	for sh := range c.shards {
		lagApplied[sh] = c.Node(lag).StateMachine(sh).AppliedIndex()
	}
	c.StopNode(lag)

	latest := map[string]ack{}
	var acks []ack
	others := c.running()
	for n := range 200 {
		a := c.put(ctx, others[n%len(others)], fmt.Sprintf("/sn/k%03d", n%50), fmt.Sprintf("v%d", n))
		latest[a.key], acks = a, append(acks, a)
	}
	leaders := make([]int, c.shards)
	for sh := range c.shards {
		leaders[sh] = c.waitLeader(ctx, sh)
		first, _ := c.Node(leaders[sh]).NodeHost().GetLogReader(uint64(sh) + 1)
		lo, hi := first.GetRange()
		t.Logf("shard %d: leader's Raft log holds [%d, %d]; the stopped node applied up to %d", sh, lo, hi, lagApplied[sh])
		if lo <= lagApplied[sh]+1 {
			t.Fatalf("shard %d: the leader still has entry %d the stopped node needs; the test needs it compacted", sh, lagApplied[sh]+1)
		}
	}

	if err := c.StartNode(lag); err != nil {
		t.Fatal(err)
	}
	n := c.Node(lag)
	wait.Until(ctx, t, "the restarted node to catch up", func() (bool, string) {
		for sh := range c.shards {
			m, lm := n.StateMachine(sh), c.Node(leaders[sh]).StateMachine(sh)
			if m == nil || m.AppliedIndex() < lm.AppliedIndex() {
				applied := uint64(0)
				if m != nil {
					applied = m.AppliedIndex()
				}
				return false, fmt.Sprintf("shard %d: applied index %d, leader's %d", sh, applied, lm.AppliedIndex())
			}
		}
		return true, ""
	})
	for sh := range c.shards {
		m := n.StateMachine(sh)
		if m.SnapshotsRecovered() == 0 {
			t.Errorf("shard %d: the restarted node caught up without a snapshot", sh)
		}
		if lr := c.Node(leaders[sh]).StateMachine(sh).Revision(); m.Revision() != lr {
			t.Errorf("shard %d: revision %d, leader %d", sh, m.Revision(), lr)
		}
	}
	// Stale reads on the caught-up node see the latest values.
	for _, a := range latest {
		g := c.get(ctx, lag, a.key, true)
		if string(g.GetKv().GetValue()) != a.value || g.GetKv().GetVersion() != a.revision {
			t.Fatalf("stale read on node %d: %s = %q@%d, want %q@%d", lag, a.key, g.GetKv().GetValue(), g.GetKv().GetVersion(), a.value, a.revision)
		}
	}
	// Its change log came with the snapshot: a watch from before the stop
	// replays every change.
	want := make([]event, 0, len(acks))
	for _, a := range acks {
		want = append(want, a.putEvent())
	}
	w := c.watch(ctx, lag, prefix, cursor)
	sameEventsPerShard(t, c.collectUntil(ctx, w, lastRevisions(c.shards, acks)), want)
}

// A watch resumed from a saved cursor on another node, after the leader
// changed, delivers exactly the changes the first watch had not.
func TestWatchResumesAcrossLeaderChange(t *testing.T) {
	c := startCell(t, 3, 2, func(nc *node.Config) { nc.Server.ProgressInterval = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const prefix = "/seq/"
	var acks []ack
	commit := func(n, via int) {
		acks = append(acks, c.put(ctx, via, fmt.Sprintf("/seq/k%d", n%7), fmt.Sprintf("%03d", n)))
	}
	leader := c.waitLeader(ctx, 0)
	_, cursor := c.rangeAll(ctx, leader, prefix, 0)

	// The first watch runs on the leader and reads part of the sequence.
	w := c.watch(ctx, leader, prefix, cursor)
	for n := range 15 {
		commit(n, n%c.Size())
	}
	var got []event
	for len(got) < 8 {
		resp := w.mustNext(ctx, t)
		got = append(got, eventsOf(resp)...)
		if len(resp.GetEvents()) > 0 {
			cursor = resp.GetCursor()
		}
	}
	w.cancel()
	t.Logf("first watch: %d events, cursor %v", len(got), c.decodeCursor(cursor))
	for n := 15; n < 20; n++ {
		commit(n, n%c.Size())
	}

	c.StopNode(leader)
	for n := 20; n < 40; n++ {
		commit(n, n%c.Size())
	}
	nl := c.waitLeader(ctx, 0)
	other := -1
	for _, i := range c.running() {
		if i != leader {
			other = i
		}
	}
	t.Logf("leader of shard 0 was node %d, now node %d; resuming on node %d", leader+1, nl+1, other+1)

	w = c.watch(ctx, other, prefix, cursor)
	got = append(got, c.collectUntil(ctx, w, lastRevisions(c.shards, acks))...)
	// Nothing more comes: the next progress notification arrives with no
	// event before it.
	for {
		resp := w.mustNext(ctx, t)
		if len(resp.GetEvents()) > 0 {
			t.Fatalf("extra events after the sequence: %v", eventsOf(resp))
		}
		if resp.GetProgress() {
			break
		}
	}
	want := make([]event, 0, len(acks))
	for _, a := range acks {
		want = append(want, a.putEvent())
	}
	sameEventsPerShard(t, got, want)
}

// A cursor older than the change log gets OUT_OF_RANGE with the oldest
// cursor the store can resume from, and resuming from that works.
func TestCompactedCursor(t *testing.T) {
	c := startCell(t, 3, 2, func(nc *node.Config) {
		nc.Server.LogRetention = 5
		// Keep the in-memory rings from serving what the log dropped.
		nc.Watch.RingRevisions = 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const prefix = "/cp/"
	for n := range 2 {
		c.put(ctx, n, fmt.Sprintf("/cp/k%d", n), "early")
	}
	_, old := c.rangeAll(ctx, 0, prefix, 0)
	oldCur := c.decodeCursor(old)
	var acks []ack
	for n := range 24 {
		acks = append(acks, c.put(ctx, n%c.Size(), fmt.Sprintf("/cp/k%d", n%6), fmt.Sprintf("v%d", n)))
	}
	c.waitConverged(ctx)

	// From the old cursor: OUT_OF_RANGE with a CompactedDetail.
	w := c.watch(ctx, 1, prefix, old)
	resp, err := w.next(ctx, t)
	if err == nil {
		t.Fatalf("watch from compacted cursor %v sent %v", oldCur, resp)
	}
	st := status.Convert(err)
	if st.Code() != codes.OutOfRange {
		t.Fatalf("watch from compacted cursor %v: %v, want OUT_OF_RANGE", oldCur, err)
	}
	var detail *storev1.CompactedDetail
	for _, d := range st.Details() {
		if cd, ok := d.(*storev1.CompactedDetail); ok {
			detail = cd
		}
	}
	if detail == nil {
		t.Fatalf("OUT_OF_RANGE without CompactedDetail: %v", st.Details())
	}
	sh := detail.GetShard()
	oc := c.decodeCursor(detail.GetOldestCursor())
	t.Logf("%s; oldest cursor %v", st.Message(), oc)
	if sh >= c.shards || detail.GetRequestedRevision() != oldCur[sh]+1 ||
		detail.GetOldestRevision() <= detail.GetRequestedRevision() || oc[sh] != detail.GetOldestRevision()-1 {
		t.Fatalf("compacted detail %v (oldest cursor %v) for cursor %v", detail, oc, oldCur)
	}
	// Every shard was compacted past the old cursor (both got 12 of the 24
	// changes, retention is 5), so the oldest cursor must move them all.
	for s := range c.shards {
		if oc[s] <= oldCur[s] {
			t.Fatalf("oldest cursor %v leaves shard %d at the compacted %d", oc, s, oldCur[s])
		}
	}

	// From the oldest cursor: every change after it, at once.
	var want []event
	for _, a := range acks {
		if a.revision > oc[a.shard] {
			want = append(want, a.putEvent())
		}
	}
	w = c.watch(ctx, 2, prefix, detail.GetOldestCursor())
	sameEventsPerShard(t, c.collectUntil(ctx, w, lastRevisions(c.shards, acks)), want)
}

// With one proposal slot per node, concurrent commits are refused with
// RESOURCE_EXHAUSTED, refused ones are not applied, acknowledged ones all
// are, and refusals leave no slot taken.
func TestOverload(t *testing.T) {
	c := startCell(t, 3, 1, func(nc *node.Config) { nc.Server.MaxInflight = 1 })
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var (
		mu      sync.Mutex
		acked   []ack
		refused []string
		unknown int // attempts whose outcome is unknown (deadline passed)
	)
	for round := 0; len(refused) == 0; round++ {
		if round == 20 {
			t.Fatal("20 rounds of concurrent commits and none was refused")
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for n := range 5 {
					k := fmt.Sprintf("/ov/r%d-g%d-n%d", round, g, n)
					actx, cancel := context.WithTimeout(ctx, attemptTimeout)
					resp, err := c.client(0).Commit(actx, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(k, k))}})
					cancel()
					mu.Lock()
					switch {
					case status.Code(err) == codes.ResourceExhausted:
						refused = append(refused, k)
					case status.Code(err) == codes.DeadlineExceeded:
						unknown++
					case err != nil:
						t.Errorf("commit %s: %v", k, err)
					case !resp.GetGroups()[0].GetCommitted():
						t.Errorf("commit %s: %v", k, resp.GetGroups()[0])
					default:
						gr := resp.GetGroups()[0]
						acked = append(acked, ack{key: k, value: k, shard: gr.GetShard(), revision: gr.GetRevision()})
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	t.Logf("%d commits acknowledged, %d refused, %d with unknown outcome", len(acked), len(refused), unknown)
	if len(acked) == 0 {
		t.Fatal("no commit got through")
	}
	for _, a := range acked {
		g := c.get(ctx, 1, a.key, false)
		if string(g.GetKv().GetValue()) != a.value || g.GetKv().GetVersion() != a.revision {
			t.Fatalf("acknowledged %s reads %v, want %q@%d", a.key, g.GetKv(), a.value, a.revision)
		}
	}
	for _, k := range refused {
		if g := c.get(ctx, 1, k, false); g.GetKv() != nil {
			t.Fatalf("refused %s was applied: %v", k, g.GetKv())
		}
	}

	// Refusals left no slot taken: the idle node takes a commit.
	a := "/ov/after"
	var err error
	req := &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(a, "2"))}}
	var resp *storev1.CommitResponse
	for attempt := 0; attempt == 0 || status.Code(err) == codes.DeadlineExceeded; attempt++ {
		if attempt == 5 {
			t.Fatalf("one-shard commit: %d attempts timed out", attempt)
		}
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		resp, err = c.client(0).Commit(actx, req)
		cancel()
	}
	if err != nil || !resp.GetGroups()[0].GetCommitted() {
		t.Fatalf("idle node refuses a commit after the refusals: %v, %v", resp, err)
	}
}
