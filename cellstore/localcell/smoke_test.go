package localcell_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/troupe-cluster/troupe/cellstore/localcell"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := localcell.Start(ctx, localcell.Config{Dir: t.TempDir(), Replicas: 3, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := grpc.NewClient(c.Endpoints()[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := storev1.NewStoreClient(conn)
	start := time.Now()
	resp, err := cl.Commit(ctx, &storev1.CommitRequest{TxnId: "t1", Groups: []*storev1.Group{{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/machines/m1", Value: []byte("x")}}}}}}})
	t.Log(resp, err, time.Since(start))
	g, err := cl.Get(ctx, &storev1.GetRequest{Key: "/machines/m1"})
	t.Log(g, err)
	st, err := cl.Status(ctx, &storev1.StatusRequest{})
	t.Log(st, err)
}
