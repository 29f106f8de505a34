package framework

import (
	"math/rand/v2"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// taskKeys gives each task of a decision the keys classKey and fitKey
// give it, on random runs of tasks that share their constraints,
// tolerations and requests, or have copies of them, equal or not.
func TestTaskKeysAsBuilt(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	constraints := []*troupev1.Constraints{nil, {}, {DistinctMachines: true}, {MatchLabels: map[string]string{"kind": "a"}}}
	tolerations := [][]*troupev1.Toleration{nil, {{Key: "dedicated", Value: "x"}}, {{Key: "dedicated", Value: "y"}}}
	requests := []map[string]int64{nil, {"cpu": 500}, {"cpu": 500, "memory": 1 << 30}, {"cpu": 500, "memory": 2 << 30}, {"cpu": 500, "gpu": 1}}
	var keys taskKeys
	var last *Task
	for i := range 20000 {
		tk := &Task{Task: &troupev1.Task{Spec: &troupev1.TaskSpec{Index: int32(i)}}}
		if last != nil && r.IntN(2) == 0 { // as the last task, perhaps with copies
			spec := tk.Task.Spec
			spec.Constraints, spec.Tolerations, tk.Requests = last.Task.Spec.Constraints, last.Task.Spec.Tolerations, last.Requests
			switch r.IntN(4) {
			case 0:
				spec.Constraints = constraints[r.IntN(len(constraints))]
			case 1:
				spec.Tolerations = append([]*troupev1.Toleration(nil), spec.Tolerations...)
			case 2:
				tk.Requests = requests[r.IntN(len(requests))]
			}
		} else {
			tk.Task.Spec.Constraints = constraints[r.IntN(len(constraints))]
			tk.Task.Spec.Tolerations = tolerations[r.IntN(len(tolerations))]
			tk.Requests = requests[r.IntN(len(requests))]
		}
		class, fit := keys.of(tk)
		if wantClass := classKey(tk); class != wantClass || fit != fitKey(wantClass, tk) {
			t.Fatalf("task %d: keys %q, %q; want %q, %q", i, class, fit, wantClass, fitKey(wantClass, tk))
		}
		last = tk
	}
}
