package node

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// cpuLoad tells the shards' proposers whether this process's CPU is what
// limits its commits (groupcommit.go). It samples the CPU time the
// process has used (user and system, getrusage) every cpuSampleEvery and
// compares it with what the machine's cores could have given it over
// that time. The share rises above cpuBoundAbove only when the process
// keeps the cores busy: a loopback benchmark with 64 clients on two cores
// ran at 72-91%, while the same benchmark with 5 ms between nodes ran at
// about 30% and one client alone at about 60% (docs/measurements.md,
// 2026-11-25, fifth session). The hysteresis keeps one noisy sample from
// flipping the verdict.
type cpuLoad struct {
	bound atomic.Bool
	cores int
	// last sample
	cpu  time.Duration
	wall time.Time
}

const (
	cpuSampleEvery = 200 * time.Millisecond
	cpuBoundAbove  = 0.70 // share of the cores at which the CPU becomes the limit
	cpuFreeBelow   = 0.55 // and below which it stops being
)

// newCPULoad returns a load gauge for a process given cores cores (at
// least 1).
func newCPULoad(cores int) *cpuLoad {
	return &cpuLoad{cores: max(cores, 1)}
}

// Bound reports whether the CPU was the limit at the last sample.
func (l *cpuLoad) Bound() bool { return l.bound.Load() }

// observe takes a sample: cpu is the process's CPU time so far, now the
// time it was read. The first sample only sets the baseline.
func (l *cpuLoad) observe(cpu time.Duration, now time.Time) {
	if l.wall.IsZero() {
		l.cpu, l.wall = cpu, now
		return
	}
	wall := now.Sub(l.wall)
	if wall <= 0 {
		return
	}
	share := float64(cpu-l.cpu) / (float64(wall) * float64(l.cores))
	l.cpu, l.wall = cpu, now
	switch {
	case share >= cpuBoundAbove:
		l.bound.Store(true)
	case share < cpuFreeBelow:
		l.bound.Store(false)
	}
}

// run samples the process until stop is closed. Where the platform does
// not tell a process's CPU time, the gauge stays "not bound".
func (l *cpuLoad) run(stop <-chan struct{}) {
	t := time.NewTicker(cpuSampleEvery)
	defer t.Stop()
	for {
		cpu, ok := ProcessCPU()
		if !ok {
			return
		}
		l.observe(cpu, time.Now())
		select {
		case <-t.C:
		case <-stop:
			return
		}
	}
}

// ProcessCPU is the CPU time (user and system) this process has used so
// far; false where the platform does not tell.
func ProcessCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCores is how many cores the process may use: the runtime's own
// count (GOMAXPROCS as the runtime set it, which follows a container's
// CPU quota), not the raised one (RaiseGOMAXPROCS), and never more than
// the CPUs it may run on.
func processCores() int {
	if n := defaultProcs.Load(); n > 0 {
		return int(min(n, int64(runtime.NumCPU())))
	}
	return min(runtime.GOMAXPROCS(0), runtime.NumCPU())
}

// defaultProcs is GOMAXPROCS before RaiseGOMAXPROCS raised it (0: not
// raised).
var defaultProcs atomic.Int64
