package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	// The Raft address must be known before the node starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func testConfig(t *testing.T, dir string) Config {
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.RaftAddr = freeAddr(t)
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.LogDBMemory = "tiny"
	cfg.Shards = 2
	return cfg
}

// startReady starts a node of cfg, waits until it is ready and returns
// it, with a plaintext client of its store and a context that ends with
// the test (or after 30 s); the test's cleanup closes both.
func startReady(t *testing.T, cfg Config) (*Node, storev1.StoreClient, context.Context) {
	t.Helper()
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return n, storev1.NewStoreClient(conn), ctx
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A one-node cell: health turns ready, commits count in the metrics, and
// the cell refuses to restart with another shard count.
func TestNodeHealthMetricsAndShardGuard(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, "http://"+n.HTTPAddr()+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := storev1.NewStoreClient(conn)
	put := func(txn, key string, cond uint64) *storev1.CommitResponse {
		resp, err := c.Commit(ctx, &storev1.CommitRequest{TxnId: txn, Groups: []*storev1.Group{{
			Conditions: []*storev1.Condition{{Key: key, Version: cond}},
			Ops:        []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte("v")}}}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	put("a", "/machines/m1", 0)
	if put("b", "/machines/m1", 0).GetGroups()[0].GetCommitted() {
		t.Fatal("second create of /machines/m1 committed")
	}
	_, metrics := httpGet(t, "http://"+n.HTTPAddr()+"/metrics")
	for _, want := range []string{
		`troupe_store_commits_total{result="committed"} 1`,
		`troupe_store_commits_total{result="conflict"} 1`,
		`troupe_store_group_failures_total{reason="version_mismatch"} 1`,
		`troupe_store_commit_seconds_count 2`,
		`troupe_raft_is_leader{shard="0"} 1`,
		`troupe_raft_has_leader{shard="1"} 1`,
		`troupe_raft_log_entries{shard="0"}`,
		`troupe_store_change_log_revisions{shard=`,
		`troupe_raft_snapshots_recovered_total{shard="0"} 0`,
		"\ntroupe_node_cpu_bound ",
		`troupe_storage_bytes_written_total{kind="wal",shard="0"}`,
		`troupe_storage_bytes_written_total{kind="compaction",shard="1"}`,
		`troupe_storage_l0_files{shard="0"}`,
		`troupe_storage_disk_bytes{shard="1"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	st, err := c.Status(ctx, &storev1.StatusRequest{})
	if err != nil || st.GetShardCount() != 2 || len(st.GetShards()) != 2 || st.GetGrpcAddress() != n.GRPCAddr() {
		t.Fatalf("status: %v %v", st, err)
	}
	n.Close()

	cfg.Shards = 3
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "created with 2 shards") {
		t.Fatalf("restart with 3 shards: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"node id":    {func(c *Config) { c.NodeID = 0 }, "NodeID"},
		"raft addr":  {func(c *Config) { c.RaftAddr = "nowhere" }, "RaftAddr"},
		"shards":     {func(c *Config) { c.Shards = 0 }, "Shards"},
		"timing":     {func(c *Config) { c.ElectionRTT = 2 }, "ElectionRTT"},
		"logdb":      {func(c *Config) { c.LogDBMemory = "huge" }, "LogDBMemory"},
		"members":    {func(c *Config) { c.InitialMembers = map[uint64]string{2: "127.0.0.1:1"} }, "does not include this node"},
		"member adr": {func(c *Config) { c.InitialMembers = map[uint64]string{1: "127.0.0.1:1"} }, "gives node 1 the address"},
		"join":       {func(c *Config) { c.Join = true; c.InitialMembers = map[uint64]string{1: c.RaftAddr} }, "joining node takes no InitialMembers"},
		"inflight":   {func(c *Config) { c.Shards = 8; c.Server.MaxInflight = 4 }, "MaxInflight"},
		"limits":     {func(c *Config) { c.Server.Limits.MaxValueBytes = 0 }, "MaxValueBytes"},
	} {
		c := DefaultConfig()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, tc.want)
		}
	}
}

func TestParseMembers(t *testing.T) {
	m, err := ParseMembers("1=127.0.0.1:7101, 3=127.0.0.1:7103,2=127.0.0.1:7102")
	if err != nil || len(m) != 3 || m[3] != "127.0.0.1:7103" {
		t.Fatalf("ParseMembers: %v %v", m, err)
	}
	for _, bad := range []string{"1", "0=127.0.0.1:1", "x=127.0.0.1:1", "1=nohost", "1=127.0.0.1:1,1=127.0.0.1:2"} {
		if _, err := ParseMembers(bad); err == nil {
			t.Errorf("ParseMembers(%q) accepted", bad)
		}
	}
	if m, err := ParseMembers(""); err != nil || len(m) != 0 {
		t.Errorf("empty: %v %v", m, err)
	}
}

// Concurrent commits to one shard are group-committed: each still gets its
// own outcome and revision, exactly once, and they take fewer Raft entries
// than commits. The shard's proposer is held (as many entries counted in
// flight as it may have) until all the commits are queued, so that they are known
// to be waiting together when it goes on: they take one entry per
// maxBatchProposals.
func TestGroupCommit(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Shards = 1
	n, c, ctx := startReady(t, cfg)
	const count = 200
	req := func(i int) *storev1.CommitRequest {
		k := "/machines/m" + strconv.Itoa(i)
		return &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{
			Ops: []*storev1.Op{{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: 1, Min: 0, Max: 10}}}},
		}}}
	}
	// A first commit, alone, so that the applied index counts from the
	// log's end: it passes over the entries Raft itself wrote at start.
	first, err := c.Commit(ctx, req(-1))
	if err != nil || !first.GetGroups()[0].GetCommitted() {
		t.Fatalf("first commit: %v %v", first, err)
	}
	base := first.GetGroups()[0].GetRevision()
	// Hold the proposer: count as many entries in flight as it may have
	// (the first commit's entry leaves just after it answered).
	pr := n.backend.proposers[0]
	wait.Until(ctx, t, "the first commit's entry out of flight", func() (bool, string) {
		return pr.inFlight.CompareAndSwap(0, maxBatchesInFlight), fmt.Sprintf("%d in flight", pr.inFlight.Load())
	})
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			for range maxBatchesInFlight {
				pr.finish()
			}
		})
	}
	defer release()
	before := n.StateMachine(0).AppliedIndex()
	revs := make([]uint64, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			resp, err := c.Commit(ctx, req(i))
			if err == nil && !resp.GetGroups()[0].GetCommitted() {
				err = fmt.Errorf("not committed: %v", resp.GetGroups()[0])
			}
			if err == nil {
				revs[i] = resp.GetGroups()[0].GetRevision()
			}
			errs[i] = err
		})
	}
	// The proposer took the first commit and waits for a slot; the others
	// wait in its queue.
	wait.Until(ctx, t, fmt.Sprintf("%d commits queued behind the held proposer", count-1), func() (bool, string) {
		return len(pr.queue) == count-1, fmt.Sprintf("%d queued", len(pr.queue))
	})
	release()
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range count {
		if errs[i] != nil {
			t.Fatalf("commit %d: %v", i, errs[i])
		}
		if revs[i] <= base || revs[i] > base+count || seen[revs[i]] {
			t.Fatalf("commit %d at revision %d: revisions must be %d..%d, each once", i, revs[i], base+1, base+count)
		}
		seen[revs[i]] = true
	}
	entries := n.StateMachine(0).AppliedIndex() - before
	t.Logf("%d commits in %d Raft entries", count, entries)
	if want := uint64((count + maxBatchProposals - 1) / maxBatchProposals); entries > want {
		t.Fatalf("%d commits queued together took %d Raft entries, want %d (at most %d commits each)", count, entries, want, maxBatchProposals)
	}
	resp, err := c.Commit(ctx, req(7))
	if err != nil || !resp.GetDuplicate() || resp.GetGroups()[0].GetRevision() != revs[7] {
		t.Fatalf("retry of commit 7: %v %v, want the first outcome at %d", resp, err, revs[7])
	}
	g, err := c.Get(ctx, &storev1.GetRequest{Key: "/machines/m7"})
	if err != nil || string(g.GetKv().GetValue()) != "1" {
		t.Fatalf("counter after a retried add: %v %v", g, err)
	}
}
