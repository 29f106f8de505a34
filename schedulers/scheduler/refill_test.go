package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Refill (or RefillAt) into the snapshot of the last decision, which
// it refreshes rather than copies, gives what a new Snapshot gives, as
// machines and counters change and come and go between decisions of
// different jobs: the view's machines, and copies with the job's tasks
// of those that have some, flattened as the view's; Fixed changes with
// the machine objects only.
func TestRefillAsSnapshot(t *testing.T) {
	v := NewMachineView()
	r := rand.New(rand.NewPCG(4, 4))
	const n = 60
	for i := range n {
		v.SetMachine(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%d", i)},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}})
	}
	snap := &Refilled{}
	for step := range 1000 {
		for range r.IntN(4) {
			v.SetCounter(fmt.Sprintf("/alloc/m%d/cpu", r.IntN(n)), r.Int64N(4001), uint64(step+1))
		}
		fixed, changed := snap.Fixed, false
		switch name := fmt.Sprintf("m%d", r.IntN(n)); r.IntN(20) {
		case 0:
			v.DeleteMachine(name)
			changed = true
		case 1:
			changed = true
			v.SetMachine(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: name},
				Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 8000}}})
		}
		job, jobTasks := fmt.Sprintf("ns/j%d", r.IntN(3)), map[string]int{}
		for range r.IntN(20) {
			jobTasks[fmt.Sprintf("m%d", r.IntN(n+5))] += 1 + r.IntN(2)
		}
		if step%2 == 0 {
			v.Refill(snap, jobTasks, job)
		} else { // the same by position
			var on []MachineTasks
			for name, n := range jobTasks {
				if at, ok := v.Index(name); ok {
					on = append(on, MachineTasks{At: at, Tasks: n})
				}
			}
			v.RefillAt(snap, on, job)
		}
		if snap.Fixed == 0 || step > 0 && (snap.Fixed != fixed) != changed {
			t.Fatalf("step %d: Fixed %d after %d, machine objects changed: %v", step, snap.Fixed, fixed, changed)
		}
		want := v.Snapshot(jobTasks, job)
		if len(snap.Machines) != len(want.Machines) || fmt.Sprint(snap.Rooms) != fmt.Sprint(want.Rooms) || !maps.Equal(snap.MaxFree, want.MaxFree) {
			t.Fatalf("step %d: %d machines, rooms %v, max free %v; want %d, %v, %v", step,
				len(snap.Machines), snap.Rooms, snap.MaxFree, len(want.Machines), want.Rooms, want.MaxFree)
		}
		for i, m := range snap.Machines {
			w := want.Machines[i]
			if _, copied := jobTasks[m.Name]; !copied && m != w {
				t.Fatalf("step %d: machine %d is %p, not the view's %p", step, i, m, w)
			}
			u, ok := m.Usage()
			wu, _ := w.Usage()
			if m.Name != w.Name || m.Object != w.Object || !maps.Equal(m.Allocated, w.Allocated) || !maps.Equal(m.JobTasks, w.JobTasks) || !ok || u != wu {
				t.Fatalf("step %d: machine %d is %s %v %v %+v (flat %v); want %s %v %v %+v", step, i,
					m.Name, m.Allocated, m.JobTasks, u, ok, w.Name, w.Allocated, w.JobTasks, wu)
			}
		}
	}
}
