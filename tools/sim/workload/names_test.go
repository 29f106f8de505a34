package workload

import (
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// TestNamesAgreeWithCell: the job IDs and labels a CSV trace may give
// are those the cell's validation takes in the tasks the simulator
// writes (up to MaxJobID characters).
func TestNamesAgreeWithCell(t *testing.T) {
	task := func(job string, labels map[string]string) *troupev1.Task {
		return &troupev1.Task{
			Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, 12), Namespace: "sim"},
			Spec: &troupev1.TaskSpec{Job: job, Index: 12, Constraints: &troupev1.Constraints{MatchLabels: labels},
				Template: &troupev1.TaskTemplate{Command: "sim", Requests: map[string]int64{"cpu": 1, "memory": 1}}},
		}
	}
	for _, id := range []string{"a", "1", "6251812952", "etl-7", "a.b", "a.b-c.d", strings.Repeat("x", MaxJobID),
		"", "Web", "j_1", "a/b", "a..b", "-a", "a-", ".a", "a.", "a b", "é"} {
		ours := checkJobID(id) == nil && id != ""
		cell := clientlib.Validate(clientlib.Tasks, task(id, nil)) == nil
		if ours != cell {
			t.Errorf("job %q: the trace reader takes it: %v, the cell: %v", id, ours, cell)
		}
	}
	for _, kv := range [][2]string{{"disk", "ssd"}, {"troupe.io/disk", "ssd_1"}, {"Zone", ""}, {"a.b-c_d", "X.y-z"},
		{"-disk", "ssd"}, {"disk", "s s"}, {"Troupe.IO/disk", "x"}, {"disk", strings.Repeat("v", 64)}, {strings.Repeat("k", 64), "v"},
		{"a/b/c", "v"}, {"disk", "_x"}} {
		ours := checkLabel(kv[0], kv[1]) == nil
		cell := clientlib.Validate(clientlib.Tasks, task("a", map[string]string{kv[0]: kv[1]})) == nil
		if ours != cell {
			t.Errorf("label %s=%s: the trace reader takes it: %v, the cell: %v", kv[0], kv[1], ours, cell)
		}
	}
}
