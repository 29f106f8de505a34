package engine

import (
	"fmt"
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
