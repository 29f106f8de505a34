package profiles_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
)

// cell has 40 machines over 4 zones; m000 is cordoned and the machines of
// zone z3 are tainted for ML work.
func cell() *framework.Snapshot {
	s := &framework.Snapshot{}
	for i := range 40 {
		obj := &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%03d", i),
			Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%4), "gpu": fmt.Sprint(i%8 == 1)}},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 16 << 30}}}
		m := &framework.Machine{Name: obj.Metadata.Name, Object: obj, Labels: obj.Metadata.Labels, Capacity: obj.Spec.Capacity,
			Allocated: map[string]int64{}, Unschedulable: i == 0}
		if i%4 == 3 {
			m.Taints = []*troupev1.Taint{{Key: "dedicated", Value: "ml", Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}}
		}
		s.Machines = append(s.Machines, m)
	}
	return s
}

func jobTasks(job string, n int, spec func(*troupev1.TaskSpec)) []*framework.Task {
	var out []*framework.Task
	for i := range n {
		s := &troupev1.TaskSpec{Job: job, Index: int32(i), Template: &troupev1.TaskTemplate{Command: "x",
			Requests: map[string]int64{"cpu": 1000, "memory": 1 << 30}}}
		if spec != nil {
			spec(s)
		}
		out = append(out, framework.NewTask(fmt.Sprintf("/tasks/ns/%s/%d", job, i), &troupev1.Task{Metadata: &troupev1.ObjectMeta{Namespace: "ns"}, Spec: s}))
	}
	return out
}

func profile(t *testing.T, kind string) framework.Profile {
	t.Helper()
	p, _, err := profiles.New(kind, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBatchRespectsConstraints(t *testing.T) {
	snap := cell()
	plan := framework.Schedule(profile(t, profiles.Batch), snap, jobTasks("b", 60, func(s *troupev1.TaskSpec) {
		s.Constraints = &troupev1.Constraints{Cel: "machine.metadata.labels['gpu'] == 'true'"}
	}))
	// gpu machines: i%8 == 1, none in zone z3 (i%4 == 3) and m000 is not
	// one: 5 machines × 4 tasks of 1000 cpu = 20 placements.
	if len(plan.Placements) != 20 || len(plan.Failures) != 40 {
		t.Fatalf("%d placed, %d failed", len(plan.Placements), len(plan.Failures))
	}
	for _, p := range plan.Placements {
		if p.Machine.Labels["gpu"] != "true" || len(p.Machine.Taints) > 0 || p.Machine.Unschedulable {
			t.Fatalf("placed on %s", p.Machine.Name)
		}
	}
}

func TestServiceSpreadsOverZonesAndMachines(t *testing.T) {
	snap := cell()
	plan := framework.Schedule(profile(t, profiles.Service), snap, jobTasks("web", 9, func(s *troupev1.TaskSpec) {
		s.Constraints = &troupev1.Constraints{DistinctMachines: true}
		s.Tolerations = []*troupev1.Toleration{{Key: "dedicated", Operator: troupev1.TolerationOperator_TOLERATION_OPERATOR_EXISTS}}
	}))
	if len(plan.Placements) != 9 {
		t.Fatalf("%d placed: %v", len(plan.Placements), plan.Failures)
	}
	zones, machines := map[string]int{}, map[string]bool{}
	for _, p := range plan.Placements {
		zones[p.Machine.Labels["zone"]]++
		if machines[p.Machine.Name] {
			t.Fatalf("two tasks on %s despite distinct_machines", p.Machine.Name)
		}
		machines[p.Machine.Name] = true
	}
	for z, n := range zones {
		if n < 2 || n > 3 {
			t.Fatalf("zone spread %v (zone %s has %d)", zones, z, n)
		}
	}
}

func TestUnknownKind(t *testing.T) {
	if _, _, err := profiles.New("fancy", nil); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

// A registered kind is built by New like a built-in one, and listed;
// registering a built-in kind or one twice panics.
func TestRegister(t *testing.T) {
	profiles.Register("test-firstfit", func(rng *rand.Rand) (framework.Profile, framework.Modes, error) {
		fs, err := profiles.Filters()
		return framework.Profile{Filters: fs, Rand: rng}, framework.Modes{Txn: framework.AllOrNothing}, err
	})
	p, modes, err := profiles.New("test-firstfit", rand.New(rand.NewPCG(1, 1)))
	if err != nil || len(p.Filters) == 0 || modes.Txn != framework.AllOrNothing {
		t.Fatalf("registered kind: %+v, %+v, %v", p, modes, err)
	}
	if kinds := profiles.Kinds(); !slices.Contains(kinds, "test-firstfit") || kinds[0] != profiles.Batch {
		t.Errorf("kinds %v", kinds)
	}
	if _, _, err := profiles.New("nope", nil); err == nil || !strings.Contains(err.Error(), "test-firstfit") {
		t.Errorf("unknown kind: %v", err)
	}
	for _, kind := range []string{profiles.Batch, "test-firstfit", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", kind)
				}
			}()
			profiles.Register(kind, nil)
		}()
	}
}

