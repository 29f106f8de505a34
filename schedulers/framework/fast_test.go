package framework_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
)

// randomCell returns a cell of machines of random sizes, some cordoned
// or tainted, filled to a random degree with running tasks of random
// priorities, and a few jobs' pending tasks (some with distinct
// machines, label selectors, tolerations, a gpu, or no cpu); a few
// machines have no memory.
func randomCell(seed uint64) (*framework.Snapshot, []*framework.Task) {
	r := rand.New(rand.NewPCG(seed, 1))
	snap := &framework.Snapshot{}
	running := map[string][]*framework.Running{}
	full := r.Float64()
	for i := range 1 + r.IntN(200) {
		cpu, mem := int64(4000*(1+r.IntN(4))), int64(8<<30)*int64(1+r.IntN(4))
		m := &framework.Machine{Name: fmt.Sprintf("m%03d", i), Capacity: map[string]int64{"cpu": cpu, "memory": mem},
			Allocated: map[string]int64{}, Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%3), "kind": fmt.Sprintf("k%d", r.IntN(2))},
			Unschedulable: r.IntN(40) == 0}
		if r.IntN(30) == 0 {
			m.Taints = []*troupev1.Taint{{Key: "dedicated", Value: "x", Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}}
		}
		if r.IntN(5) == 0 {
			m.Capacity["gpu"] = int64(r.IntN(3))
		}
		for k := 0; r.Float64() < full && k < 8; k++ {
			c, mm := int64(250*(1+r.IntN(8))), int64(1<<30)*int64(1+r.IntN(6))
			if m.Allocated["cpu"]+c > cpu || m.Allocated["memory"]+mm > mem {
				break
			}
			m.Allocated["cpu"] += c
			m.Allocated["memory"] += mm
			job := fmt.Sprintf("r%d", r.IntN(20))
			t := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d-%d", job, i, k)},
				Spec: &troupev1.TaskSpec{Job: job, Index: int32(k), Priority: int32(10 * r.IntN(12)),
					Template: &troupev1.TaskTemplate{Requests: map[string]int64{"cpu": c, "memory": mm}}}}
			ft := framework.NewTask(fmt.Sprintf("/tasks/ns/%s/%d-%d", job, i, k), t)
			running[m.Name] = append(running[m.Name], &framework.Running{Key: ft.Key, Task: t, Job: ft.Job, Priority: ft.Priority, Requests: ft.Requests})
			if r.IntN(3) == 0 {
				m.JobTasks = map[string]int{"ns/p": 1}
			}
		}
		if r.IntN(25) == 0 { // a machine without memory fits no task that asks for some
			delete(m.Capacity, "memory")
			delete(m.Allocated, "memory")
		}
		snap.Machines = append(snap.Machines, m)
	}
	snap.Running = func(m string) []*framework.Running { return running[m] }
	var tasks []*framework.Task
	for range 1 + r.IntN(3) {
		spec := &troupev1.TaskSpec{Job: "p", Priority: int32(10 * r.IntN(13)), Constraints: &troupev1.Constraints{
			DistinctMachines: r.IntN(3) == 0}}
		if r.IntN(4) == 0 {
			spec.Constraints.MatchLabels = map[string]string{"kind": "k1"}
		}
		if r.IntN(6) == 0 {
			spec.Tolerations = []*troupev1.Toleration{{Key: "dedicated", Value: "x", Operator: troupev1.TolerationOperator_TOLERATION_OPERATOR_EQUAL}}
		}
		req := map[string]int64{"cpu": int64(250 * (1 + r.IntN(16))), "memory": int64(1<<30) * int64(1+r.IntN(12))}
		if r.IntN(8) == 0 {
			req["gpu"] = 1
		}
		if r.IntN(10) == 0 {
			req["cpu"] = 0
		}
		for range 1 + r.IntN(40) {
			s := proto.CloneOf(spec)
			s.Index = int32(len(tasks))
			s.Template = &troupev1.TaskTemplate{Requests: req}
			t := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p-%d", len(tasks))}, Spec: s}
			tasks = append(tasks, framework.NewTask(fmt.Sprintf("/tasks/ns/p/%d", len(tasks)), t))
		}
	}
	return snap, tasks
}

