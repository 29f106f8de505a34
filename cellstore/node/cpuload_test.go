package node

import (
	"testing"
	"time"
)

// The gauge says "bound" from a share of cpuBoundAbove of the cores, and
// keeps saying it until the share falls below cpuFreeBelow.
func TestCPULoadHysteresis(t *testing.T) {
	l := newCPULoad(2)
	start := time.Unix(1000, 0)
	var cpu time.Duration
	l.observe(cpu, start)
	now := start
	for i, step := range []struct {
		cpu   time.Duration // used over the next 100 ms by 2 cores
		bound bool
	}{
		{100 * time.Millisecond, false}, // 0.50
		{150 * time.Millisecond, true},  // 0.75
		{120 * time.Millisecond, true},  // 0.60: within the band, stays
		{100 * time.Millisecond, false}, // 0.50
		{130 * time.Millisecond, false}, // 0.65: within the band, stays
		{200 * time.Millisecond, true},  // 1.00
	} {
		cpu += step.cpu
		now = now.Add(100 * time.Millisecond)
		l.observe(cpu, now)
		if l.Bound() != step.bound {
			t.Fatalf("step %d (%v of CPU in 100 ms on 2 cores): bound %v, want %v", i, step.cpu, l.Bound(), step.bound)
		}
	}
	// A sample at the same instant changes nothing.
	l.observe(cpu, now)
	if !l.Bound() {
		t.Fatal("a sample with no time passed changed the verdict")
	}
}

// A proposer keeps up to maxBatchesInFlight entries in flight, or one
// while its process is CPU-bound; without a gauge, always up to the most.
func TestProposerLimit(t *testing.T) {
	l := newCPULoad(2)
	pr := newProposer(nil, 0, l, 1, make(chan struct{}))
	if !pr.tryStart() || !pr.tryStart() || pr.tryStart() {
		t.Fatalf("not bound: %d entries in flight, want %d", pr.inFlight.Load(), maxBatchesInFlight)
	}
	pr.finish()
	l.bound.Store(true)
	if pr.tryStart() {
		t.Fatal("bound: a second entry started")
	}
	pr.finish()
	if !pr.tryStart() {
		t.Fatal("bound: no entry in flight and none may start")
	}
	pr.finish()
	free := newProposer(nil, 0, nil, 1, make(chan struct{}))
	for range maxBatchesInFlight {
		if !free.tryStart() {
			t.Fatal("without a gauge: fewer than maxBatchesInFlight entries")
		}
	}
}
