package framework

import "math/rand/v2"

// Cache is what a profile keeps from one decision to the next. The
// verdicts of its Static filters, by equivalence class and machine, so
// that a decision runs them only on machines it has not seen before: a
// verdict holds for the machine at its index in every snapshot with the
// same Fixed (Snapshot.Fixed), whatever the machine's counters; in
// snapshots whose Fixed is not known, machines are told apart by their
// *Machine, so whoever builds those must give a machine whose labels,
// taints, object or schedulability change a new *Machine. At most
// maxCachedClasses classes are kept. And the buffers
// of a decision (the machine order, rooms, their bounds and positions),
// so that a decision about a few tasks in a large cell allocates
// little. It is not safe for concurrent use: one decision at a time, as
// with Profile.Rand.
type Cache struct {
	classes   map[string]*classVerdicts
	order     []int
	rooms     []Room
	positions []int32
	bounds    []Room // of roomBlocks
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{classes: map[string]*classVerdicts{}} }

// maxCachedClasses bounds the classes a Cache holds: when one more
// comes, it starts again.
const maxCachedClasses = 16

// resize returns buf with length n, reusing its array if large enough.
func resize[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// perm returns the identity shuffled by rng.Shuffle, in the cache's
// order buffer. Its Fisher-Yates shuffle is written out: the same draws
// and swaps, without a call of a swap function for each of a large
// cell's machines at every decision.
func (c *Cache) perm(rng *rand.Rand, n int) []int {
	order := c.identity(n)
	for i := n - 1; i > 0; i-- {
		j := int(rng.Uint64N(uint64(i + 1)))
		order[i], order[j] = order[j], order[i]
	}
	return order
}

// identity returns 0, 1, ..., n-1 in the cache's order buffer.
func (c *Cache) identity(n int) []int {
	c.order = resize(c.order, n)
	for i := range c.order {
		c.order[i] = i
	}
	return c.order
}

// classVerdicts are one class's static verdicts, by machine index, and
// whether they pass every machine of the snapshots whose Fixed is
// cleanOf (0: not known; see staticClean).
type classVerdicts struct {
	verdicts []staticVerdict
	cleanOf  uint64
	clean    bool
}

// staticVerdict is the static filters' verdict on a machine: staticPass
// or the first refusal. It was made on the machine of the snapshots of
// Fixed fixed, or, when fixed is 0, on m. A verdict of a known Fixed
// keeps no *Machine: a machine's counters change far more often than its
// fixed attributes, and each change is a new *Machine, with its own
// counter maps, which a verdict would otherwise keep from being
// collected long after the view has moved on.
type staticVerdict struct {
	m      *Machine
	fixed  uint64
	status *Status
}

// class returns the verdicts of class, for a snapshot of n machines.
func (c *Cache) class(class string, n int) *classVerdicts {
	cv, ok := c.classes[class]
	if !ok {
		if len(c.classes) == maxCachedClasses {
			clear(c.classes)
		}
		cv = &classVerdicts{}
		c.classes[class] = cv
	}
	if len(cv.verdicts) < n {
		cv.verdicts = append(cv.verdicts, make([]staticVerdict, n-len(cv.verdicts))...)
	}
	return cv
}

// staticPass is the static verdict of a machine that passes every static
// filter.
var staticPass = &Status{Code: Success}

// static returns the static filters' verdict on machine idx for t, whose
// class's verdicts are cv: staticPass or the first refusal. Static
// filters look only at what a plan never changes, so the snapshot's
// machine stands for its view.
func (s *scheduling) static(cv *classVerdicts, t *Task, idx int) *Status {
	m, fixed := s.snap.Machines[idx], s.snap.Fixed
	v := &cv.verdicts[idx]
	if v.status != nil && (fixed != 0 && v.fixed == fixed || fixed == 0 && v.m == m) {
		s.staticHits++
		return v.status
	}
	st := staticPass
	for _, f := range s.staticFilters {
		if r := f.Filter(t, m); !r.IsSuccess() {
			st = r
			break
		}
	}
	*v = staticVerdict{fixed: fixed, status: st}
	if fixed == 0 {
		v.m = m
	}
	return st
}