// fast gives the snapshot the flattened machines (Machine.Flatten),
// flat rooms and preemptible counts a MachineView and the simulator give.
func fast(snap *framework.Snapshot) *framework.Snapshot {
	f := *snap
	f.Machines, f.Rooms = nil, nil
	f.Fixed = 1 // every snapshot of a test's decisions has the same machines
	for _, m := range snap.Machines {
		c := *m
		c.Flatten()
		f.Machines = append(f.Machines, &c)
		f.Rooms = append(f.Rooms, framework.RoomOf(m))
	}
	f.Preemptible = func(below int32) []framework.Evictable {
		out := make([]framework.Evictable, len(snap.Machines))
		for i, m := range snap.Machines {
			for _, r := range snap.Running(m.Name) {
				if r.Priority < below {
					out[i].Tasks++
					out[i].Requests.CPU += max(r.Requests["cpu"], 0)
					out[i].Requests.Memory += max(r.Requests["memory"], 0)
				}
			}
		}
		return out
	}
	return &f
}

// plainFilter hides that a filter is a FitFilter, and plainScore that a
// PreScorePlugin's scorer is an AssumingScore.
type (
	plainFilter struct{ framework.FilterPlugin }
	plainScore  struct{ framework.PreScorePlugin }
)

func (p plainScore) PreScore(t *framework.Task, ms []*framework.Machine) framework.ScorePlugin {
	return struct{ framework.ScorePlugin }{p.PreScorePlugin.PreScore(t, ms)}
}

// plain returns p without what makes decisions fast: no FitFilter, no
// assuming scorers, no Cache.
func plain(p framework.Profile) framework.Profile {
	p.Cache = nil
	p.Filters = append([]framework.FilterPlugin(nil), p.Filters...)
	for i, f := range p.Filters {
		if _, ok := f.(framework.FitFilter); ok {
			p.Filters[i] = plainFilter{f}
		}
	}
	p.Scores = append([]framework.WeightedScore(nil), p.Scores...)
	for i, w := range p.Scores {
		if ps, ok := w.Plugin.(framework.PreScorePlugin); ok {
			p.Scores[i].Plugin = plainScore{ps}
		}
	}
	return p
}

// copies returns copies of tasks, which scores read from their maps
// (Task.CPUMemory).
func copies(tasks []*framework.Task) []*framework.Task {
	out := make([]*framework.Task, len(tasks))
	for i, t := range tasks {
		c := *t
		out[i] = &c
	}
	return out
}

func describe(p *framework.Plan) string {
	var b strings.Builder
	for _, pl := range p.Placements {
		fmt.Fprintf(&b, "%s on %s (%d)", pl.Task.Key, pl.Machine.Name, pl.Score)
		for _, v := range pl.Victims {
			fmt.Fprintf(&b, " evicting %s", v.Key)
		}
		b.WriteString("\n")
	}
	for _, f := range p.Failures {
		fmt.Fprintf(&b, "%s: %v (refused %v of %d)\n", f.Task.Key, f.Status, f.Status.Refused, f.Status.Machines)
	}
	return b.String()
}

// clean makes the cell one where the static filters pass every machine
// for every task (no cordons, taints or label selectors), and the tasks
// with the same constraints share them, as a job's tasks do.
func clean(snap *framework.Snapshot, tasks []*framework.Task) {
	for _, m := range snap.Machines {
		m.Unschedulable, m.Taints = false, nil
	}
	for i, t := range tasks {
		spec := t.Task.GetSpec()
		spec.Constraints.MatchLabels, spec.Tolerations = nil, nil
		if i > 0 && proto.Equal(spec.Constraints, tasks[i-1].Task.GetSpec().GetConstraints()) {
			spec.Constraints = tasks[i-1].Task.GetSpec().GetConstraints()
		}
	}
}

