package bench

import (
	"fmt"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
)

// StorageWrites is what a system's storage wrote: for a Troupe cell in
// this process, every replica's state database (statemachine.
// StorageMetrics) summed over nodes and shards.
type StorageWrites struct {
	WAL, Flush, Compaction uint64
}

// StorageReporter is a system that can say what its storage has written
// so far; a run reports the bytes it wrote per op beside its CPU, the
// write amplification a workload costs.
type StorageReporter interface {
	StorageWrites() StorageWrites
}

// since returns what was written after before. A replica whose database
// reopened in between (a snapshot's recovery) counts from zero again; its
// part of the difference is then left out rather than wrapped around.
func (w StorageWrites) since(before StorageWrites) StorageWrites {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return StorageWrites{sub(w.WAL, before.WAL), sub(w.Flush, before.Flush), sub(w.Compaction, before.Compaction)}
}

// perOp describes w spread over ops.
func (w StorageWrites) perOp(ops int64) string {
	if ops <= 0 {
		return "no ops"
	}
	return fmt.Sprintf("WAL %d, flushes %d, compactions %d bytes per op", w.WAL/uint64(ops), w.Flush/uint64(ops), w.Compaction/uint64(ops))
}

// cellStorage sums the state databases of a local cell's running nodes.
func cellStorage(cell *localstore.Cluster, shards int) func() StorageWrites {
	return func() StorageWrites {
		var out StorageWrites
		for i := range cell.Size() {
			n := cell.Node(i)
			if n == nil {
				continue
			}
			for s := range shards {
				m := n.StateMachine(uint32(s))
				if m == nil {
					continue
				}
				if sm, ok := m.StorageMetrics(); ok {
					out.WAL += sm.WALBytes
					out.Flush += sm.FlushBytes
					out.Compaction += sm.CompactionBytes
				}
			}
		}
		return out
	}
}
