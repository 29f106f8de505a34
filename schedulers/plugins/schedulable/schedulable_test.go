package schedulable

import (
	"testing"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

func TestFilter(t *testing.T) {
	tests := []struct {
		name          string
		unschedulable bool
		wantOK        bool
	}{
		{"schedulable", false, true},
		{"cordoned or lost", true, false},
	}
	p := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := p.Filter(&framework.Task{}, &framework.Machine{Name: "m", Unschedulable: tc.unschedulable})
			if st.IsSuccess() != tc.wantOK {
				t.Fatalf("Filter = %v, want success %v", st, tc.wantOK)
			}
			if !tc.wantOK && (st.Code != framework.Unschedulable || st.Plugin != Name || len(st.Reasons) != 1 || st.Reasons[0] != Reason) {
				t.Fatalf("Filter = %#v", st)
			}
		})
	}
	if p.Name() != "Schedulable" {
		t.Fatal(p.Name())
	}
}
