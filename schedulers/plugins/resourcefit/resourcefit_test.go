package resourcefit

import (
	"slices"
	"testing"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

func TestFilter(t *testing.T) {
	machine := &framework.Machine{
		Name:      "m1",
		Capacity:  map[string]int64{"cpu": 4000, "memory": 1000, "gpu": 0},
		Allocated: map[string]int64{"cpu": 3800, "memory": 400},
	}
	tests := []struct {
		name     string
		requests map[string]int64
		want     []string // nil: fits
	}{
		{"no requests", nil, nil},
		{"fits", map[string]int64{"cpu": 100, "memory": 600}, nil},
		{"fits exactly", map[string]int64{"cpu": 200, "memory": 600}, nil},
		{"zero request of a missing resource", map[string]int64{"fpga": 0, "cpu": 1}, nil},
		{"cpu does not fit", map[string]int64{"cpu": 500, "memory": 1},
			[]string{"insufficient cpu: requested 500m, free 200m"}},
		{"missing resource", map[string]int64{"fpga": 1},
			[]string{"machine has no fpga: requested 1"}},
		{"zero capacity", map[string]int64{"gpu": 1},
			[]string{"insufficient gpu: requested 1, free 0"}},
		{"every misfit, sorted", map[string]int64{"memory": 601, "cpu": 201, "fpga": 2, "gpu": 0},
			[]string{"insufficient cpu: requested 201m, free 200m", "machine has no fpga: requested 2", "insufficient memory: requested 601, free 600"}},
	}
	p := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := p.Filter(&framework.Task{Requests: tc.requests}, machine)
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
}

func TestNotStatic(t *testing.T) {
	if _, ok := any(New()).(framework.Static); ok {
		t.Fatal("ResourceFit depends on allocations and must not be Static")
	}
	if New().Name() != "ResourceFit" {
		t.Fatal(New().Name())
	}
}
