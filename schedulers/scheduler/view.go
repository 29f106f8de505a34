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
	e := v.entry(m.GetMetadata().GetName())
	e.obj = m
	v.publish(e)
}

// DeleteMachine forgets a machine's object; its counters stay until they
// are deleted too.
func (v *MachineView) DeleteMachine(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.entries[name]; ok {
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
	var changed []*viewEntry
	for _, c := range cs {
		machine, resource, ok := allocOf(c.Key)
		if !ok {
			continue
		}
		e := v.entry(machine)
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
		if listed { // swap-remove
			v.count(v.machines[i], -1)
			last := len(v.machines) - 1
			v.machines[i], v.rooms[i] = v.machines[last], v.rooms[last]
			v.entries[v.machines[i].Name].at = i
			v.machines, v.rooms = v.machines[:last], v.rooms[:last]
			e.at = -1
		}
		return
	}
	m := e.obj
	fm := &framework.Machine{
		Name: e.name, Object: m, Labels: m.GetMetadata().GetLabels(), Taints: m.GetSpec().GetTaints(),
		Capacity: m.GetSpec().GetCapacity(), Allocated: e.alloc, AllocVersions: e.versions,
		Unschedulable: m.GetSpec().GetUnschedulable() || m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST,
	}
	fm.Flatten()
	if listed {
		v.count(v.machines[i], -1)
		v.machines[i], v.rooms[i] = fm, framework.RoomOf(fm)
		v.count(fm, 1)
		return
	}
	e.at = len(v.machines)
	v.machines, v.rooms = append(v.machines, fm), append(v.rooms, framework.RoomOf(fm))
	v.count(fm, 1)
}

// count adds delta to the free-room buckets of m's resources.
func (v *MachineView) count(m *framework.Machine, delta int) {
	if m.Unschedulable {
		return
	}
	for r := range m.Capacity {
		b := v.free[r]
		if b == nil {
			b = &[65]int{}
			v.free[r] = b
		}
		b[bits.Len64(uint64(max(m.Free(r), 0)))] += delta
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
	snap := &framework.Snapshot{}
	v.Refill(snap, jobTasks, job)
	return snap
}

// Refill makes snap what Snapshot returns, reusing its Machines and
// Rooms (its other fields are left alone): for a caller done with the
// decision snap served, so that deciding often in a large cell
// allocates little. Machines is refreshed, not copied: only the
// machines changed since (published again, or copied for the job) are
// written, which in a large cell is a few of thousands per decision.
// The copies for the job are made in one allocation, and those with the
// same count of the job's tasks share their JobTasks (a snapshot's
// machines are read, never changed).
func (v *MachineView) Refill(snap *framework.Snapshot, jobTasks map[string]int, job string) {
	type on struct{ at, tasks int }
	v.mu.Lock()
	out := snap.Machines
	if len(out) == len(v.machines) {
		for i, m := range v.machines {
			if out[i] != m {
				out[i] = m
			}
		}
	} else {
		out = append(out[:0], v.machines...)
	}
	rooms := append(snap.Rooms[:0], v.rooms...)
	maxFree := v.maxFree()
	ons := make([]on, 0, len(jobTasks))
	for name, n := range jobTasks {
		if i, ok := v.at(name); ok {
			ons = append(ons, on{i, n})
		}
	}
	v.mu.Unlock()
	copies := make([]framework.Machine, len(ons))
	counts := map[int]map[string]int{}
	for k, o := range ons {
		c := &copies[k]
		*c = *out[o.at]
		if c.JobTasks = counts[o.tasks]; c.JobTasks == nil {
			c.JobTasks = map[string]int{job: o.tasks}
			counts[o.tasks] = c.JobTasks
		}
		c.FlattenAs(out[o.at])
		out[o.at] = c
	}
	snap.Machines, snap.Rooms, snap.MaxFree = out, rooms, maxFree
}
