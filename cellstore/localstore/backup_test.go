package localstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A backup restored into a new cell holds exactly the backed-up state:
// every key with its value and version, each shard's revision, the change
// log (a watch from a cursor of the old cell resumes on the new one) and
// the remembered txn outcomes. The restored cell starts with one node and
// grows to three; the new members get the restored state too.
func TestBackupRestore(t *testing.T) {
	const shards = 4
	c := startCell(t, 3, shards, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	for n := range 60 {
		c.put(ctx, n, fmt.Sprintf("/b/k%02d", n%25), fmt.Sprint(n))
	}
	_, cursor := c.rangeAll(ctx, 0, "/b/k", 0)
	// What a watch from cursor must see, on the old cell and the new.
	var later []ack
	var wantEvents []event
	for n := range 30 {
		a := c.put(ctx, n, fmt.Sprintf("/b/k%02d", n%25), fmt.Sprintf("later-%d", n))
		later, wantEvents = append(later, a), append(wantEvents, a.putEvent())
	}
	for n := range 5 {
		key := fmt.Sprintf("/b/k%02d", n)
		del := c.commit(ctx, n, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(deleteOp(key))}}).GetGroups()[0]
		later = append(later, ack{shard: del.GetShard(), revision: del.GetRevision()})
		wantEvents = append(wantEvents, event{typ: storev1.EventType_EVENT_TYPE_DELETE, key: key, version: del.GetRevision(), shard: del.GetShard()})
		c.commit(ctx, n, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp(fmt.Sprintf("/b/n%d", n), 7, 0, 100))}})
	}
	retried := &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp("/b/once", "1"))}}
	first := c.commit(ctx, 0, retried)
	c.waitConverged(ctx)

	path := filepath.Join(t.TempDir(), "cell.backup")
	sum := backup(ctx, t, c.admin(1), path)
	if !slices.Equal(sum.Revisions, c.revisions(0)) {
		t.Fatalf("backup at revisions %v, the cell is at %v", sum.Revisions, c.revisions(0))
	}

	r := startCellWith(t, localstore.Config{Replicas: 1, Shards: shards, RestoreFrom: path})
	// The restored node, at new addresses, publishes its record again: one
	// commit on the records' shard. The records aside, the restored cell
	// holds the backed-up state.
	records := r.router.Shard(storev1.NodeRecordPrefix)
	wantRevs := slices.Clone(sum.Revisions)
	wantRevs[records]++
	if got := r.revisions(0); !slices.Equal(got, wantRevs) {
		t.Fatalf("restored cell at revisions %v, want %v", got, wantRevs)
	}
	want, _ := c.rangeAll(ctx, 0, "", 0)
	want = withoutRecords(want)
	same := func(got []*storev1.KeyValue) bool {
		return slices.EqualFunc(withoutRecords(got), want, func(a, b *storev1.KeyValue) bool { return proto.Equal(a, b) })
	}
	if got, _ := r.rangeAll(ctx, 0, "", 0); !same(got) {
		t.Fatalf("restored cell holds %v\nwant %v", got, want)
	}
	r.join(ctx)
	r.join(ctx)
	r.waitConverged(ctx)
	for i := 1; i <= 2; i++ {
		if got := staleRange(ctx, t, r.client(i), ""); !same(got) {
			t.Fatalf("node %d of the restored cell holds %d keys, want %d", i+1, len(got), len(want))
		}
	}
	// A cursor of the old cell resumes on the new one.
	w := r.watch(ctx, 0, "/b/k", cursor)
	sameEventsPerShard(t, r.collectUntil(ctx, w, lastRevisions(shards, later)), wantEvents)
	// A retry of a commit made before the backup gets its first outcome.
	again := r.commit(ctx, 1, retried)
	if !again.GetDuplicate() || again.GetGroups()[0].GetRevision() != first.GetGroups()[0].GetRevision() {
		t.Fatalf("retry on the restored cell: %v, first outcome %v", again, first)
	}
	// New commits continue the shard's revisions (on a shard without
	// records, which the new members wrote).
	// (The restored cell numbers its txn_ids afresh: this one must not be
	// the old cell's.)
	a := r.commit(ctx, 0, &storev1.CommitRequest{TxnId: "after-restore", Groups: []*storev1.Group{
		group(putOp(r.router.KeyOn((records+1)%shards, "/b/new%d"), "x"))}}).GetGroups()[0]
	if a.GetRevision() != sum.Revisions[a.GetShard()]+1 {
		t.Fatalf("first commit after restore at revision %d of shard %d, want %d", a.GetRevision(), a.GetShard(), sum.Revisions[a.GetShard()]+1)
	}

	// A damaged backup, and a directory in use, are refused.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	damaged := filepath.Join(t.TempDir(), "damaged.backup")
	if err := os.WriteFile(damaged, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := restoreFile(damaged, dir); err == nil {
		t.Fatal("a damaged backup restored")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a failed restore left %v behind", entries)
	}
	if _, err := restoreFile(path, filepath.Dir(path)); err == nil {
		t.Fatal("restored into a directory that is not empty")
	}
	// A restored directory starts a one-node cell, and nothing else.
	nc := node.DefaultConfig()
	nc.DataDir, nc.Shards = filepath.Join(t.TempDir(), "n"), shards
	nc.InitialMembers = map[uint64]string{1: nc.RaftAddr, 2: "127.0.0.1:1"}
	if _, err := restoreFile(path, nc.DataDir); err != nil {
		t.Fatal(err)
	}
	if n, err := node.Start(nc); err == nil || !strings.Contains(err.Error(), "restored cell") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("a restored node started a two-node cell: %v", err)
	}
}

// withoutRecords drops the store nodes' records from kvs.
func withoutRecords(kvs []*storev1.KeyValue) []*storev1.KeyValue {
	return slices.DeleteFunc(slices.Clone(kvs), func(kv *storev1.KeyValue) bool {
		return strings.HasPrefix(kv.GetKey(), storev1.NodeRecordPrefix)
	})
}

// backup writes a backup of the cell that admin serves to path.
func backup(ctx context.Context, t *testing.T, admin storev1.AdminClient, path string) *node.BackupSummary {
	t.Helper()
	stream, err := admin.Backup(ctx, &storev1.BackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := node.WriteBackup(f, stream.Recv)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	return sum
}

func restoreFile(path, dir string) (*node.BackupSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return node.Restore(dir, f, zap.NewNop())
}
