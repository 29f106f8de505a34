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
