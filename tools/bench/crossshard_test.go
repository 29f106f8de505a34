package bench

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
)

// placeRecorder is a Session that records placements and commits them
// all; it serves nothing else.
type placeRecorder struct {
	Session
	placements []Placement
}

func (s *placeRecorder) Place(_ context.Context, p Placement) (Outcome, error) {
	s.placements = append(s.placements, p)
	return Outcome{Committed: true, Version: uint64(len(s.placements))}, nil
}

// machineOf is the machine named by a /bindings/<m>/... or /alloc/<m>/...
// key.
func machineOf(key string) string { return strings.Split(key, "/")[2] }

// TestPlace4KeysOnThreeShards checks that each of place4's placements has
// its task, binding and counter on three different shards of a 4-shard
// cell, that client id's tasks are on shard id mod 4, that bindings and
// counters go to every other shard, and that the machines number
// Params.Machines rounded up to a multiple of 4, a quarter on each shard.
func TestPlace4KeysOnThreeShards(t *testing.T) {
	p := testParams()
	p.Clients = 8
	w, err := NewWorkload(WorkloadPlace4, p)
	if err != nil {
		t.Fatal(err)
	}
	if n := ShardsFor(w, 1); n != 4 {
		t.Fatalf("place4 asks for %d shards, want 4", n)
	}
	router := keyspace.NewRouter(4)
	machines := map[string]uint32{}
	for id := range p.Clients {
		rec := &placeRecorder{}
		op := w.Op(id, rec)
		for range 50 {
			if _, err := op(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		bindingShards, counterShards := map[uint32]bool{}, map[uint32]bool{}
		for _, pl := range rec.placements {
			task, binding, counter := router.Shard(pl.Task), router.Shard(pl.Binding), router.Shard(pl.Counter)
			if task != uint32(id%4) {
				t.Errorf("client %d: task %s on shard %d, want %d", id, pl.Task, task, id%4)
			}
			if task == binding || task == counter || binding == counter {
				t.Errorf("client %d: task %s, binding %s, counter %s on shards %d, %d, %d: want three shards",
					id, pl.Task, pl.Binding, pl.Counter, task, binding, counter)
			}
			bindingShards[binding], counterShards[counter] = true, true
			machines[machineOf(pl.Binding)] = binding
			machines[machineOf(pl.Counter)] = counter
		}
		if len(bindingShards) != 3 || len(counterShards) != 3 {
			t.Errorf("client %d: bindings on shards %v, counters on %v, want each on the 3 other shards",
				id, slices.Sorted(maps.Keys(bindingShards)), slices.Sorted(maps.Keys(counterShards)))
		}
	}
	perShard := make([]int, 4)
	for _, sh := range machines {
		perShard[sh]++
	}
	if !slices.Equal(perShard, []int{2, 2, 2, 2}) { // 5 machines rounded up to 8
		t.Errorf("machines per shard %v, want 2 each", perShard)
	}
}

// TestRunSystemStartsPerShardCount checks that RunSystem starts the system
// once per shard count the workloads need, in the order of first need,
// runs each workload on the system of its count, and stops each system
// before the next start.
func TestRunSystemStartsPerShardCount(t *testing.T) {
	const maxOps = 3
	p := testParams()
	ws, err := ParseWorkloads("seq,place4,place", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		shards int
		want   []string
	}{
		{1, []string{"start 1", "close 1: 3 puts, 12 placements", "start 4", "close 4: 0 puts, 12 placements"}},
		{2, []string{"start 2", "close 2: 3 puts, 12 placements", "start 4", "close 4: 0 puts, 12 placements"}},
		{4, []string{"start 4", "close 4: 3 puts, 24 placements"}},
	} {
		var events []string
		start := func(_ context.Context, _ string, shards int) (System, func() error, error) {
			events = append(events, fmt.Sprint("start ", shards))
			sys := newMemSystem("troupe")
			return sys, func() error {
				events = append(events, fmt.Sprintf("close %d: %d puts, %d placements", shards, sys.count("Put"), sys.count("Place")))
				return nil
			}, nil
		}
		var out bytes.Buffer
		clock := &stepClock{step: time.Millisecond}
		err := RunSystem(context.Background(), "troupe", start, t.TempDir(), ws, c.shards,
			Config{MaxOps: maxOps, Now: clock.Now}, NewReporter(&out, "troupe", "etcd"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(events, c.want) {
			t.Errorf("shards %d: %q, want %q", c.shards, events, c.want)
		}
		if !strings.Contains(out.String(), `{"workload":"place4","vs":"place","system":"troupe",`) {
			t.Errorf("shards %d: no place4 vs place line in\n%s", c.shards, out.String())
		}
	}
}

// latencies returns 100 latencies whose p50 is p50 and p99 is p99.
func latencies(p50, p99 time.Duration) Latencies {
	return MergeLatencies(slices.Repeat([]time.Duration{p50}, 50), slices.Repeat([]time.Duration{p99}, 50))
}

// TestReporterComparesWithBaseline checks the vs line of a workload and
// its baseline on the numerator system, whichever comes first, and that
// the denominator system gets none.
func TestReporterComparesWithBaseline(t *testing.T) {
	result := func(workload, system string, p50, p99 time.Duration) Result {
		r := Result{Workload: workload, System: system, Ops: 100, Elapsed: time.Second, Latencies: latencies(p50, p99)}
		if workload == WorkloadPlace4 {
			r.Baseline = WorkloadPlace
		}
		return r
	}
	place := result(WorkloadPlace, "troupe", 2*time.Millisecond, 10*time.Millisecond)
	place4 := result(WorkloadPlace4, "troupe", 3*time.Millisecond, 25*time.Millisecond)
	etcdPlace := result(WorkloadPlace, "etcd", 2*time.Millisecond, 10*time.Millisecond)
	etcdPlace4 := result(WorkloadPlace4, "etcd", 2*time.Millisecond, 10*time.Millisecond)
	const vs = `{"workload":"place4","vs":"place","system":"troupe","ratio_p50":1.5,"ratio_p99":2.5}`
	for _, order := range [][]Result{{place, place4, etcdPlace, etcdPlace4}, {place4, place, etcdPlace4, etcdPlace}} {
		var out bytes.Buffer
		rep := NewReporter(&out, "troupe", "etcd")
		for _, r := range order {
			if err := rep.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		// Two troupe lines and the vs line, then per etcd result its
		// line and the troupe/etcd ratio.
		if len(lines) != 7 || lines[2] != vs {
			t.Errorf("%s then %s: got\n%s\nwant line 3 %s of 7", order[0].Workload, order[1].Workload, out.String(), vs)
		}
		if n := strings.Count(out.String(), `"vs"`); n != 1 {
			t.Errorf("%d vs lines, want 1", n)
		}
	}
}

// putRecorder is a Session that records the keys of PutEach calls; it
// serves nothing else.
type putRecorder struct {
	Session
	calls [][]string
}

func (s *putRecorder) PutEach(_ context.Context, keys []string, _ []byte) error {
	s.calls = append(s.calls, slices.Clone(keys))
	return nil
}

// TestSplit4PutsPlace4KeysAtOnce checks that each split4 op writes, in one
// PutEach, three keys on three different shards of a 4-shard cell (client
// id's task on shard id mod 4), keys of its own (not place4's), and that
// split4 runs on 4 shards compared with place.
func TestSplit4PutsPlace4KeysAtOnce(t *testing.T) {
	p := testParams()
	p.Clients = 8
	w, err := NewWorkload(WorkloadSplit4, p)
	if err != nil {
		t.Fatal(err)
	}
	x, ok := w.(CrossShardWorkload)
	if !ok || x.Shards() != 4 || x.Baseline() != WorkloadPlace {
		t.Fatalf("split4 is %T, want a CrossShardWorkload on 4 shards compared with place", w)
	}
	router := keyspace.NewRouter(4)
	for id := range p.Clients {
		rec := &putRecorder{}
		op := w.Op(id, rec)
		for range 20 {
			if committed, err := op(context.Background()); err != nil || !committed {
				t.Fatalf("client %d: op = %v, %v", id, committed, err)
			}
		}
		if len(rec.calls) != 20 {
			t.Fatalf("client %d: %d PutEach calls for 20 ops", id, len(rec.calls))
		}
		for _, keys := range rec.calls {
			shards := map[uint32]bool{}
			for _, k := range keys {
				shards[router.Shard(k)] = true
				if strings.Contains(k, WorkloadPlace4) {
					t.Errorf("client %d: key %s is place4's", id, k)
				}
			}
			if len(keys) != 3 || len(shards) != 3 || router.Shard(keys[0]) != uint32(id%4) {
				t.Errorf("client %d: keys %q on shards %v, want 3 keys on 3 shards, the first on %d", id, keys, shards, id%4)
			}
		}
	}
}

// TestRunInterleavedTakesTurns checks that RunInterleaved starts every
// system before the first run, runs each workload in rounds with the
// systems taking turns, places fresh tasks in every turn, reports each
// system once per workload, and stops the systems; and that it refuses
// watch.
func TestRunInterleavedTakesTurns(t *testing.T) {
	const maxOps, rounds = 3, 3
	p := testParams()
	ws, err := ParseWorkloads("seq,place", p)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	systems := map[string]*memSystem{}
	start := map[string]Starter{}
	for _, name := range []string{"troupe", "etcd"} {
		start[name] = func(context.Context, string, int) (System, func() error, error) {
			events = append(events, "start "+name)
			sys := newMemSystem(name)
			systems[name] = sys
			return sys, func() error { events = append(events, "close "+name); return nil }, nil
		}
	}
	var out bytes.Buffer
	clock := &stepClock{step: time.Millisecond}
	err = RunInterleaved(context.Background(), []string{"troupe", "etcd"}, start, t.TempDir(), ws, 1, rounds,
		Config{MaxOps: maxOps, Now: clock.Now, Log: runRecorder{&events}}, NewReporter(&out, "troupe", "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"start troupe", "start etcd"}
	for _, w := range []string{"seq", "place"} {
		for range rounds {
			want = append(want, "troupe/"+w, "etcd/"+w)
		}
	}
	want = append(want, "close etcd", "close troupe")
	if !slices.Equal(events, want) {
		t.Errorf("events %q,\nwant %q", events, want)
	}
	for name, sys := range systems {
		tasks := 0
		for k := range sys.kv {
			if strings.HasPrefix(k, "/tasks/") {
				tasks++
			}
		}
		if puts, places := sys.count("Put"), sys.count("Place"); puts != rounds*maxOps || places != rounds*maxOps*p.Clients || tasks != places {
			t.Errorf("%s: %d puts, %d placements of %d tasks; want %d puts, %d placements, each of a new task",
				name, puts, places, tasks, rounds*maxOps, rounds*maxOps*p.Clients)
		}
	}
	for _, w := range []string{"seq", "place"} {
		if n := strings.Count(out.String(), `{"workload":"`+w+`","ratio_ops"`); n != 1 {
			t.Errorf("%d ratio lines for %s, want 1, in\n%s", n, w, out.String())
		}
	}

	p.Watchers = 2
	watch, err := ParseWorkloads("watch", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := RunInterleaved(context.Background(), []string{"troupe"}, start, t.TempDir(), watch, 1, rounds,
		Config{MaxOps: maxOps}, NewReporter(&out, "troupe", "etcd")); err == nil || !strings.Contains(err.Error(), "watch") {
		t.Errorf("RunInterleaved with watch: %v, want it refused", err)
	}
}

// runRecorder records the system/workload of each run Run logs.
type runRecorder struct{ events *[]string }

func (r runRecorder) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		*r.events = append(*r.events, strings.SplitN(line, ":", 2)[0])
	}
	return len(b), nil
}
