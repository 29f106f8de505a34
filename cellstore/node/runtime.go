package node

import (
	"os"
	"runtime"
)

// RaiseGOMAXPROCS gives a process that hosts store nodes twice as many Ps
// (Go's processors) as the runtime's default, unless the environment sets
// GOMAXPROCS, and returns the count now in force. A store node spends much
// of its time in system calls that block: fdatasync of the Raft log, and
// writes to its peers and clients. A goroutine in such a call keeps its P
// until the runtime's monitor takes it back, from tens of microseconds to
// milliseconds later, and meanwhile runnable goroutines wait while cores
// idle: with as many Ps as cores, a cell on two cores used 1.1 of them
// under cross-shard load. With twice as many, the cores stay busy and the
// operating system shares them (measured in DESIGN, Measurements). The
// processes of the other roles are CPU-bound and keep the default.
func RaiseGOMAXPROCS() int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	def := runtime.GOMAXPROCS(0)
	defaultProcs.Store(int64(def))
	n := 2 * def
	runtime.GOMAXPROCS(n)
	return n
}
