package distinctmachines

import (
	"slices"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

func TestFilter(t *testing.T) {
	task := func(distinct bool) *framework.Task {
		return &framework.Task{Job: "ns/web", Task: &troupev1.Task{Spec: &troupev1.TaskSpec{
			Constraints: &troupev1.Constraints{DistinctMachines: distinct}}}}
	}
	tests := []struct {
		name     string
		task     *framework.Task
		jobTasks map[string]int
		want     []string // nil: fits
	}{
		{"off, machine has the job's tasks", task(false), map[string]int{"ns/web": 3}, nil},
		{"off, no task object", &framework.Task{Job: "ns/web"}, map[string]int{"ns/web": 1}, nil},
		{"on, empty machine", task(true), nil, nil},
		{"on, other jobs only", task(true), map[string]int{"ns/db": 2, "other/web": 1}, nil},
		{"on, zero count", task(true), map[string]int{"ns/web": 0}, nil},
		{"on, machine has one", task(true), map[string]int{"ns/web": 1},
			[]string{"machine already runs a task of job ns/web (distinct_machines)"}},
		{"on, machine has several", task(true), map[string]int{"ns/web": 4},
			[]string{"machine already runs a task of job ns/web (distinct_machines)"}},
	}
	p := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := p.Filter(tc.task, &framework.Machine{Name: "m1", JobTasks: tc.jobTasks})
			if tc.want == nil {
				if !st.IsSuccess() {
					t.Fatalf("Filter = %v, want success", st)
				}
				return
			}
			if st.IsSuccess() || st.Code != framework.Unschedulable || st.Plugin != Name || !slices.Equal(st.Explain(), tc.want) {
				t.Fatalf("Filter = %#v, want unschedulable %q", st, tc.want)
			}
		})
	}
	if _, ok := any(p).(framework.Static); ok {
		t.Fatal("DistinctMachines depends on placements and must not be Static")
	}
	if p.Name() != "DistinctMachines" {
		t.Fatal(p.Name())
	}
}
