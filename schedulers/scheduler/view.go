package scheduler

import (
	"maps"
	"math/bits"
	"strings"
	"sync"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// MachineView keeps the machines as decisions see them, built from
// machine objects and /alloc counters as their changes arrive (from a
// cache's watch in a cell, from the in-memory store in the simulator), so
// that a decision copies a slice of pointers instead of rebuilding every
// machine: with 10,000 machines that is microseconds, not tens of
// milliseconds. It is safe for concurrent use.
//
// Published *framework.Machine values are never changed; a change
// replaces the machine's pointer with a new one.
type MachineView struct {
	mu       sync.Mutex
	machines []*framework.Machine
	rooms    []framework.Room      // framework.RoomOf(machines[i]) at i
	entries  map[string]*viewEntry // by machine name, registered or not
	// free counts the schedulable machines by resource and by the bit
	// length of their free amount, so a decision learns in 64 steps the
	// most any machine has free (framework.Snapshot.MaxFree).
	free map[string]*[65]int
	// generation counts the counter updates (updateCounters), so that
	// one copies each machine's maps once.
	generation uint64
	// changed are the positions in machines written since the log last
	// started again (its epoch), in turn, so that a Refill refreshes
	// only those; it starts again when it outgrows the machines.
	changed []int
	epoch   uint64
	// fixed counts the machine objects set or deleted
	// (framework.Snapshot.Fixed).
	fixed uint64
}

// viewEntry is what the view knows of machine name: its object (nil
// until registered) and its counters, which may arrive first.
type viewEntry struct {
	name     string
	obj      *troupev1.Machine
	at       int // its position in machines (-1: not listed)
	alloc    map[string]int64
	versions map[string]uint64
	copied   uint64 // the update (MachineView.generation) that last copied alloc and versions
	// base is the machine as published but for its counters, from obj
	// (flattened without them), and resources its capacity's, each with
	// its free-room buckets and the one the published machine counts in
	// (see count): together, as every change of its counters reads them.
	base      framework.Machine
	resources []viewResource
}

// viewResource is a resource of a machine's capacity in the view's
// free-room buckets (MachineView.free): those of the resource, and the
// one the machine counts in (-1: none).
type viewResource struct {
	name    string
	buckets *[65]int
	counted int
}

// NewMachineView returns an empty view.
func NewMachineView() *MachineView {
	return &MachineView{free: map[string]*[65]int{}, entries: map[string]*viewEntry{}}
}

func (v *MachineView) entry(name string) *viewEntry {
	e, ok := v.entries[name]
	if !ok {
		e = &viewEntry{name: name, at: -1, alloc: map[string]int64{}, versions: map[string]uint64{}}
		v.entries[name] = e
	}
	return e
}

// SetMachine records a machine's object (added or updated).
func (v *MachineView) SetMachine(m *troupev1.Machine) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fixed++
	e := v.entry(m.GetMetadata().GetName())
	e.obj = m
	e.base = framework.Machine{
		Name: e.name, Object: m, Labels: m.GetMetadata().GetLabels(), Taints: m.GetSpec().GetTaints(), Capacity: m.GetSpec().GetCapacity(),
		Unschedulable: m.GetSpec().GetUnschedulable() || m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST,
	}
	e.base.Flatten()
	v.uncount(e)
	e.resources = e.resources[:0]
	for r := range e.base.Capacity {
		b := v.free[r]
		if b == nil {
			b = &[65]int{}
			v.free[r] = b
		}
		e.resources = append(e.resources, viewResource{name: r, buckets: b, counted: -1})
	}
	v.publish(e)
}

// DeleteMachine forgets a machine's object; its counters stay until they
// are deleted too.
func (v *MachineView) DeleteMachine(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.entries[name]; ok {
		v.fixed++
		e.obj = nil
		v.publish(e)
	}
}

// CounterValue is a machine counter (/alloc/<machine>/<resource>) as a
// change set or a commit holds it.
type CounterValue struct {
	Key     string
	Value   int64
	Version uint64
}

// SetCounter records the value and version of the counter at key
// (/alloc/<machine>/<resource>) as the store holds it, unless the view
// already holds a later version: the scheduler assumes its own commits'
// counters before the cache shows them (AssumeCounters), and an older
// event must not undo that. An event at the version assumed replaces the
// assumed value with the store's.
func (v *MachineView) SetCounter(key string, value int64, version uint64) {
	v.SetCounters([]CounterValue{{key, value, version}})
}

// SetCounters is SetCounter of each of cs in order (one change set's
// counters), with each machine they touch copied and republished once.
func (v *MachineView) SetCounters(cs []CounterValue) {
	v.updateCounters(cs, func(e *viewEntry, r string, c CounterValue) {
		if c.Version >= e.versions[r] {
			e.alloc[r], e.versions[r] = c.Value, c.Version
		}
	})
}

