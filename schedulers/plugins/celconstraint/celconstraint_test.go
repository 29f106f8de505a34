package celconstraint

import (
	"strings"
	"sync"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

func task(expr string) *framework.Task {
	return &framework.Task{Task: &troupev1.Task{Spec: &troupev1.TaskSpec{Constraints: &troupev1.Constraints{Cel: expr}}}}
}

func machine() *framework.Machine {
	obj := &troupev1.Machine{
		Metadata: &troupev1.ObjectMeta{Name: "m1", Labels: map[string]string{"arch": "arm64", "zone": "a"}},
		Spec: &troupev1.MachineSpec{
			Capacity: map[string]int64{"cpu": 8000, "gpu": 2},
			Taints:   []*troupev1.Taint{{Key: "dedicated", Value: "ml", Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}},
		},
	}
	return &framework.Machine{Name: "m1", Object: obj, Labels: obj.Metadata.Labels}
}

func newPlugin(t *testing.T, cfg Config) *CELConstraint {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFilter(t *testing.T) {
	// 60³ iterations: far beyond the default cost limit.
	list := "[" + strings.TrimSuffix(strings.Repeat("machine.spec.capacity['gpu'],", 60), ",") + "]"
	expensive := list + ".all(x, " + list + ".all(y, " + list + ".all(z, x + y + z > 0)))"
	tests := []struct {
		name     string
		expr     string
		noObject bool
		wantCode framework.Code
		want     string // substring of the reason
	}{
		{"no expression", "", false, framework.Success, ""},
		{"no expression, no object", "", true, framework.Success, ""},
		{"true", "machine.metadata.labels['arch'] == 'arm64' && machine.spec.capacity['gpu'] >= 2", false, framework.Success, ""},
		{"enum and comprehension", "machine.spec.taints.exists(t, t.effect == troupe.v1.TaintEffect.TAINT_EFFECT_NO_SCHEDULE)", false, framework.Success, ""},
		{"false", "machine.metadata.labels['zone'] == 'b'", false, framework.Unschedulable, `constraint "machine.metadata.labels['zone'] == 'b'" is false`},
		{"guarded missing key is false", "'rack' in machine.metadata.labels && machine.metadata.labels['rack'] == 'r1'", false, framework.Unschedulable, "is false"},
		{"compile error", "machine.nosuchfield == 1", false, framework.Error, `constraint "machine.nosuchfield == 1" does not compile: `},
		{"syntax error", "machine.metadata.labels[", false, framework.Error, "does not compile"},
		{"not a bool", "machine.metadata.name", false, framework.Error, `constraint "machine.metadata.name" does not compile: yields string, not bool`},
		{"runtime error", "machine.metadata.labels['rack'] == 'r1'", false, framework.Error,
			`constraint "machine.metadata.labels['rack'] == 'r1'" could not be evaluated on machine m1: no such key`},
		{"cost limit", expensive, false, framework.Error, "cost limit"},
		{"no machine object", "true", true, framework.Error, `constraint "true": machine m1 has no object`},
	}
	p := newPlugin(t, DefaultConfig())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := machine()
			if tc.noObject {
				m.Object = nil
			}
			st := p.Filter(task(tc.expr), m)
			if tc.wantCode == framework.Success {
				if !st.IsSuccess() {
					t.Fatalf("Filter = %v, want success", st)
				}
				return
			}
			if st.IsSuccess() || st.Code != tc.wantCode || st.Plugin != Name || len(st.Reasons) != 1 || !strings.Contains(st.Reasons[0], tc.want) {
				t.Fatalf("Filter = %#v\nwant code %v with reason containing %q", st, tc.wantCode, tc.want)
			}
		})
	}
}

func TestCostLimitIsConfigurable(t *testing.T) {
	expr := "machine.metadata.labels.all(k, k != '')"
	if st := newPlugin(t, DefaultConfig()).Filter(task(expr), machine()); !st.IsSuccess() {
		t.Fatalf("default limit: %v", st)
	}
	cfg := DefaultConfig()
	cfg.CostLimit = 1
	st := newPlugin(t, cfg).Filter(task(expr), machine())
	if st.IsSuccess() || st.Code != framework.Error || !strings.Contains(st.Reasons[0], "cost limit") {
		t.Fatalf("limit 1: %v, want a cost-limit error", st)
	}
}

func TestCompiledOnce(t *testing.T) {
	p := newPlugin(t, DefaultConfig())
	exprs := []string{"machine.spec.capacity['cpu'] > 1000", "machine.metadata.labels['zone'] == 'a'", "machine.nosuchfield"}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				for _, e := range exprs {
					p.Filter(task(e), machine())
				}
			}
		})
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.compiles != len(exprs) || len(p.programs) != len(exprs) {
		t.Fatalf("compiled %d times, %d cached; want %d each (errors are cached too)", p.compiles, len(p.programs), len(exprs))
	}
}

func TestCacheBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPrograms = 2
	p := newPlugin(t, cfg)
	for _, e := range []string{"true", "false", "1 == 1", "true", "2 == 2"} {
		p.Filter(task(e), machine())
		if n := len(p.programs); n > 2 {
			t.Fatalf("%d programs cached, bound is 2", n)
		}
	}
	if st := p.Filter(task("false"), machine()); st.IsSuccess() || st.Code != framework.Unschedulable {
		t.Fatalf("re-compiled after eviction: %v", st)
	}
}

func TestConfig(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{})
	if err == nil || !strings.Contains(err.Error(), "CostLimit") || !strings.Contains(err.Error(), "MaxPrograms") {
		t.Fatalf("New(Config{}) = %v, want both limits named", err)
	}
	p := newPlugin(t, DefaultConfig())
	if p.Name() != "CELConstraint" {
		t.Fatal(p.Name())
	}
	var _ framework.Static = p
}
