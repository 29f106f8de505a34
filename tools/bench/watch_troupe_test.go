package bench

import (
	"context"
	"testing"
	"time"
)

// TestTroupeWatch runs watch on a real 3-replica cell, the watchers
// spread over the replicas: every watcher delivers every commit once.
func TestTroupeWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-replica cell")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, closeSys, err := StartLocalTroupe(ctx, t.TempDir(), 3, 1, Secure, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := closeSys(); err != nil {
			t.Error(err)
		}
	}()
	const puts, writers, watchers = 25, 4, 30
	w, err := NewWorkload(WorkloadWatch, Params{Clients: writers, Keys: 10, ValueSize: 16, Machines: 1, Seed: 1, Watchers: watchers})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, sys, w, Config{MaxOps: puts})
	if err != nil {
		t.Fatal(err)
	}
	wr := res.Watch
	if res.Ops != writers*puts || wr.Commits != writers*puts || wr.Delivered != writers*puts*watchers {
		t.Errorf("%d puts, %d commits, %d events; want %d, %d, %d", res.Ops, wr.Commits, wr.Delivered, writers*puts, writers*puts, writers*puts*watchers)
	}
	if wr.Lost != 0 || wr.Duplicates != 0 || wr.Unexpected != 0 || wr.BehindTold != 0 {
		t.Errorf("lost %d, duplicates %d, unexpected %d, told %d: want none", wr.Lost, wr.Duplicates, wr.Unexpected, wr.BehindTold)
	}
	if wr.Connections != 3 || wr.Streams != 3 {
		t.Errorf("%d connections, %d streams; want 3 and 3 (one WatchStream per connection)", wr.Connections, wr.Streams)
	}
	if p50 := wr.Delays.Quantile(0.5); p50 <= 0 || p50 > 10*time.Second {
		t.Errorf("delivery p50 %v", p50)
	}
}
