package main

import (
	"testing"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// TestEtcdWatch runs the watch workload against a real 3-member embedded
// cluster, renamed as benchcompare's variants are: every watcher delivers
// every commit once, the watchers of each member's client on one stream.
func TestEtcdWatch(t *testing.T) {
	ctx, sys := startTestEtcd(t)
	const puts, writers, watchers = 25, 4, 30
	w, err := bench.NewWorkload(bench.WorkloadWatch, bench.Params{Clients: writers, Keys: 10, ValueSize: 16, Machines: 1, Seed: 1, Watchers: watchers})
	if err != nil {
		t.Fatal(err)
	}
	res, err := bench.Run(ctx, named(sysEtcdInsecure, sys), w, bench.Config{MaxOps: puts})
	if err != nil {
		t.Fatal(err)
	}
	wr := res.Watch
	if res.System != sysEtcdInsecure || res.Ops != writers*puts || wr.Commits != writers*puts || wr.Delivered != writers*puts*watchers {
		t.Errorf("%s: %d puts, %d commits, %d events; want %s: %d, %d, %d", res.System, res.Ops, wr.Commits, wr.Delivered,
			sysEtcdInsecure, writers*puts, writers*puts, writers*puts*watchers)
	}
	if wr.Lost != 0 || wr.Duplicates != 0 || wr.Unexpected != 0 || wr.BehindTold != 0 {
		t.Errorf("lost %d, duplicates %d, unexpected %d, told %d: want none", wr.Lost, wr.Duplicates, wr.Unexpected, wr.BehindTold)
	}
	if wr.Connections != 3 || wr.Streams != 3 {
		t.Errorf("%d connections, %d streams; want 3 and 3", wr.Connections, wr.Streams)
	}
}

// TestParseWatchFlags checks watch's flags and $WATCH_RATE, which
// reaches a run through make as $DURATION does.
func TestParseWatchFlags(t *testing.T) {
	t.Setenv("WATCH_RATE", "100")
	o, err := parseFlags([]string{"-workloads=watch", "-watchers=10"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Params.WatchRate != 100 || o.Params.Watchers != 10 || o.Params.Clients != 64 {
		t.Errorf("parseFlags: %+v, want 10 watchers, 64 writers at 100 commits a second", o.Params)
	}
	if o, err := parseFlags([]string{"-watch-rate=5"}); err != nil || o.Params.WatchRate != 5 {
		t.Errorf("-watch-rate=5: %v, %v", o.Params.WatchRate, err)
	}
	t.Setenv("WATCH_RATE", "fast")
	if _, err := parseFlags(nil); err == nil {
		t.Error("WATCH_RATE=fast accepted")
	}
}
