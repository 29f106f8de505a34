package server_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A store server over a MemBackend, as another package's test runs one:
// behind gRPC, in memory. Commits are read back and watched from a
// Range's cursor; Status says this node leads every shard.
func TestMemBackendServesGRPC(t *testing.T) {
	const shards = 2
	hub := watch.NewHub(watch.DefaultConfig(), shards)
	b, err := server.NewMemBackend(shards, hub)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := server.New(server.DefaultConfig(), b, hub, shards)
	if err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	storev1.RegisterStoreServer(gs, s)
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///mem", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := storev1.NewStoreClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	r, err := c.Range(ctx, &storev1.RangeRequest{Prefix: "/machines/"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, &storev1.WatchRequest{Prefix: "/machines/", Cursor: r.GetCursor()})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 8 { // on both shards
		k := fmt.Sprintf("/machines/m%d", i)
		want = append(want, k)
		resp, err := c.Commit(ctx, &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{Ops: []*storev1.Op{
			{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte("v")}}}}}}})
		if err != nil || !resp.GetGroups()[0].GetCommitted() {
			t.Fatalf("commit %s: %v %v", k, resp, err)
		}
	}
	if g, err := c.Get(ctx, &storev1.GetRequest{Key: "/machines/m3"}); err != nil || string(g.GetKv().GetValue()) != "v" {
		t.Fatalf("get: %v %v", g, err)
	}
	var watched []string
	for len(watched) < len(want) {
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("watch after %q: %v", watched, err)
		}
		for _, ev := range resp.GetEvents() {
			watched = append(watched, ev.GetKv().GetKey())
		}
	}
	slices.Sort(watched)
	if !slices.Equal(watched, want) {
		t.Fatalf("watched %q, want %q", watched, want)
	}
	st, err := c.Status(ctx, &storev1.StatusRequest{})
	if err != nil || st.GetShardCount() != shards || len(st.GetShards()) != shards {
		t.Fatalf("status: %v %v", st, err)
	}
	for _, ss := range st.GetShards() {
		if !ss.GetIsLeader() || ss.GetLeaderReplicaId() != st.GetReplicaId() || ss.GetRevision() == 0 {
			t.Fatalf("status of shard %d: %v; want led by this node, with the commits", ss.GetShard(), ss)
		}
	}
}
