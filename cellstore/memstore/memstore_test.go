package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func TestCommitGetListDedupe(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(100, 0)
	s := New(func() time.Time { return now }, time.Minute)
	var observed []uint64 // versions of the changes, in commit order
	s.Observe(func(cs *storev1.ChangeSet) {
		for _, ev := range cs.GetEvents() {
			observed = append(observed, ev.GetKv().GetVersion())
		}
	})
	req := &storev1.CommitRequest{TxnId: "t1", Groups: []*storev1.Group{{
		Ops: []*storev1.Op{{Op: &storev1.Op_Add{Add: &storev1.Add{Key: "/alloc/m1/cpu", Delta: 5, Min: 0, Max: 10}}}},
	}}}
	first, err := s.Commit(ctx, req)
	if err != nil || !first.GetGroups()[0].GetCommitted() || first.GetDuplicate() {
		t.Fatalf("first commit: %v %v", first, err)
	}
	again, err := s.Commit(ctx, req)
	if err != nil || !again.GetDuplicate() || again.GetGroups()[0].GetRevision() != first.GetGroups()[0].GetRevision() {
		t.Fatalf("retry: %v %v", again, err)
	}
	kv, err := s.Get(ctx, "/alloc/m1/cpu")
	if err != nil || string(kv.GetValue()) != "5" || kv.GetVersion() != 1 {
		t.Fatalf("get: %v %v", kv, err)
	}
	if kv, err := s.Get(ctx, "/absent"); kv != nil || err != nil {
		t.Fatalf("absent key: %v %v", kv, err)
	}
	// After the window the same txn_id applies again.
	now = now.Add(2 * time.Minute)
	if out, _ := s.Commit(ctx, req); out.GetDuplicate() {
		t.Fatal("txn remembered past its window")
	}
	if _, err := s.Commit(ctx, &storev1.CommitRequest{Groups: []*storev1.Group{{
		Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/alloc/m2/cpu", Value: []byte("1")}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	kvs, cursor, err := s.List(ctx, "/alloc/")
	if err != nil || len(kvs) != 2 || kvs[0].GetKey() != "/alloc/m1/cpu" || string(kvs[0].GetValue()) != "10" {
		t.Fatalf("list: %v %v", kvs, err)
	}
	c, err := keyspace.DecodeCursor(cursor, 1)
	if err != nil || c[0] != 3 {
		t.Fatalf("cursor %v %v, want revision 3", c, err)
	}
	// The duplicate wrote nothing, so it was not observed.
	if fmt.Sprint(observed) != "[1 2 3]" {
		t.Fatalf("observed changes at %v, want [1 2 3]", observed)
	}
}
