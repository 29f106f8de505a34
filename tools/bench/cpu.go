package bench

import (
	"time"

	"github.com/troupe-cluster/troupe/cellstore/node"
)

// processCPU is the CPU time (user and system) this process has used so
// far, 0 where the platform does not tell. With the cell under test in
// the process (troupe bench without --endpoint, benchcompare), its
// difference over a run divided by the run's ops is the whole system's
// CPU per op: a figure that other work on the machine disturbs less than
// ops/s.
func processCPU() time.Duration {
	cpu, _ := node.ProcessCPU()
	return cpu
}

// cpuPerOp is cpu spread over ops (0 without ops).
func cpuPerOp(cpu time.Duration, ops int64) time.Duration {
	if ops <= 0 {
		return 0
	}
	return cpu / time.Duration(ops)
}
