package localstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A removed node notices: its replicas apply their removal, it closes
// Removed() naming every shard, ends the watch open on it and answers
// every request, Status too, with NODE_REMOVED; and it refuses to start
// again on its data directory.
func TestRemovedNodeNotices(t *testing.T) {
	const shards = 2
	c := startCell(t, 3, shards, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	c.put(ctx, 0, "/removed/before", "v")
	removed := c.Node(2)
	w := c.watch(ctx, 2, "/removed/", nil)

	if _, err := c.admin(0).RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: 3}); err != nil {
		t.Fatalf("remove node 3: %v", err)
	}
	select {
	case <-removed.Removed():
	case <-ctx.Done():
		t.Fatal("node 3 did not notice its removal")
	}
	wait.Until(ctx, t, "node 3 to know it was removed from every shard", func() (bool, string) {
		got := removed.RemovedShards()
		return slices.Equal(got, []uint32{0, 1}), fmt.Sprintf("removed from shards %v", got)
	})
	const all = "this node was removed from the cell: node 3 was removed from the cell at "
	isRemoved := func(what string, err error) {
		t.Helper()
		want := "(its replicas of shards [0 1] applied the removal); it serves no more"
		if what == "the watch open" { // ended at the first shard's removal
			want = "applied the removal); it serves no more"
		}
		if !storeerr.Is(err, storeerr.NodeRemoved) || !strings.Contains(err.Error(), all) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s on the removed node: %v, want NODE_REMOVED", what, err)
		}
	}
	for {
		_, err := w.next(ctx, t)
		if err != nil {
			isRemoved("the watch open", err)
			break
		}
	}
	_, err := c.client(2).Get(ctx, &storev1.GetRequest{Key: "/removed/before"})
	isRemoved("get", err)
	_, err = c.client(2).Status(ctx, &storev1.StatusRequest{})
	isRemoved("status", err)
	_, err = c.admin(2).ListMembers(ctx, &storev1.ListMembersRequest{})
	isRemoved("list members", err)
	if err := removed.Healthy(); err == nil || !strings.HasPrefix(err.Error(), "removed: ") {
		t.Errorf("health of the removed node: %v", err)
	}
	// The others go on, and did not think themselves removed.
	c.put(ctx, 0, "/removed/after", "v")
	for i := range 2 {
		select {
		case <-c.Node(i).Removed():
			t.Errorf("node %d thinks itself removed", i+1)
		default:
		}
	}

	c.StopNode(2)
	err = c.StartNode(2)
	if err == nil || !strings.Contains(err.Error(), "holds node 3 of") || !strings.Contains(err.Error(), "the node was removed from the cell at ") ||
		!strings.Contains(err.Error(), "(shards [0 1]): it cannot serve again: remove the directory and join the cell afresh") {
		t.Fatalf("restart of the removed node: %v", err)
	}
}
