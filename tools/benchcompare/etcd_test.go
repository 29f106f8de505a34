package main

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// TestEtcdSession runs bench.CheckSystem and a short run of every
// workload against a real 3-member embedded cluster.
func TestEtcdSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, closeSys, err := startEtcd(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := closeSys(); err != nil {
			t.Error(err)
		}
	}()
	if err := bench.CheckSystem(ctx, sys, "/check"); err != nil {
		t.Fatal(err)
	}
	e := sys.(*etcdSystem)
	got, err := e.clients[0].Get(ctx, "/check/alloc/m1/cpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "2" {
		t.Errorf("counter after two placements: %v, want \"2\"", got.Kvs)
	}

	p := bench.Params{Clients: 8, Keys: 20, ValueSize: 16, Machines: 4, Seed: 1}
	ws, err := bench.ParseWorkloads(bench.DefaultWorkloads, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		res, err := bench.Run(ctx, sys, w, bench.Config{MaxOps: 5})
		if err != nil {
			t.Fatalf("%s: %v", w.Name(), err)
		}
		if want := int64(w.Clients() * 5); res.Ops != want {
			t.Errorf("%s: %d ops, want %d", w.Name(), res.Ops, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("DURATION", "2")
	o, err := parseFlags([]string{"-workloads=cas"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Duration != 2*time.Second || o.Workloads != "cas" || o.Replicas != 3 || o.Shards != 1 {
		t.Errorf("parseFlags: %+v", o)
	}
	t.Setenv("DURATION", "1500ms")
	if o, err := parseFlags(nil); err != nil || o.Duration != 1500*time.Millisecond {
		t.Errorf("DURATION=1500ms: %v, %v", o.Duration, err)
	}
	if _, err := parseFlags([]string{"-duration=0s"}); err == nil {
		t.Error("-duration=0s accepted")
	}
}
