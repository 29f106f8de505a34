package engine

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// placeProposal is the shape of a scheduler's placement: a version check
// and put on a task, a binding, and a counter add.
func placeProposal(i int) *storev1.Proposal {
	task := fmt.Sprintf("/tasks/ns/j%d/%d", i/100, i%100)
	m := i % 1000
	return &storev1.Proposal{
		TxnId:             fmt.Sprintf("bench-%d", i),
		NowUnixNanos:      int64(i),
		DedupeWindowNanos: 1e12,
		LogRetention:      10000,
		GroupIndexes:      []uint32{0},
		Groups: []*storev1.Group{{
			Conditions: []*storev1.Condition{{Key: task, Version: 0}},
			Ops: []*storev1.Op{
				{Op: &storev1.Op_Put{Put: &storev1.Put{Key: task, Value: make([]byte, 200)}}},
				{Op: &storev1.Op_Put{Put: &storev1.Put{Key: fmt.Sprintf("/bindings/m%d/%s", m, task), Value: []byte("b")}}},
				{Op: &storev1.Op_Add{Add: &storev1.Add{Key: fmt.Sprintf("/alloc/m%d/cpu", m), Delta: 1, Min: 0, Max: 1 << 40}}},
			},
		}},
	}
}

func BenchmarkApplyPlace(b *testing.B) {
	st := NewMemStorage()
	props := make([]*storev1.Proposal, b.N)
	for i := range props {
		props[i] = placeProposal(i)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := Apply(st, props[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyCell applies the simulator's traffic to a cell in steady
// state, per task: its creation, its placement (the task's version, its
// job's stop key, a new binding, two counters) and its end (binding and
// task deleted, counters given back), each in requests of cellBatch
// groups, over cellRunning running tasks on cellMachines machines. The
// storage keeps about the simulator's 80,000 keys, so that most reads
// miss the processor's caches as they do there.
func BenchmarkApplyCell(b *testing.B) {
	const (
		cellMachines = 10000
		cellRunning  = 30000
		cellBatch    = 64
	)
	st := NewMemStorage()
	var now int64
	apply := func(p *storev1.Proposal) {
		if _, err := Apply(st, p); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < cellRunning; i += cellBatch {
		for _, p := range cellCycle(&now, i, cellBatch, cellRunning, cellMachines) {
			apply(p)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += cellBatch {
		b.StopTimer()
		ps := cellCycle(&now, cellRunning+i, cellBatch, cellRunning, cellMachines)
		b.StartTimer()
		for _, p := range ps {
			apply(p)
		}
	}
}

// cellCycle returns the requests of one batch of BenchmarkApplyCell: the
// creation and placement of tasks first to first+batch, and the end of
// those running tasks before.
func cellCycle(now *int64, first, batch, running, machines int) []*storev1.Proposal {
	task := func(i int) string { return "/tasks/sim/job-" + strconv.Itoa(i/50) + "/" + strconv.Itoa(i%50) }
	machine := func(i int) string { return "m-" + strconv.Itoa((i*7919)%machines) }
	binding := func(i int) string {
		return "/bindings/" + machine(i) + "/sim/job-" + strconv.Itoa(i/50) + "/" + strconv.Itoa(i%50)
	}
	value := make([]byte, 250)
	put := func(k string) *storev1.Op {
		return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: value}}}
	}
	del := func(k string) *storev1.Op {
		return &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: k}}}
	}
	add := func(k string, delta int64, max int64) *storev1.Op {
		return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: delta, Max: max}}}
	}
	counters := func(i int, sign int64) []*storev1.Op {
		return []*storev1.Op{add("/alloc/"+machine(i)+"/cpu", sign*1000, math.MaxInt64), add("/alloc/"+machine(i)+"/memory", sign*2048, math.MaxInt64)}
	}
	var create, place, end []*storev1.Group
	for j := first; j < first+batch; j++ {
		create = append(create, &storev1.Group{Conditions: []*storev1.Condition{{Key: task(j)}}, Ops: []*storev1.Op{put(task(j))}})
		// The creation commits at the next revision, the placement reads it.
		place = append(place, &storev1.Group{
			Conditions: []*storev1.Condition{{Key: task(j), Version: uint64(*now + 1)}, {Key: binding(j)}},
			Ops:        append([]*storev1.Op{add("/jobstops/sim/job-"+strconv.Itoa(j/50), 0, 0), put(task(j)), put(binding(j))}, counters(j, 1)...),
		})
		if e := j - running; e >= 0 {
			end = append(end, &storev1.Group{Ops: append(append([]*storev1.Op{del(binding(e))}, counters(e, -1)...), del(task(e)))})
		}
	}
	var ps []*storev1.Proposal
	for _, groups := range [][]*storev1.Group{create, place, end} {
		if len(groups) == 0 {
			continue
		}
		*now++
		p := &storev1.Proposal{NowUnixNanos: *now, LogRetention: 1, Groups: groups}
		for i := range groups {
			p.GroupIndexes = append(p.GroupIndexes, uint32(i))
		}
		ps = append(ps, p)
	}
	return ps
}
