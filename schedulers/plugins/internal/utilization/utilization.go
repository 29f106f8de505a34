// Package utilization computes how full a machine would be after placing
// a task, shared by the BinPacking and LeastAllocated score plugins.
//
// The arithmetic is integer (parts per million of capacity, 128-bit
// intermediate products), so the result does not depend on map iteration
// order or on floating-point rounding: a decision is reproducible.
package utilization

import (
	"math/bits"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Always lists the resources every utilization counts (when the machine
// has them), besides those the task requests.
var Always = [...]string{"cpu", "memory"}

const scale = 1_000_000 // parts per million

// Fullness returns how full m would be after placing t, from 0 (empty) to
// framework.MaxScore (full): the fraction of capacity allocated, task
// included, averaged over cpu, memory and every resource t requests, each
// clamped to [0, 1]. Resources the machine has no capacity of are left
// out; ok is false when nothing was counted.
//
// A task that requests only cpu and memory on a flattened machine
// (framework.Task.CPUMemory, Machine.Usage), the common case, is scored
// without map lookups: with every machine scored for every task, they
// were most of a decision's time.
func Fullness(t *framework.Task, m *framework.Machine) (score int64, ok bool) {
	var a average
	if cpu, memory, only := t.CPUMemory(); only {
		if u, ok := m.Usage(); ok {
			a.add(u.CPUAllocated+cpu, u.CPUCapacity)
			a.add(u.MemoryAllocated+memory, u.MemoryCapacity)
			return a.score()
		}
	}
	add := func(r string) { a.add(m.Allocated[r]+t.Requests[r], m.Capacity[r]) }
	for _, r := range Always {
		add(r)
	}
	for r, v := range t.Requests {
		if v <= 0 || r == Always[0] || r == Always[1] {
			continue
		}
		add(r)
	}
	return a.score()
}

// average sums the fractions of capacity used of the resources counted.
type average struct{ sum, n uint64 }

// add counts a resource of which used is used, unless there is no
// capacity of it.
func (a *average) add(used, capacity int64) {
	if capacity <= 0 {
		return
	}
	a.sum += fraction(used, capacity)
	a.n++
}

// score returns the average as a score (false: nothing counted).
func (a *average) score() (int64, bool) {
	if a.n == 0 {
		return 0, false
	}
	// Round half up: (sum/n/scale)·MaxScore. sum ≤ n·scale, so no overflow.
	den := a.n * scale
	return int64((a.sum*framework.MaxScore + den/2) / den), true
}

// fraction returns used/capacity in parts per million, clamped to
// [0, scale]; capacity > 0.
func fraction(used, capacity int64) uint64 {
	switch {
	case used <= 0:
		return 0
	case used >= capacity:
		return scale
	}
	hi, lo := bits.Mul64(uint64(used), scale)
	q, _ := bits.Div64(hi, lo, uint64(capacity)) // hi < capacity since used < capacity
	return q
}