// The random profile puts each task on a machine drawn uniformly among
// those with room that the filters pass: never on a full, cordoned or
// tainted one. 19,000 one-task decisions over the 19 machines that take
// the task come to about 1,000 each.
func TestRandomPlacesUniformlyAmongMachinesWithRoom(t *testing.T) {
	snap := cell()
	for i, m := range snap.Machines {
		if i%4 == 2 {
			m.Allocated = map[string]int64{"cpu": 4000} // full
		}
	}
	p := profile(t, profiles.Random)
	counts := map[string]int{}
	const decisions, machines = 19000, 19 // i%4 is 0 or 1, m000 cordoned
	for range decisions {
		plan := framework.Schedule(p, snap, jobTasks("r", 1, nil))
		if len(plan.Placements) != 1 {
			t.Fatalf("not placed: %v", plan.Failures[0].Status)
		}
		counts[plan.Placements[0].Machine.Name]++
	}
	if len(counts) != machines {
		t.Fatalf("placed on %d machines, want %d: %v", len(counts), machines, counts)
	}
	chi2 := 0.0
	for name, n := range counts {
		var i int
		fmt.Sscanf(name, "m%d", &i)
		if i == 0 || i%4 > 1 {
			t.Fatalf("placed on %s (cordoned, full or tainted)", name)
		}
		d := float64(n) - decisions/machines
		chi2 += d * d / (decisions / machines)
	}
	t.Logf("χ² = %.1f", chi2)
	// 18 degrees of freedom: above 42.3 one time in a thousand.
	if chi2 > 42.3 {
		t.Errorf("χ² = %.1f over %v: not uniform", chi2, counts)
	}
}

// A machine stays a candidate for the plan's next task while it has
// room (Google's randomized first fit draws with replacement): of a
// two-task job on two machines with room for two tasks each, both land
// on one machine half the time; a five-task job places four, two on
// each, and the fifth fits nowhere.
func TestRandomDrawsAgainForEachTask(t *testing.T) {
	snap := cell()
	for i, m := range snap.Machines {
		m.Allocated = map[string]int64{"cpu": 4000}
		if i == 1 || i == 2 {
			m.Allocated["cpu"] = 2000
		}
	}
	p := profile(t, profiles.Random)
	same := 0
	const decisions = 4000
	for range decisions {
		plan := framework.Schedule(p, snap, jobTasks("r", 2, nil))
		if len(plan.Placements) != 2 {
			t.Fatalf("%d placed", len(plan.Placements))
		}
		if plan.Placements[0].Machine == plan.Placements[1].Machine {
			same++
		}
	}
	t.Logf("both tasks on one machine in %d of %d decisions", same, decisions)
	// Binomial(4000, 1/2): standard deviation about 32.
	if same < 1850 || same > 2150 {
		t.Errorf("both tasks on one machine in %d of %d decisions, want about half", same, decisions)
	}
	plan := framework.Schedule(p, snap, jobTasks("r", 5, nil))
	on := map[string]int{}
	for _, pl := range plan.Placements {
		on[pl.Machine.Name]++
	}
	if len(plan.Failures) != 1 || on["m001"] != 2 || on["m002"] != 2 {
		t.Fatalf("placements %v, %d failed", on, len(plan.Failures))
	}
	if st := plan.Failures[0].Status; st.Code != framework.Unschedulable || !strings.Contains(st.String(), "0/40 machines fit") {
		t.Errorf("the unfit task's status: %v", st)
	}
}

// The same seed gives the same placements, another seed others.
func TestRandomIsDeterministicPerSeed(t *testing.T) {
	placements := func(seed uint64) []string {
		p, _, err := profiles.New(profiles.Random, rand.New(rand.NewPCG(seed, 7)))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, pl := range framework.Schedule(p, cell(), jobTasks("r", 30, nil)).Placements {
			out = append(out, pl.Machine.Name)
		}
		return out
	}
	a, b, c := placements(1), placements(1), placements(2)
	if len(a) != 30 || !slices.Equal(a, b) {
		t.Fatalf("seed 1 twice: %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 placed alike: %v", a)
	}
}