// AssumeCounters records what a scheduler's own commit wrote to
// counters cs, before the cache shows them, each unless the view already
// holds its version or a later one (each machine copied and republished
// once, as by SetCounters). A value may be only an estimate (a
// fine-grained commit adds to the counter without reading it, so others'
// commits since the decision's snapshot are not in it); the store's
// value at the same version (SetCounter, from the watch) is exact, so it
// is never replaced by an assumption: the view would otherwise keep the
// estimate until the counter next changed, and every decision on the
// machine meanwhile would plan on room that is not there and conflict.
func (v *MachineView) AssumeCounters(cs []CounterValue) {
	v.updateCounters(cs, func(e *viewEntry, r string, c CounterValue) {
		if c.Version > e.versions[r] {
			e.alloc[r], e.versions[r] = c.Value, c.Version
		}
	})
}

// DeleteCounter forgets the counter at key.
func (v *MachineView) DeleteCounter(key string) {
	v.updateCounters([]CounterValue{{Key: key}}, func(e *viewEntry, r string, _ CounterValue) {
		delete(e.alloc, r)
		delete(e.versions, r)
	})
}

// updateCounters applies change to each of cs, on copies of the counter
// maps of its machine (published machines share the old ones; a machine
// is copied once), then republishes the machines changed.
func (v *MachineView) updateCounters(cs []CounterValue, change func(e *viewEntry, resource string, c CounterValue)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.generation++
	var (
		changed []*viewEntry
		e       *viewEntry
	)
	for _, c := range cs {
		machine, resource, ok := allocOf(c.Key)
		if !ok {
			continue
		}
		if e == nil || e.name != machine { // a machine's counters come together
			e = v.entry(machine)
		}
		if e.copied != v.generation {
			e.alloc, e.versions, e.copied = maps.Clone(e.alloc), maps.Clone(e.versions), v.generation
			changed = append(changed, e)
		}
		change(e, resource, c)
	}
	for _, e := range changed {
		v.publish(e)
	}
}

// allocOf splits the key of a machine counter into the machine and the
// resource.
func allocOf(key string) (machine, resource string, ok bool) {
	return strings.Cut(strings.TrimPrefix(key, clientlib.AllocPrefix), "/")
}

// publish rebuilds the decision view of machine e.name from e.
func (v *MachineView) publish(e *viewEntry) {
	i, listed := e.at, e.at >= 0
	if e.obj == nil {
		v.uncount(e)
		if listed { // swap-remove
			last := len(v.machines) - 1
			v.machines[i], v.rooms[i] = v.machines[last], v.rooms[last]
			v.entries[v.machines[i].Name].at = i
			v.machines, v.rooms = v.machines[:last], v.rooms[:last]
			e.at = -1
			v.wrote(i)
		}
		return
	}
	fm := new(framework.Machine)
	*fm = e.base
	fm.Allocated, fm.AllocVersions = e.alloc, e.versions
	fm.FlattenAllocated(&e.base)
	if !listed {
		i, e.at = len(v.machines), len(v.machines)
		v.machines, v.rooms = append(v.machines, nil), append(v.rooms, framework.Room{})
	}
	v.machines[i], v.rooms[i] = fm, framework.RoomOf(fm)
	v.count(e, fm)
	v.wrote(i)
}

// wrote logs that position i of machines was written (changed).
func (v *MachineView) wrote(i int) {
	if len(v.changed) > 2*len(v.machines)+64 { // a Refill would rather copy them all
		v.changed, v.epoch = v.changed[:0], v.epoch+1
	}
	v.changed = append(v.changed, i)
}

// count counts m, e's machine as published, in the free-room buckets
// of its resources (none if it is unschedulable), instead of e's
// machine as published before.
func (v *MachineView) count(e *viewEntry, m *framework.Machine) {
	for k := range e.resources {
		r := &e.resources[k]
		b := -1
		if !m.Unschedulable {
			b = bits.Len64(uint64(max(m.Free(r.name), 0)))
		}
		if b != r.counted { // most changes of a counter leave its bucket
			if r.counted >= 0 {
				r.buckets[r.counted]--
			}
			if b >= 0 {
				r.buckets[b]++
			}
			r.counted = b
		}
	}
}

// uncount takes e's published machine out of the free-room buckets.
func (v *MachineView) uncount(e *viewEntry) {
	for k := range e.resources {
		r := &e.resources[k]
		if r.counted >= 0 {
			r.buckets[r.counted]--
			r.counted = -1
		}
	}
}

// maxFree bounds what any schedulable machine has free, by resource.
func (v *MachineView) maxFree() map[string]int64 {
	out := make(map[string]int64, len(v.free))
	for r, b := range v.free {
		for n := len(b) - 1; n >= 0; n-- {
			if b[n] > 0 {
				out[r] = int64(uint64(1)<<n - 1) // every amount of bit length n is below 2^n
				break
			}
		}
	}
	return out
}

