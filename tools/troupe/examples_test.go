package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/plugins/tainttoleration"
)

// The jobs of deploy/examples are valid, and tolerate the hollow machines'
// taint as their comments say: hello runs real processes on real machines
// only; web and train may land on hollow machines.
func TestExamplesTolerateHollowAsDocumented(t *testing.T) {
	tolerates := map[string]bool{"hello": false, "web": true, "train": true}
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := clientlib.DecodeManifests(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, m := range ms {
			job, ok := m.Object.(*troupev1.Job)
			if !ok {
				continue
			}
			clientlib.Default(job) // as a write does
			if err := clientlib.Validate(clientlib.Jobs, job); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			name := job.GetMetadata().GetName()
			want, ok := tolerates[name]
			if !ok {
				t.Errorf("%s: job %s: say here whether it may land on hollow machines", f, name)
				continue
			}
			seen++
			if got := tainttoleration.Tolerated(job.GetSpec().GetTolerations(), agent.HollowTaint()); got != want {
				t.Errorf("%s: job %s tolerates the hollow taint: %v, want %v", f, name, got, want)
			}
		}
	}
	if seen != len(tolerates) {
		t.Errorf("%d of the %d example jobs found", seen, len(tolerates))
	}
}
