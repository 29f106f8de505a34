package scheduler

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// The view's MaxFree bounds what any schedulable machine has free, within
// a factor of two, as machines and counters change; cordoned machines do
// not count: its free-room buckets count exactly the schedulable
// machines, as they are cordoned, deleted and registered again. Its Rooms
// are the machines' free room, as machines come and go, and its machines
// are flattened (framework.Machine.Usage).
func TestMachineViewMaxFree(t *testing.T) {
	v := NewMachineView()
	r := rand.New(rand.NewPCG(1, 2))
	const n = 50
	for i := range n {
		v.SetMachine(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%d", i)},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000}, Unschedulable: i == 7}})
	}
	for step := range 500 {
		m := r.IntN(n)
		v.SetCounter(fmt.Sprintf("/alloc/m%d/cpu", m), r.Int64N(4001), uint64(step+1))
		switch step % 50 {
		case 0:
			v.DeleteMachine(fmt.Sprintf("m%d", r.IntN(n)))
		case 10, 20, 30, 40:
			v.SetMachine(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%d", r.IntN(n))},
				Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000}, Unschedulable: r.IntN(2) == 0}})
		}
		snap := v.Snapshot(nil, "")
		for i, fm := range snap.Machines {
			if snap.Rooms[i] != framework.RoomOf(fm) {
				t.Fatalf("step %d: room of %s is %+v, want %+v", step, fm.Name, snap.Rooms[i], framework.RoomOf(fm))
			}
			if u, ok := fm.Usage(); !ok || u != (framework.Usage{CPUCapacity: fm.Capacity["cpu"], CPUAllocated: fm.Allocated["cpu"]}) {
				t.Fatalf("step %d: usage of %s is %+v, %v; its maps %v, %v", step, fm.Name, u, ok, fm.Capacity, fm.Allocated)
			}
			if j, ok := v.Index(fm.Name); !ok || j != i {
				t.Fatalf("step %d: Index(%s) = %d, %v; it is at %d", step, fm.Name, j, ok, i)
			}
		}
		var most int64
		var buckets [65]int
		for _, fm := range snap.Machines {
			if !fm.Unschedulable {
				most = max(most, fm.Free("cpu"))
				buckets[bits.Len64(uint64(max(fm.Free("cpu"), 0)))]++
			}
		}
		if *v.free["cpu"] != buckets {
			t.Fatalf("step %d: free-room buckets %v, want %v", step, *v.free["cpu"], buckets)
		}
		if bound := snap.MaxFree["cpu"]; bound < most || (most > 0 && bound > 2*most) {
			t.Fatalf("step %d: bound %d for a largest free room of %d", step, bound, most)
		}
	}
}

// SetCounters of a change set's counters leaves the view as SetCounter
// of each in order does, older versions ignored, and machines it does not
// touch keep their published pointer.
func TestSetCountersAsOneByOne(t *testing.T) {
	cs := []CounterValue{
		{"/alloc/m0/cpu", 100, 5}, {"/alloc/m0/memory", 7, 5}, {"/alloc/m1/cpu", 300, 5},
		{"/alloc/m0/cpu", 200, 6}, {"/alloc/m1/cpu", 250, 4}, // an older version: ignored
	}
	one, batch := NewMachineView(), NewMachineView()
	for _, v := range []*MachineView{one, batch} {
		for i := range 3 {
			v.SetMachine(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%d", i)},
				Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 100}}})
		}
	}
	for _, c := range cs {
		one.SetCounter(c.Key, c.Value, c.Version)
	}
	untouched := batch.Machine("m2")
	batch.SetCounters(cs)
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		a, b := one.Machine(name), batch.Machine(name)
		if fmt.Sprint(a.Allocated, a.AllocVersions) != fmt.Sprint(b.Allocated, b.AllocVersions) {
			t.Errorf("%s: batch %v %v, one by one %v %v", name, b.Allocated, b.AllocVersions, a.Allocated, a.AllocVersions)
		}
	}
	if got := batch.Machine("m0").Allocated["cpu"]; got != 200 {
		t.Errorf("m0 cpu %d, want 200", got)
	}
	if batch.Machine("m2") != untouched {
		t.Error("a machine no counter names was published again")
	}
}
