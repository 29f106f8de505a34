package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Three store processes started with --leader-preference 2: node 2 comes
// to lead every shard, as every node sees it.
func TestStoreLeaderPreference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	const shards = 3
	cell := startStores(t, buildTroupe(t), t.TempDir(), 3, shards, func(int) []string { return []string{"--leader-preference", "2"} })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	wait.Until(ctx, t, "node 2 to lead every shard", func() error {
		for i, c := range cell.clients {
			st, err := c.Status(ctx, &storev1.StatusRequest{})
			if err != nil {
				return err
			}
			for _, sh := range st.GetShards() {
				if sh.GetLeaderReplicaId() != 2 {
					return fmt.Errorf("node %d sees shard %d led by node %d", i+1, sh.GetShard(), sh.GetLeaderReplicaId())
				}
			}
		}
		return nil
	})
}
