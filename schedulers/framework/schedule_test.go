package framework

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// fit is a dynamic filter on cpu; zone is a static one on a label; both
// count their calls.
type fit struct{ calls int }

func (f *fit) Name() string { return "Fit" }
func (f *fit) Filter(t *Task, m *Machine) *Status {
	f.calls++
	if t.Requests["cpu"] > m.Free("cpu") {
		return NewStatus(Unschedulable, f.Name(), "insufficient cpu")
	}
	return nil
}

type zone struct {
	want  string
	calls int
}

func (z *zone) Name() string { return "Zone" }
func (z *zone) Static()      {}
func (z *zone) Filter(t *Task, m *Machine) *Status {
	z.calls++
	if z.want != "" && m.Labels["zone"] != z.want {
		return NewStatus(Unschedulable, z.Name(), "wrong zone")
	}
	return nil
}

// fullest prefers machines with the least free cpu.
type fullest struct{}

func (fullest) Name() string { return "Fullest" }
func (fullest) Score(t *Task, m *Machine) int64 {
	return MaxScore - MaxScore*m.Free("cpu")/max(m.Capacity["cpu"], 1)
}

type broken struct{}

func (broken) Name() string                   { return "Broken" }
func (broken) Filter(*Task, *Machine) *Status { return NewStatus(Error, "Broken", "cannot tell") }

func cell(n int, cpu int64) *Snapshot {
	s := &Snapshot{}
	for i := range n {
		s.Machines = append(s.Machines, &Machine{Name: fmt.Sprintf("m%03d", i), Capacity: map[string]int64{"cpu": cpu},
			Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%2)}})
	}
	return s
}

func tasks(n int, cpu int64) []*Task {
	var out []*Task
	for i := range n {
		t := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("j-%d", i)},
			Spec: &troupev1.TaskSpec{Job: "j", Index: int32(i), Template: &troupev1.TaskTemplate{Requests: map[string]int64{"cpu": cpu}}}}
		out = append(out, NewTask(fmt.Sprintf("/tasks/ns/j/%d", i), t))
	}
	return out
}

// checkNoOvercommit adds a plan's placements to the snapshot's allocations
// and fails if any machine goes over capacity.
func checkNoOvercommit(t *testing.T, s *Snapshot, p *Plan) {
	t.Helper()
	used := map[string]int64{}
	for _, pl := range p.Placements {
		used[pl.Machine.Name] += pl.Task.Requests["cpu"]
	}
	for _, m := range s.Machines {
		if m.Allocated["cpu"]+used[m.Name] > m.Capacity["cpu"] {
			t.Fatalf("%s overcommitted: %d + %d > %d", m.Name, m.Allocated["cpu"], used[m.Name], m.Capacity["cpu"])
		}
	}
}

func TestScheduleAssumesPlacements(t *testing.T) {
	snap := cell(3, 1000)
	snap.Machines[0].Allocated = map[string]int64{"cpu": 600}
	plan := Schedule(Profile{Filters: []FilterPlugin{&fit{}}}, snap, tasks(6, 400))
	checkNoOvercommit(t, snap, plan)
	// m000 has room for 1, the others for 2 each: 5 placed, 1 fails.
	if len(plan.Placements) != 5 || len(plan.Failures) != 1 {
		t.Fatalf("%d placed, %d failed", len(plan.Placements), len(plan.Failures))
	}
	st := plan.Failures[0].Status
	if st.Code != Unschedulable || !strings.Contains(st.String(), "0/3 machines fit") || !strings.Contains(st.String(), "3× Fit (insufficient cpu)") {
		t.Fatalf("failure: %v", st)
	}
	if !maps.Equal(st.Refused, map[string]int{"Fit": 3}) || st.Machines != 3 {
		t.Fatalf("failure counts: refused %v of %d machines, want Fit 3 of 3", st.Refused, st.Machines)
	}
	if snap.Machines[0].Allocated["cpu"] != 600 {
		t.Fatal("Schedule changed the snapshot")
	}
}

func TestScheduleScoresAndSamples(t *testing.T) {
	snap := cell(50, 1000)
	for i, m := range snap.Machines {
		m.Allocated = map[string]int64{"cpu": int64(i * 10)} // m049 is the fullest
	}
	all := Schedule(Profile{Filters: []FilterPlugin{&fit{}}, Scores: []WeightedScore{{fullest{}, 1}}}, snap, tasks(1, 100))
	if got := all.Placements[0].Machine.Name; got != "m049" {
		t.Fatalf("full search placed on %s, want the fullest m049", got)
	}
	f := &fit{}
	sampled := Schedule(Profile{Filters: []FilterPlugin{f}, SampleFeasible: 5, Rand: rand.New(rand.NewPCG(7, 7))}, snap, tasks(10, 100))
	if len(sampled.Placements) != 10 || f.calls != 50 || sampled.Examined != 50 {
		t.Fatalf("sampled: %d placed after %d filter calls (examined %d), want 10 after 50", len(sampled.Placements), f.calls, sampled.Examined)
	}
	// Same seed, same plan; the search moves on from task to task.
	again := Schedule(Profile{Filters: []FilterPlugin{&fit{}}, SampleFeasible: 5, Rand: rand.New(rand.NewPCG(7, 7))}, snap, tasks(10, 100))
	seen := map[string]bool{}
	for i, p := range sampled.Placements {
		if again.Placements[i].Machine.Name != p.Machine.Name {
			t.Fatalf("placement %d differs with the same seed: %s vs %s", i, p.Machine.Name, again.Placements[i].Machine.Name)
		}
		seen[p.Machine.Name] = true
	}
	if len(seen) < 5 {
		t.Fatalf("10 tasks landed on %d machines: the sample does not rotate", len(seen))
	}
}

