package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TestPartitionIsolatesNode checks that the cell's network faults are
// real: a node whose Raft links are blocked misses the commits made
// meanwhile (its stale reads do not see them) and catches up once they
// are unblocked; a node killed and restarted comes back with its data.
// And that the cell serves TLS only: a plaintext client gets nothing.
func TestPartitionIsolatesNode(t *testing.T) {
	requireProcesses(t)
	cfg := DefaultClusterConfig(buildTroupe(t), t.TempDir())
	cfg.Shards = 1
	c, err := StartCluster(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := grpc.NewClient(c.Endpoints()[leader], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	_, err = storev1.NewStoreClient(plain).Status(pctx, &storev1.StatusRequest{})
	pcancel()
	plain.Close()
	if err == nil {
		t.Fatal("a plaintext client got the leader's status: the cell does not run with TLS")
	}
	follower := (leader + 1) % c.Size()
	commit := func(key string) {
		t.Helper()
		wait.Until(ctx, t, "the leader to commit "+key, func() bool {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			resp, err := c.direct[leader].Commit(cctx, &storev1.CommitRequest{TxnId: key, Groups: []*storev1.Group{{
				Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte("v")}}}},
			}}})
			return err == nil && resp.GetGroups()[0].GetCommitted()
		})
	}
	// staleRead reads key on node i alone (no Raft round).
	staleRead := func(i int, key string) (*storev1.KeyValue, error) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		resp, err := c.direct[i].Get(rctx, &storev1.GetRequest{Key: key, Stale: true})
		return resp.GetKv(), err
	}
	commit("/faults/before")
	wait.Until(ctx, t, "the follower to read /faults/before", func() bool { kv, err := staleRead(follower, "/faults/before"); return err == nil && kv != nil })

	for j := range c.Size() {
		if j != follower {
			c.RaftLink(follower, j).Block()
			c.RaftLink(j, follower).Block()
		}
	}
	for i := range 5 {
		commit(fmt.Sprintf("/faults/during%d", i))
	}
	for i := range 5 {
		if kv, err := staleRead(follower, fmt.Sprintf("/faults/during%d", i)); err != nil || kv != nil {
			t.Fatalf("the partitioned node reads during%d as %v, %v: want absent", i, kv, err)
		}
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "the follower to read /faults/during4", func() bool { kv, err := staleRead(follower, "/faults/during4"); return err == nil && kv != nil })

	if err := c.Kill(follower); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(follower); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "the follower to read /faults/during4", func() bool { kv, err := staleRead(follower, "/faults/during4"); return err == nil && kv != nil })
	if p := c.Problems(); len(p) > 0 {
		t.Errorf("problems: %q", p)
	}
}
