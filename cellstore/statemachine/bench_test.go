package statemachine

import (
	"fmt"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Entries as the bench workloads at 64 clients make them: group commit
// puts benchProposalsPerEntry proposals in a Raft entry, and Dragonboat
// hands over benchEntriesPerUpdate entries per Update.
const (
	benchProposalsPerEntry = 16
	benchEntriesPerUpdate  = 2
	benchKeys              = 10000 // cas's keys
)

// BenchmarkUpdate applies place-shaped proposals (a task that must not
// exist, its binding, a counter add).
func BenchmarkUpdate(b *testing.B) {
	benchUpdate(b, benchNoExpiry, nil, func(i int) *storev1.Group {
		task := fmt.Sprintf("/tasks/ns/j%d/%d", i/100, i%100)
		m := i % 1000
		return &storev1.Group{
			Conditions: []*storev1.Condition{{Key: task}},
			Ops: []*storev1.Op{
				{Op: &storev1.Op_Put{Put: &storev1.Put{Key: task, Value: make([]byte, 200)}}},
				{Op: &storev1.Op_Put{Put: &storev1.Put{Key: fmt.Sprintf("/bindings/m%d/%s", m, task), Value: make([]byte, 200)}}},
				{Op: &storev1.Op_Add{Add: &storev1.Add{Key: fmt.Sprintf("/alloc/m%d/cpu", m), Delta: 1, Min: 0, Max: 1 << 40}}},
			},
		}
	})
}

// BenchmarkUpdateCAS applies cas-shaped proposals: a put of a 200-byte
// value on one of benchKeys existing keys, conditioned on its version
// (which each proposal gets right).
func BenchmarkUpdateCAS(b *testing.B) { benchUpdateCAS(b, benchNoExpiry) }

// BenchmarkUpdateCASExpiring is BenchmarkUpdateCAS in a long-running
// cell's steady state: proposals 1 ms apart and outcomes remembered for
// 1 s, so that as many expire (and are deleted) as are remembered.
func BenchmarkUpdateCASExpiring(b *testing.B) {
	benchUpdateCAS(b, benchClock{step: 1e6, dedupe: 1e9})
}

// benchClock is the proposals' clock: proposal j of a run is at j*step
// nanoseconds, and remembers its outcome for dedupe nanoseconds.
type benchClock struct{ step, dedupe int64 }

// benchNoExpiry never lets an outcome expire within a run.
var benchNoExpiry = benchClock{step: 1, dedupe: 1e12}

func benchUpdateCAS(b *testing.B, clock benchClock) {
	seed := make([]*storev1.Group, benchKeys)
	for k := range seed {
		seed[k] = &storev1.Group{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: fmt.Sprintf("/cas/%d", k), Value: make([]byte, 200)}}}}}
	}
	versions := make([]uint64, benchKeys)
	next := uint64(benchKeys)
	for k := range versions {
		versions[k] = uint64(k + 1)
	}
	benchUpdate(b, clock, seed, func(i int) *storev1.Group {
		k := (i * 7919) % benchKeys
		next++
		g := &storev1.Group{
			Conditions: []*storev1.Condition{{Key: fmt.Sprintf("/cas/%d", k), Version: versions[k]}},
			Ops:        []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: fmt.Sprintf("/cas/%d", k), Value: make([]byte, 200)}}}},
		}
		versions[k] = next
		return g
	})
}

// benchUpdate applies the groups of seed, one proposal each, then times
// b.N proposals of one group each from group(i), on clock, and fails if
// one does not commit.
func benchUpdate(b *testing.B, clock benchClock, seed []*storev1.Group, group func(i int) *storev1.Group) {
	m := New(Config{Dir: b.TempDir(), Logger: zap.NewNop()}, 0)
	if _, err := m.Open(nil); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	index, proposed := uint64(0), int64(0)
	entries := func(gs []*storev1.Group, txn string) []sm.Entry {
		var es []sm.Entry
		for i := 0; i < len(gs); i += benchProposalsPerEntry {
			var ps []*storev1.Proposal
			for j := i; j < min(i+benchProposalsPerEntry, len(gs)); j++ {
				proposed++
				ps = append(ps, &storev1.Proposal{
					TxnId: fmt.Sprintf("%s-%d", txn, j), NowUnixNanos: proposed * clock.step, DedupeWindowNanos: clock.dedupe, LogRetention: 100000,
					GroupIndexes: []uint32{0}, Groups: []*storev1.Group{gs[j]},
				})
			}
			cmd, err := EncodeEntry(ps...)
			if err != nil {
				b.Fatal(err)
			}
			index++
			es = append(es, sm.Entry{Index: index, Cmd: cmd})
		}
		return es
	}
	update := func(es []sm.Entry) {
		for i := 0; i < len(es); i += benchEntriesPerUpdate {
			if _, err := m.Update(es[i:min(i+benchEntriesPerUpdate, len(es))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	check := func(es []sm.Entry) {
		for _, e := range es {
			outs, err := DecodeResult(e.Result)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range outs {
				if !o.GetGroups()[0].GetCommitted() {
					b.Fatalf("entry %d: %v", e.Index, o.GetGroups()[0].GetFailure())
				}
			}
		}
	}
	seeded := entries(seed, "seed")
	update(seeded)
	check(seeded)
	gs := make([]*storev1.Group, b.N)
	for i := range gs {
		gs[i] = group(i)
	}
	timed := entries(gs, "b")
	b.ReportAllocs()
	b.ResetTimer()
	update(timed)
	b.StopTimer()
	check(timed)
}