func TestScheduleEquivalenceClasses(t *testing.T) {
	snap := cell(20, 100000)
	z := &zone{want: "z1"}
	plan := Schedule(Profile{Filters: []FilterPlugin{z, &fit{}}}, snap, tasks(30, 100))
	if len(plan.Placements) != 30 {
		t.Fatalf("%d placed", len(plan.Placements))
	}
	for _, p := range plan.Placements {
		if p.Machine.Labels["zone"] != "z1" {
			t.Fatalf("placed on %s in the wrong zone", p.Machine.Name)
		}
	}
	if z.calls != 20 || plan.StaticHits != 30*20-20 {
		t.Fatalf("static filter ran %d times (hits %d) for 30 identical tasks on 20 machines, want 20", z.calls, plan.StaticHits)
	}
}

func TestScheduleErrorsAndEmptyCell(t *testing.T) {
	plan := Schedule(Profile{Filters: []FilterPlugin{broken{}}}, cell(3, 1000), tasks(1, 1))
	if len(plan.Failures) != 1 || plan.Failures[0].Status.Code != Error || plan.Failures[0].Status.Plugin != "Broken" {
		t.Fatalf("plugin error: %+v", plan.Failures)
	}
	plan = Schedule(Profile{}, &Snapshot{}, tasks(1, 1))
	if len(plan.Failures) != 1 || plan.Failures[0].Status.Code != Unschedulable {
		t.Fatalf("empty cell: %+v", plan.Failures)
	}
}

// A task asking for more than any machine has free (Snapshot.MaxFree)
// fails without a machine being examined.
func TestMaxFreeFailsWithoutScanning(t *testing.T) {
	m := &Machine{Name: "m", Capacity: map[string]int64{"cpu": 1000}, Allocated: map[string]int64{"cpu": 600}}
	snap := &Snapshot{Machines: []*Machine{m}, MaxFree: map[string]int64{"cpu": 511}}
	task := &Task{Key: "/tasks/ns/j/0", Job: "ns/j", Task: &troupev1.Task{}, Requests: map[string]int64{"cpu": 512}}
	plan := Schedule(Profile{Filters: []FilterPlugin{&fit{}}}, snap, []*Task{task})
	if len(plan.Failures) != 1 || plan.Examined != 0 || !strings.Contains(plan.Failures[0].Status.String(), "none has 512m cpu free") {
		t.Fatalf("plan %+v, failure %v", plan, plan.Failures)
	}
	if st := plan.Failures[0].Status; st.Refused != nil || st.Machines != 1 {
		t.Fatalf("without a FitFilter: refused %v of %d machines, want none of 1", st.Refused, st.Machines)
	}
	// With a FitFilter, the machines count as refused by it.
	plan = Schedule(Profile{Filters: []FilterPlugin{roomFit{&fit{}}}}, snap, []*Task{task})
	if st := plan.Failures[0].Status; !maps.Equal(st.Refused, map[string]int{"Fit": 1}) || st.Machines != 1 || plan.Examined != 0 {
		t.Fatalf("with a FitFilter: refused %v of %d machines (%d examined), want Fit 1 of 1", st.Refused, st.Machines, plan.Examined)
	}
}

// roomFit is fit as a FitFilter.
type roomFit struct{ *fit }

func (roomFit) FitFilter() {}

// A profile's Cache keeps static verdicts from one decision to the next,
// until a machine is replaced.
func TestCacheKeepsStaticVerdicts(t *testing.T) {
	snap := cell(20, 100000)
	z := &zone{want: "z1"}
	p := Profile{Filters: []FilterPlugin{z, &fit{}}, Cache: NewCache()}
	Schedule(p, snap, tasks(5, 100))
	plan := Schedule(p, snap, tasks(5, 100))
	if z.calls != 20 || plan.StaticHits != 5*20 {
		t.Fatalf("static filter ran %d times for two decisions on 20 machines (hits %d), want 20", z.calls, plan.StaticHits)
	}
	m := *snap.Machines[3]
	snap.Machines[3] = &m
	Schedule(p, snap, tasks(1, 100))
	if z.calls != 21 {
		t.Fatalf("static filter ran %d times, want once more for the replaced machine", z.calls)
	}
}

// The cache's perm shuffles as rng.Shuffle does, draw for draw: decisions
// (and the simulator's runs) stay what they were.
func TestPermAsShuffle(t *testing.T) {
	c := NewCache()
	for n := range 300 {
		a, b := rand.New(rand.NewPCG(uint64(n), 9)), rand.New(rand.NewPCG(uint64(n), 9))
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		b.Shuffle(n, func(i, j int) { want[i], want[j] = want[j], want[i] })
		if got := c.perm(a, n); fmt.Sprint(got) != fmt.Sprint(want) || a.Uint64() != b.Uint64() {
			t.Fatalf("perm(%d) = %v, want %v (or the draws differ)", n, got, want)
		}
	}
}
