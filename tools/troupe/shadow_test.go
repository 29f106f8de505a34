package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// `troupe scheduler --shadow` as a user runs it: refused with a
// scheduler's certificate, it runs with a viewer's, decides about a
// pending job without binding it, serves its metrics, rewrites its
// report file, and prints a summary when it is stopped.
func TestSchedulerShadow(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	admin := cell.Client()
	ep := cell.EndpointList()
	if _, err := clientlib.Create(ctx, admin, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 8 << 30}}}); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "shadow.json")
	cli{}.expect(ctx, t, 1, nil, lines("not a viewer"),
		append([]string{"scheduler", "--shadow", "--endpoint", ep}, cell.Flags(pki.Identity{Role: pki.RoleScheduler, Name: "s"})...)...)
	cli{}.expect(ctx, t, 2, nil, lines("go with --shadow"), "scheduler", "--shadow-report", report, "--endpoint", ep, "--insecure")

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	args := append([]string{"scheduler", "--shadow", "--kinds", "batch", "--endpoint", ep, "--shadow-report", report,
		"--shadow-report-interval", "10ms"}, cell.Flags(pki.Identity{Role: pki.RoleViewer, Name: "shadow"})...)
	go func() { done <- cli{}.runTo(runCtx, &out, &errOut, args...) }()
	var metricsURL string
	wait.Until(ctx, t, "the banner", func() (bool, string) {
		metricsURL = regexp.MustCompile(`http://\S+/metrics`).FindString(out.String())
		return metricsURL != "", out.String() + errOut.String()
	})
	created := map[string]uint64{} // version by name
	for i := range 2 {
		tk, err := clientlib.Create(ctx, admin, clientlib.Tasks, &troupev1.Task{
			Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("a", int32(i)), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: "a", Index: int32(i), Scheduler: "batch",
				Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 500, "memory": 64 << 20}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		created[tk.GetMetadata().GetName()] = tk.GetMetadata().GetVersion()
	}
	read := func() (shadowReportFile, error) {
		var f shadowReportFile
		b, err := os.ReadFile(report)
		if err == nil {
			err = json.Unmarshal(b, &f)
		}
		return f, err
	}
	placed := func(f shadowReportFile) int { // the tasks of job a the report says are placed, on m
		n := 0
		for _, s := range f.Shadows {
			for _, d := range s.Recent {
				for _, p := range d.Placements {
					if d.Job == "ns/a" && p.Machine == "m" {
						n++
					}
				}
			}
		}
		return n
	}
	wait.Until(ctx, t, "the report to show job a placed", func() (bool, string) {
		f, err := read()
		return err == nil && placed(f) == 2, fmt.Sprint(f, err)
	})
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `troupe_shadow_placements_total{scheduler="shadow-batch-0"} 2`) {
		t.Fatalf("metrics without the shadow's placements:\n%s", body)
	}

	stop()
	if code := <-done; code != 0 {
		t.Fatalf("exit status %d:\n%s%s", code, out.String(), errOut.String())
	}
	// The tasks come in two commits: one decision, or two if the shadow
	// decided about the first before the second arrived.
	for _, want := range []string{"shadow-batch-0 (shadow of batch; fine, incremental)", "decisions about 2 tasks: 2 placed, 0 fit nowhere",
		"2 not placed yet"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in the summary:\n%s", want, out.String())
		}
	}
	b, _ := os.ReadFile(report)
	t.Logf("summary:\n%s\nreport:\n%s", out.String(), b)
	f, err := read()
	if err != nil || len(f.Shadows) != 1 || f.Shadows[0].Tasks != 2 || f.Shadows[0].Agreement.Outstanding != 2 {
		t.Fatalf("final report %+v (%v)", f, err)
	}
	tasks, _, err := clientlib.List(ctx, admin, clientlib.Tasks, "ns/a/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.GetBinding() != nil || tk.GetMetadata().GetVersion() != created[tk.GetMetadata().GetName()] {
			t.Fatalf("task %s changed: %v", tk.GetMetadata().GetName(), tk)
		}
	}
}