// Passing over machines without room (FitFilter, Rooms), scoring
// flattened machines and tasks (Machine.Flatten, NewTask), skipping
// machines with nothing to evict (Preemptible), resuming preemption's
// search, keeping assuming scorers, caching static verdicts across
// decisions, passing over runs of machines without room in one step
// (roomBlocks) and explaining it without visiting the machines in a
// clean cell (staticClean, from the first decision on the second:
// Snapshot.Fixed), and reusing the last task's keys change
// nothing in the plans, failure reasons and their counts included: the
// built-in profiles decide two jobs in a row on random cells, and on
// clean ones, as they do without any of it.
func TestFastPathsDecideTheSame(t *testing.T) {
	var examined, examinedPlain, preempted int
	for seed := range uint64(400) {
		// random+preempt: the random profile's redraws with preemption,
		// whose search they restart.
		for _, kind := range []string{profiles.Batch, profiles.Service, profiles.Gang, profiles.Random, profiles.Random + "+preempt"} {
			snap, tasks := randomCell(seed / 2)
			if seed%2 == 1 {
				clean(snap, tasks)
			}
			base, preempt := strings.CutSuffix(kind, "+preempt")
			p, _, err := profiles.New(base, rand.New(rand.NewPCG(seed, 5)))
			if err != nil {
				t.Fatal(err)
			}
			q, _, _ := profiles.New(base, rand.New(rand.NewPCG(seed, 5)))
			q = plain(q)
			p.Preempt, q.Preempt = p.Preempt || preempt, q.Preempt || preempt
			for d, ts := range [][]*framework.Task{tasks, tasks[len(tasks)/2:]} {
				got, want := framework.Schedule(p, fast(snap), ts), framework.Schedule(q, snap, copies(ts))
				if g, w := describe(got), describe(want); g != w {
					t.Fatalf("seed %d (clean: %v), %s, decision %d:\n%s\nwant\n%s", seed/2, seed%2 == 1, kind, d, g, w)
				}
				examined, examinedPlain = examined+got.Examined, examinedPlain+want.Examined
				for _, pl := range got.Placements {
					preempted += len(pl.Victims)
				}
			}
		}
	}
	t.Logf("machines examined: %d, without the fast paths %d; %d tasks preempted", examined, examinedPlain, preempted)
	if examined >= examinedPlain || preempted == 0 {
		t.Fatalf("examined %d (plain %d), preempted %d: the fast paths were not exercised", examined, examinedPlain, preempted)
	}
}

// withCompany refuses big tasks (1000 cpu or more) on machines that run
// none of their job's tasks: placing one of the job's tasks on a machine
// can make it acceptable.
type withCompany struct{}

func (withCompany) Name() string { return "WithCompany" }
func (withCompany) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	if t.Requests["cpu"] >= 1000 && m.JobTasks[t.Job] == 0 {
		return framework.NewStatus(framework.Unschedulable, "WithCompany", "none of the job's tasks runs here")
	}
	return nil
}

