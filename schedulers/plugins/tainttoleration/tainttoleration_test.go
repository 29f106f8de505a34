package tainttoleration

import (
	"slices"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

const (
	noSchedule   = troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE
	preferNo     = troupev1.TaintEffect_TAINT_EFFECT_PREFER_NO_SCHEDULE
	noExecute    = troupev1.TaintEffect_TAINT_EFFECT_NO_EXECUTE
	anyEffect    = troupev1.TaintEffect_TAINT_EFFECT_UNSPECIFIED
	equal        = troupev1.TolerationOperator_TOLERATION_OPERATOR_EQUAL
	exists       = troupev1.TolerationOperator_TOLERATION_OPERATOR_EXISTS
	defaultEqual = troupev1.TolerationOperator_TOLERATION_OPERATOR_UNSPECIFIED
)

func taint(k, v string, e troupev1.TaintEffect) *troupev1.Taint {
	return &troupev1.Taint{Key: k, Value: v, Effect: e}
}

func tol(k string, op troupev1.TolerationOperator, v string, e troupev1.TaintEffect) *troupev1.Toleration {
	return &troupev1.Toleration{Key: k, Operator: op, Value: v, Effect: e}
}

func task(tols ...*troupev1.Toleration) *framework.Task {
	return &framework.Task{Task: &troupev1.Task{Spec: &troupev1.TaskSpec{Tolerations: tols}}}
}

func TestTolerates(t *testing.T) {
	gpu := taint("gpu", "a100", noSchedule)
	tests := []struct {
		name  string
		tol   *troupev1.Toleration
		taint *troupev1.Taint
		want  bool
	}{
		{"EQUAL key and value", tol("gpu", equal, "a100", noSchedule), gpu, true},
		{"EQUAL other value", tol("gpu", equal, "h100", noSchedule), gpu, false},
		{"EQUAL other key", tol("ssd", equal, "a100", noSchedule), gpu, false},
		{"EQUAL empty key is not a wildcard", tol("", equal, "a100", noSchedule), gpu, false},
		{"unspecified operator is EQUAL", tol("gpu", defaultEqual, "a100", noSchedule), gpu, true},
		{"unspecified operator, other value", tol("gpu", defaultEqual, "", noSchedule), gpu, false},
		{"EXISTS key, any value", tol("gpu", exists, "ignored", noSchedule), gpu, true},
		{"EXISTS other key", tol("ssd", exists, "", noSchedule), gpu, false},
		{"EXISTS empty key tolerates every key", tol("", exists, "", anyEffect), gpu, true},
		{"unknown operator tolerates nothing", tol("gpu", troupev1.TolerationOperator(9), "a100", anyEffect), gpu, false},
		{"unspecified effect tolerates NO_SCHEDULE", tol("gpu", equal, "a100", anyEffect), gpu, true},
		{"unspecified effect tolerates NO_EXECUTE", tol("gpu", equal, "a100", anyEffect), taint("gpu", "a100", noExecute), true},
		{"unspecified effect tolerates PREFER_NO_SCHEDULE", tol("gpu", equal, "a100", anyEffect), taint("gpu", "a100", preferNo), true},
		{"NO_SCHEDULE does not tolerate NO_EXECUTE", tol("gpu", exists, "", noSchedule), taint("gpu", "a100", noExecute), false},
		{"NO_EXECUTE tolerates NO_EXECUTE", tol("gpu", exists, "", noExecute), taint("gpu", "a100", noExecute), true},
		{"PREFER_NO_SCHEDULE does not tolerate NO_SCHEDULE", tol("gpu", exists, "", preferNo), gpu, false},
		{"taint without effect counts as NO_SCHEDULE", tol("gpu", exists, "", noSchedule), taint("gpu", "", anyEffect), true},
		{"taint without effect is not NO_EXECUTE", tol("gpu", exists, "", noExecute), taint("gpu", "", anyEffect), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tolerates(tc.tol, tc.taint); got != tc.want {
				t.Fatalf("Tolerates = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	machine := &framework.Machine{Name: "m1", Taints: []*troupev1.Taint{
		taint("dedicated", "ml", noSchedule),
		taint("maintenance", "", noExecute),
		taint("spot", "true", preferNo),
	}}
	tests := []struct {
		name string
		task *framework.Task
		want []string // nil: tolerated
	}{
		{"no tolerations", task(), []string{"untolerated taint dedicated=ml:NO_SCHEDULE", "untolerated taint maintenance=:NO_EXECUTE"}},
		{"no task object", &framework.Task{}, []string{"untolerated taint dedicated=ml:NO_SCHEDULE", "untolerated taint maintenance=:NO_EXECUTE"}},
		{"one of two tolerated", task(tol("dedicated", equal, "ml", noSchedule)), []string{"untolerated taint maintenance=:NO_EXECUTE"}},
		{"both tolerated, PREFER_NO_SCHEDULE does not filter",
			task(tol("dedicated", equal, "ml", noSchedule), tol("maintenance", exists, "", noExecute)), nil},
		{"tolerate everything", task(tol("", exists, "", anyEffect)), nil},
		{"wrong effect", task(tol("", exists, "", preferNo)), []string{"untolerated taint dedicated=ml:NO_SCHEDULE", "untolerated taint maintenance=:NO_EXECUTE"}},
	}
	p := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := p.Filter(tc.task, machine)
			if tc.want == nil {
				if !st.IsSuccess() {
					t.Fatalf("Filter = %v, want success", st)
				}
				return
			}
			if st.IsSuccess() || st.Code != framework.Unschedulable || st.Plugin != Name || !slices.Equal(st.Reasons, tc.want) {
				t.Fatalf("Filter = %#v, want unschedulable %q", st, tc.want)
			}
		})
	}
	if st := p.Filter(task(), &framework.Machine{Name: "clean"}); !st.IsSuccess() {
		t.Fatalf("untainted machine: %v", st)
	}
	var _ framework.Static = p
	if p.Name() != "TaintToleration" {
		t.Fatal(p.Name())
	}
}

func TestPreference(t *testing.T) {
	taints := []*troupev1.Taint{
		taint("spot", "true", preferNo),
		taint("old", "", preferNo),
		taint("dedicated", "ml", noSchedule), // not a preference
	}
	tests := []struct {
		name   string
		taints []*troupev1.Taint
		task   *framework.Task
		want   int64
	}{
		{"no taints", nil, task(), framework.MaxScore},
		{"hard taints do not count", taints[2:], task(), framework.MaxScore},
		{"one untolerated", taints[:1], task(), framework.MaxScore / 2},
		{"two untolerated", taints, task(), framework.MaxScore / 3},
		{"one of two tolerated", taints, task(tol("spot", exists, "", preferNo)), framework.MaxScore / 2},
		{"all tolerated", taints, task(tol("", exists, "", anyEffect)), framework.MaxScore},
	}
	p := NewPreference()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Score(tc.task, &framework.Machine{Name: "m", Taints: tc.taints}); got != tc.want {
				t.Fatalf("Score = %d, want %d", got, tc.want)
			}
		})
	}
	if p.Name() != "TaintPreference" {
		t.Fatal(p.Name())
	}
}
