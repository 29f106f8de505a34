package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Every node of a three-node cell publishes its record: ListMembers
// gives each member's gRPC address and version, and each node's Status
// its version. A restart with nothing changed writes nothing; one that
// finds its record changed (an admin's doing here) writes it again. No
// client but an admin may write a record, a store node's certificate
// included; a record under another node's key counts for nothing; a
// removed member's record is deleted.
func TestNodeRecords(t *testing.T) {
	const version = "v9.8.7-test"
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := localstore.Start(ctx, localstore.Config{Dir: t.TempDir(), Replicas: 3, Shards: 3,
		Tune: func(nc *node.Config) { nc.Version = version }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eps := c.Endpoints()
	conn := func(id pki.Identity, i int) *grpc.ClientConn {
		creds, err := c.Credentials(id)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(eps[i], grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	adminID := pki.Identity{Role: pki.RoleAdmin, Name: "test"}
	admin, store := storev1.NewAdminClient(conn(adminID, 0)), storev1.NewStoreClient(conn(adminID, 0))

	members := func() map[uint64]*storev1.Member {
		t.Helper()
		resp, err := admin.ListMembers(ctx, &storev1.ListMembersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]*storev1.Member{}
		for _, m := range resp.GetMembers() {
			out[m.GetNodeId()] = m
		}
		return out
	}
	// localstore.Start returns once every node has published its record.
	ms := members()
	for i := range 3 {
		m, n := ms[uint64(i+1)], c.Node(i)
		if m.GetGrpcAddress() != n.GRPCAddr() || m.GetVersion() != version || m.GetRaftAddress() != n.RaftAddr() {
			t.Errorf("member %d: %v, want gRPC %s, Raft %s, version %s", i+1, m, n.GRPCAddr(), n.RaftAddr(), version)
		}
		st, err := storev1.NewStoreClient(conn(adminID, i)).Status(ctx, &storev1.StatusRequest{})
		if err != nil || st.GetVersion() != version || st.GetGrpcAddress() != n.GRPCAddr() {
			t.Errorf("status of node %d: %v %v, want version %s at %s", i+1, st, err, version, n.GRPCAddr())
		}
	}

	get := func(key string) *storev1.KeyValue {
		t.Helper()
		resp, err := store.Get(ctx, &storev1.GetRequest{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetKv()
	}
	record := func(kv *storev1.KeyValue) *storev1.NodeRecord {
		t.Helper()
		rec := &storev1.NodeRecord{}
		if err := proto.Unmarshal(kv.GetValue(), rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	put := func(cl storev1.StoreClient, key string, rec *storev1.NodeRecord) error {
		b, err := proto.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Commit(ctx, &storev1.CommitRequest{TxnId: fmt.Sprintf("put-%s-%d", key, time.Now().UnixNano()), Groups: []*storev1.Group{{
			Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: b}}}},
		}}})
		return err
	}

	// A restart with nothing changed leaves the record as it was.
	key2 := storev1.NodeRecordKey(2)
	before := get(key2)
	restart := func(i int) {
		t.Helper()
		c.StopNode(i)
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
		if err := c.Node(i).WaitReady(ctx); err != nil { // it has published by then
			t.Fatal(err)
		}
	}
	restart(1)
	if after := get(key2); !proto.Equal(after, before) {
		t.Errorf("node 2's record after a restart with nothing changed: %v, want %v unchanged", after, before)
	}
	// A record found changed is written again.
	forged := &storev1.NodeRecord{NodeId: 2, GrpcAddress: "forged:1", RaftAddress: c.Node(1).RaftAddr(), Version: "v0"}
	if err := put(store, key2, forged); err != nil {
		t.Fatalf("an admin's write of a record: %v", err)
	}
	restart(1)
	if rec := record(get(key2)); rec.GetGrpcAddress() != c.Node(1).GRPCAddr() || rec.GetVersion() != version {
		t.Errorf("node 2's record after a restart that found it changed: %v", rec)
	}

	// Clients other than admins may not write records, a store node's
	// certificate included; viewers read them.
	for _, id := range []pki.Identity{
		{Role: pki.RoleStore, Name: "2"}, {Role: pki.RoleController, Name: "c"}, {Role: pki.RoleScheduler, Name: "s"},
		{Role: pki.RoleAgent, Name: "m1"}, {Role: pki.RoleViewer, Name: "v"},
	} {
		err := put(storev1.NewStoreClient(conn(id, 0)), storev1.NodeRecordKey(3), forged)
		if !storeerr.Is(err, storeerr.PermissionDenied) {
			t.Errorf("%s writing node 3's record: %v, want PERMISSION_DENIED", id, err)
		}
	}
	if _, err := storev1.NewStoreClient(conn(pki.Identity{Role: pki.RoleViewer, Name: "v"}, 0)).Get(ctx, &storev1.GetRequest{Key: key2}); err != nil {
		t.Errorf("a viewer reading a record: %v", err)
	}
	// A record under another node's key is not that node's.
	if err := put(store, storev1.NodeRecordKey(7), &storev1.NodeRecord{NodeId: 1, GrpcAddress: "forged:1"}); err != nil {
		t.Fatal(err)
	}
	if m := members()[1]; m.GetGrpcAddress() != c.Node(0).GRPCAddr() {
		t.Errorf("member 1 after a record under key 7 named it: %v", m)
	}

	// A removed member's record is deleted.
	if _, err := admin.RemoveMember(ctx, &storev1.RemoveMemberRequest{NodeId: 3}); err != nil {
		t.Fatal(err)
	}
	if kv := get(storev1.NodeRecordKey(3)); kv != nil {
		t.Errorf("node 3's record after its removal: %v", record(kv))
	}
	wait.Until(ctx, t, "members 1 and 2 alone, with their records", func() error {
		ms := members()
		if len(ms) != 2 || ms[1].GetGrpcAddress() == "" || ms[2].GetGrpcAddress() == "" {
			return fmt.Errorf("members %v", ms)
		}
		return nil
	})
}