// A task's preemption search, resumed for an identical task later in the
// plan, looks again at the machines the plan touched in between: big1
// finds nothing to evict anywhere (no company), small joins m0, big2
// then evicts there.
func TestPreemptionSearchLooksAgainAtTouchedMachines(t *testing.T) {
	snap := &framework.Snapshot{}
	running := map[string][]*framework.Running{}
	for i, kind := range []string{"a", "b", "b"} {
		m := &framework.Machine{Name: fmt.Sprintf("m%d", i), Capacity: map[string]int64{"cpu": 4000}, Allocated: map[string]int64{"cpu": 3500},
			Labels: map[string]string{"kind": kind}}
		low := framework.NewTask(fmt.Sprintf("/tasks/ns/low/%d", i), &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: "low", Template: &troupev1.TaskTemplate{Requests: map[string]int64{"cpu": 3500}}}})
		running[m.Name] = []*framework.Running{{Key: low.Key, Task: low.Task, Job: low.Job, Requests: low.Requests}}
		snap.Machines = append(snap.Machines, m)
	}
	snap.Running = func(m string) []*framework.Running { return running[m] }
	task := func(name string, cpu int64, kind string) *framework.Task {
		spec := &troupev1.TaskSpec{Job: "p", Priority: 50, Template: &troupev1.TaskTemplate{Requests: map[string]int64{"cpu": cpu}}}
		if kind != "" {
			spec.Constraints = &troupev1.Constraints{MatchLabels: map[string]string{"kind": kind}}
		}
		return framework.NewTask("/tasks/ns/p/"+name, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns"}, Spec: spec})
	}
	// Between big1 and big2, other evicts (from m1: the plans are
	// seeded), so that big2 is decided again rather than failed like
	// big1.
	other := framework.NewTask("/tasks/ns/q/0", &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns"},
		Spec: &troupev1.TaskSpec{Job: "q", Priority: 50, Template: &troupev1.TaskTemplate{Requests: map[string]int64{"cpu": 900}}}})
	profile, _, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	profile.Filters = append(profile.Filters, withCompany{})
	for _, p := range []framework.Profile{profile, plain(profile)} {
		plan := framework.Schedule(p, fast(snap), []*framework.Task{task("big1", 1000, ""), task("small", 100, "a"), other, task("big2", 1000, "")})
		placed := map[string]string{}
		for _, pl := range plan.Placements {
			placed[pl.Task.Key] = pl.Machine.Name
		}
		if len(plan.Failures) != 1 || plan.Failures[0].Task.Key != "/tasks/ns/p/big1" || placed["/tasks/ns/p/big2"] != "m0" {
			t.Fatalf("plan:\n%s", describe(plan))
		}
	}
}

// A flattened machine (Machine.Flatten, FlattenAs) answers Free, Fits,
// RoomOf and Usage as its maps do, on random machines, some without cpu
// or memory, with a gpu, or with negative counters.
func TestFlattenedMachineAsMaps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	resources := []string{"cpu", "memory", "gpu"}
	for range 5000 {
		m := &framework.Machine{Capacity: map[string]int64{}, Allocated: map[string]int64{}}
		for _, res := range resources {
			if r.IntN(5) > 0 {
				m.Capacity[res] = r.Int64N(5000)
			}
			if r.IntN(4) > 0 {
				m.Allocated[res] = r.Int64N(6000) - 500
			}
		}
		flat, as := *m, *m
		flat.Flatten()
		as.FlattenAs(&flat)
		for _, f := range []*framework.Machine{&flat, &as} {
			if _, ok := f.Usage(); !ok {
				t.Fatal("a flattened machine has no Usage")
			}
			if got, want := framework.RoomOf(f), framework.RoomOf(m); got != want {
				t.Fatalf("RoomOf(%v, %v) = %+v flat, %+v from the maps", m.Capacity, m.Allocated, got, want)
			}
			for _, res := range resources {
				req := r.Int64N(5000) - 100
				if f.Free(res) != m.Free(res) || f.Fits(res, req) != m.Fits(res, req) {
					t.Fatalf("%s of %v, %v: Free %d, Fits(%d) %v flat; %d, %v from the maps", res, m.Capacity, m.Allocated,
						f.Free(res), req, f.Fits(res, req), m.Free(res), m.Fits(res, req))
				}
			}
		}
		if _, ok := m.Usage(); ok {
			t.Fatal("a machine never flattened has a Usage")
		}
		c := flat
		if _, ok := c.Usage(); ok {
			t.Fatal("a copy of a flattened machine has its Usage")
		}
	}
}
