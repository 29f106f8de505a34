package bench

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TestTroupeSession runs CheckSystem and a short cas run against a real
// 3-replica cell.
func TestTroupeSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-replica cell")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cell, err := localstore.Start(ctx, localstore.Config{Dir: t.TempDir(), Replicas: 3, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cell.Close()
	cfg := DefaultTroupeConfig(cell.Endpoints())
	if cfg.TLS, err = cell.Admin(); err != nil {
		t.Fatal(err)
	}
	sys, err := DialTroupe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := sys.WaitReady(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := CheckSystem(ctx, sys, "/check"); err != nil {
		t.Fatal(err)
	}
	conn := storev1.NewStoreClient(sys.conns[0])
	got, err := conn.Get(ctx, &storev1.GetRequest{Key: "/check/alloc/m1/cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if v := string(got.GetKv().GetValue()); v != "2" {
		t.Errorf("counter after two placements is %q, want \"2\"", v)
	}

	p := Params{Clients: 8, Keys: 20, ValueSize: 16, Machines: 4, Seed: 1}
	for _, name := range []string{WorkloadCAS, WorkloadPlace} {
		w, err := NewWorkload(name, p)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(ctx, sys, w, Config{MaxOps: 5})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Ops != int64(p.Clients*5) {
			t.Errorf("%s: %d ops, want %d", name, res.Ops, p.Clients*5)
		}
	}
}

// TestTroupePlace4 runs place4 on a real one-replica cell of 4 shards,
// where every placement is a cross-shard transaction: all commit.
func TestTroupePlace4(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 4-shard cell")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := NewWorkload(WorkloadPlace4, Params{Clients: 8, Keys: 1, ValueSize: 16, Machines: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sys, closeSys, err := StartLocalTroupe(ctx, t.TempDir(), 1, ShardsFor(w, 1), Secure, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := closeSys(); err != nil {
			t.Error(err)
		}
	}()
	if sys.Shards() != 4 {
		t.Fatalf("cell has %d shards, want 4", sys.Shards())
	}
	res, err := Run(ctx, sys, w, Config{MaxOps: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 40 || res.Conflicts != 0 {
		t.Errorf("%d ops, %d conflicts; want 40 committed", res.Ops, res.Conflicts)
	}
}
