package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/sim/experiment"
)

// The example's plugin schedules: a sweep with worstfit as the batch
// schedulers' profile writes its report, which names the profile, and
// places the batch jobs' tasks.
func TestWorstFitSweep(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	c := experiment.Command{Name: "simplugin", Stdout: &stderr, Stderr: &stderr}
	err := c.Run(t.Context(), []string{"sweep", "parallel-batch", "-x", "1,2", "-seeds", "1", "-batch-profile", Kind,
		"-config", "../../experiment/testdata/small.yaml", "-out", dir})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	report, err := os.ReadFile(filepath.Join(dir, experiment.ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "profile worstfit") {
		t.Errorf("the report does not name the profile:\n%s", report)
	}
	runs, err := os.ReadFile(filepath.Join(dir, experiment.RunsCSV))
	if err != nil || !strings.Contains(string(runs), ",batch,") {
		t.Fatalf("runs: %v\n%s", err, runs)
	}
}

// worstFit prefers the emptier machine.
func TestWorstFitScore(t *testing.T) {
	p, _, err := profile(nil)
	if err != nil || len(p.Scores) != 1 {
		t.Fatalf("profile %+v, %v", p, err)
	}
	empty, busy := machine(0), machine(6000)
	task := &framework.Task{Requests: map[string]int64{"cpu": 1000, "memory": 1 << 30}}
	if s, b := (worstFit{}).Score(task, empty), (worstFit{}).Score(task, busy); s <= b || s > framework.MaxScore {
		t.Errorf("scores: empty machine %d, busy %d", s, b)
	}
}

func machine(cpu int64) *framework.Machine {
	return &framework.Machine{Capacity: map[string]int64{"cpu": 8000, "memory": 32 << 30},
		Allocated: map[string]int64{"cpu": cpu, "memory": cpu << 20}}
}