// Machine returns the view of machine name (nil when it is not
// registered).
func (v *MachineView) Machine(name string) *framework.Machine {
	v.mu.Lock()
	defer v.mu.Unlock()
	if i, ok := v.at(name); ok {
		return v.machines[i]
	}
	return nil
}

// Index returns the position of machine name in the Machines of the
// snapshots taken from now until a machine is deleted (false: not
// registered).
func (v *MachineView) Index(name string) (int, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.at(name)
}

// at returns the position of machine name in machines (false: not
// listed).
func (v *MachineView) at(name string) (int, bool) {
	if e, ok := v.entries[name]; ok && e.at >= 0 {
		return e.at, true
	}
	return 0, false
}

// Snapshot returns the cell for one decision of job: the machines, with
// jobTasks (the job's tasks per machine) filled into copies of the
// machines that have some, their rooms, and the most any of them has
// free.
func (v *MachineView) Snapshot(jobTasks map[string]int, job string) *framework.Snapshot {
	var r Refilled
	v.Refill(&r, jobTasks, job)
	return &r.Snapshot
}

// Refilled is a snapshot that Refill makes again for one decision after
// another, and what it holds of the view: for a caller done with the
// decision the snapshot served (and its plan, whose placements point at
// the snapshot's machines), so that deciding often in a large cell
// allocates little and copies little. The zero value is ready (an empty
// snapshot); Refill sets its Machines, Rooms, MaxFree and Fixed and
// leaves its other fields alone.
type Refilled struct {
	framework.Snapshot
	// epoch and seen are where in the view's log of changed positions
	// Machines and Rooms stand, and copied are the positions of the
	// last job's copies of machines, which copies holds: the next
	// job's are made in the same array.
	epoch  uint64
	seen   int
	copied []int
	copies []framework.Machine
}

// Refill makes r's snapshot what Snapshot returns. Machines and Rooms
// are refreshed, not copied: only the positions written since the last
// Refill of r (machines published again, or copied for the job) are,
// which in a large cell is a few of thousands per decision. The copies
// for the job are made in the array of the last job's (a job's tasks
// may be on thousands of machines), and those with the same count of
// the job's tasks share their JobTasks (a snapshot's machines are read,
// never changed).
func (v *MachineView) Refill(r *Refilled, jobTasks map[string]int, job string) {
	v.mu.Lock()
	on := make([]MachineTasks, 0, len(jobTasks))
	for name, n := range jobTasks {
		if i, ok := v.at(name); ok {
			on = append(on, MachineTasks{At: i, Tasks: n})
		}
	}
	v.refresh(r)
	v.mu.Unlock()
	r.copyFor(on, job)
}

// MachineTasks is how many of a job's tasks the machine at At (its
// Index) runs.
type MachineTasks struct{ At, Tasks int }

// RefillAt is Refill with the job's tasks given by machine position:
// for a caller that keeps them so (a job's tasks may be on thousands of
// machines, and be decided about every second), whose view's machines
// are never deleted (a deletion moves the last machine).
func (v *MachineView) RefillAt(r *Refilled, on []MachineTasks, job string) {
	v.mu.Lock()
	v.refresh(r)
	v.mu.Unlock()
	r.copyFor(on, job)
}

// refresh makes r's Machines, Rooms, MaxFree and Fixed the view's.
func (v *MachineView) refresh(r *Refilled) {
	out, rooms := r.Machines, r.Rooms
	if r.epoch == v.epoch && r.seen <= len(v.changed) && len(out) == len(v.machines) {
		for _, at := range r.copied {
			out[at] = v.machines[at]
		}
		for _, at := range v.changed[r.seen:] {
			if at < len(out) { // not a position since removed
				out[at], rooms[at] = v.machines[at], v.rooms[at]
			}
		}
	} else {
		out, rooms = append(out[:0], v.machines...), append(rooms[:0], v.rooms...)
	}
	r.Machines, r.Rooms, r.MaxFree, r.Fixed = out, rooms, v.maxFree(), v.fixed
	r.epoch, r.seen = v.epoch, len(v.changed)
}

// copyFor puts copies of the machines of on, with the job's tasks, in
// r's Machines.
func (r *Refilled) copyFor(on []MachineTasks, job string) {
	if cap(r.copies) < len(on) {
		r.copies = make([]framework.Machine, len(on))
	}
	copies := r.copies[:len(on)]
	counts := map[int]map[string]int{}
	r.copied = r.copied[:0]
	for k, o := range on {
		c := &copies[k]
		*c = *r.Machines[o.At]
		if c.JobTasks = counts[o.Tasks]; c.JobTasks == nil {
			c.JobTasks = map[string]int{job: o.Tasks}
			counts[o.Tasks] = c.JobTasks
		}
		c.FlattenAs(r.Machines[o.At])
		r.Machines[o.At] = c
		r.copied = append(r.copied, o.At)
	}
}
