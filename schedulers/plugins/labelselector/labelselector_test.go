package labelselector

import (
	"slices"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

func task(ml map[string]string, exprs ...*troupev1.LabelRequirement) *framework.Task {
	return &framework.Task{Task: &troupev1.Task{Spec: &troupev1.TaskSpec{
		Constraints: &troupev1.Constraints{MatchLabels: ml, MatchExpressions: exprs}}}}
}

func req(key string, op troupev1.LabelOperator, values ...string) *troupev1.LabelRequirement {
	return &troupev1.LabelRequirement{Key: key, Operator: op, Values: values}
}

const (
	in           = troupev1.LabelOperator_LABEL_OPERATOR_IN
	notIn        = troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN
	exists       = troupev1.LabelOperator_LABEL_OPERATOR_EXISTS
	doesNotExist = troupev1.LabelOperator_LABEL_OPERATOR_DOES_NOT_EXIST
)

func TestFilter(t *testing.T) {
	machine := &framework.Machine{Name: "m1", Labels: map[string]string{"zone": "a", "gpu": "a100", "ssd": ""}}
	tests := []struct {
		name     string
		task     *framework.Task
		wantCode framework.Code
		want     []string
	}{
		{"no task object", &framework.Task{}, framework.Success, nil},
		{"no constraints", task(nil), framework.Success, nil},
		{"match_labels equal", task(map[string]string{"zone": "a", "gpu": "a100"}), framework.Success, nil},
		{"match_labels empty value present", task(map[string]string{"ssd": ""}), framework.Success, nil},
		{"match_labels differ and missing, sorted by key", task(map[string]string{"zone": "b", "rack": "r1"}), framework.Unschedulable,
			[]string{`label rack is missing, want "r1"`, `label zone is "a", want "b"`}},
		{"match_labels empty value missing", task(map[string]string{"arm": ""}), framework.Unschedulable,
			[]string{`label arm is missing, want ""`}},
		{"IN matches", task(nil, req("gpu", in, "h100", "a100")), framework.Success, nil},
		{"IN other value", task(nil, req("gpu", in, "h100")), framework.Unschedulable,
			[]string{`label gpu is "a100", want one of ["h100"]`}},
		{"IN missing label", task(nil, req("rack", in, "r1")), framework.Unschedulable,
			[]string{`label rack is missing, want one of ["r1"]`}},
		{"IN no values", task(nil, req("zone", in)), framework.Unschedulable,
			[]string{`label zone is "a", want one of []`}},
		{"NOT_IN other value", task(nil, req("zone", notIn, "b", "c")), framework.Success, nil},
		{"NOT_IN missing label", task(nil, req("rack", notIn, "r1")), framework.Success, nil},
		{"NOT_IN listed value", task(nil, req("zone", notIn, "b", "a")), framework.Unschedulable,
			[]string{`label zone is "a", want none of ["b" "a"]`}},
		{"EXISTS present", task(nil, req("ssd", exists)), framework.Success, nil},
		{"EXISTS ignores values", task(nil, req("zone", exists, "zzz")), framework.Success, nil},
		{"EXISTS missing", task(nil, req("rack", exists)), framework.Unschedulable,
			[]string{"label rack is missing, want it present"}},
		{"DOES_NOT_EXIST missing", task(nil, req("rack", doesNotExist, "ignored")), framework.Success, nil},
		{"DOES_NOT_EXIST present", task(nil, req("gpu", doesNotExist)), framework.Unschedulable,
			[]string{`label gpu is "a100", want it absent`}},
		{"all requirements must hold", task(map[string]string{"zone": "a"}, req("gpu", exists), req("rack", exists), req("zone", notIn, "a")),
			framework.Unschedulable, []string{"label rack is missing, want it present", `label zone is "a", want none of ["a"]`}},
		{"unspecified operator is an error", task(nil, req("zone", exists), req("gpu", troupev1.LabelOperator_LABEL_OPERATOR_UNSPECIFIED, "a100")),
			framework.Error, []string{`match_expressions[1]: key "gpu": unsupported operator LABEL_OPERATOR_UNSPECIFIED`}},
		{"unknown operator is an error", task(nil, req("gpu", troupev1.LabelOperator(42))),
			framework.Error, []string{`match_expressions[0]: key "gpu": unsupported operator 42`}},
	}
	p := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := p.Filter(tc.task, machine)
			if tc.wantCode == framework.Success {
				if !st.IsSuccess() {
					t.Fatalf("Filter = %v, want success", st)
				}
				return
			}
			if st.IsSuccess() || st.Code != tc.wantCode || st.Plugin != Name || !slices.Equal(st.Reasons, tc.want) {
				t.Fatalf("Filter = %#v\nwant code %v reasons %q", st, tc.wantCode, tc.want)
			}
		})
	}
}

func TestMachineWithoutLabels(t *testing.T) {
	p := New()
	m := &framework.Machine{Name: "bare"}
	if st := p.Filter(task(nil, req("zone", notIn, "a"), req("gpu", doesNotExist)), m); !st.IsSuccess() {
		t.Fatalf("absent-label requirements on an unlabeled machine: %v", st)
	}
	if st := p.Filter(task(map[string]string{"zone": "a"}), m); st.IsSuccess() {
		t.Fatal("match_labels matched an unlabeled machine")
	}
	var _ framework.Static = p
	if p.Name() != "LabelSelector" {
		t.Fatal(p.Name())
	}
}
