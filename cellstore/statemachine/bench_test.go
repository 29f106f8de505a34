package statemachine

import (
	"fmt"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// BenchmarkUpdate applies place-shaped entries in batches of 8, about what
// Dragonboat hands over per Update with 64 clients on one shard.
func BenchmarkUpdate(b *testing.B) {
	m := New(Config{Dir: b.TempDir(), Logger: zap.NewNop()}, 0)
	if _, err := m.Open(nil); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	entries := make([]sm.Entry, b.N)
	for i := range entries {
		task := fmt.Sprintf("/tasks/ns/j%d/%d", i/100, i%100)
		cmd, _ := EncodeEntry(&storev1.Proposal{
			TxnId: fmt.Sprintf("b-%d", i), NowUnixNanos: int64(i), DedupeWindowNanos: 1e12, LogRetention: 10000,
			GroupIndexes: []uint32{0},
			Groups: []*storev1.Group{{
				Conditions: []*storev1.Condition{{Key: task}},
				Ops: []*storev1.Op{
					{Op: &storev1.Op_Put{Put: &storev1.Put{Key: task, Value: make([]byte, 200)}}},
					{Op: &storev1.Op_Add{Add: &storev1.Add{Key: fmt.Sprintf("/alloc/m%d/cpu", i%1000), Delta: 1, Min: 0, Max: 1 << 40}}},
				},
			}},
		})
		entries[i] = sm.Entry{Index: uint64(i + 1), Cmd: cmd}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += 8 {
		if _, err := m.Update(entries[i:min(i+8, b.N)]); err != nil {
			b.Fatal(err)
		}
	}
}
