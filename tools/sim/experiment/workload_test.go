package experiment

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// googleDir writes a one-part Google trace of lines into a new
// directory.
func googleDir(t *testing.T, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "task_events"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(strings.Join(lines, "\n") + "\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "task_events", "part-00000-of-00001.csv.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// windowGoogle is a tiny trace whose window [100 s, 200 s) starts with
// four tasks of three jobs running (50 s, until the end, until the end
// and 60 s left), three tasks pending (submitted at 0) and one job
// submitted in it, at 150 s (workload's TestGoogleWindow has the
// details). Job 1 is a service, the others batch; every task requests
// 1/32 of the largest machine.
func windowGoogle(t *testing.T) string {
	ev := func(sec, job, task, typ int) string {
		class, prio := 0, 0
		if job == 1 {
			class, prio = 3, 9
		}
		return fmt.Sprintf("%d,,%d,%d,m,%d,u,%d,%d,0.03125,0.03125,0,0", sec*1e6, job, task, typ, class, prio)
	}
	const submit, schedule, evict, finish, kill = 0, 1, 2, 4, 5
	return googleDir(t,
		ev(0, 1, 0, submit), ev(0, 1, 0, schedule), ev(0, 1, 1, submit), ev(10, 1, 1, schedule),
		ev(20, 2, 0, submit), ev(20, 2, 1, submit), ev(30, 2, 0, schedule),
		ev(40, 3, 0, submit), ev(40, 3, 1, submit), ev(40, 3, 1, schedule), ev(50, 3, 0, schedule),
		ev(60, 2, 0, finish), ev(80, 3, 0, evict), ev(80, 3, 0, submit),
		ev(90, 4, 0, submit), ev(90, 4, 1, submit), ev(95, 4, 0, kill),
		ev(105, 8, 0, kill), ev(110, 3, 0, schedule), ev(120, 2, 1, schedule), ev(120, 1, 2, submit),
		ev(125, 1, 2, schedule), ev(130, 2, 1, finish), ev(135, 1, 2, finish), ev(140, 3, 1, evict),
		ev(150, 1, 0, finish), ev(150, 5, 0, submit), ev(155, 5, 0, schedule), ev(160, 7, 0, finish),
		ev(170, 3, 0, finish), ev(210, 6, 0, submit), ev(215, 6, 0, schedule), ev(300, 5, 0, finish))
}

// TestGoogleWindowRun: troupe sim over a window of a trace prints what
// it read before the run, starts with the tasks running at the window's
// start placed (outside the measures), its clock at the window's start,
// and the schedulers get the pending tasks at 0 and the jobs submitted
// in the window.
func TestGoogleWindowRun(t *testing.T) {
	dir := windowGoogle(t)
	stdout, stderr := command(t, "-google", dir, "-from", "100s", "-to", "200s", "-machines", "10")
	for _, want := range []string{
		"33 events, 0s to 5m0s",
		"window [1m40s, 3m20s) of the trace's time, virtual time 0 at 1m40s: 13 events in it",
		"replayed: 4 jobs, 4 tasks (of them at 0, pending at the start: 3 jobs, 3 tasks)",
		"running at the start, placed at 0: 4 tasks of 3 jobs",
		"skipped: resubmitted: 1 events; never scheduled: 1 tasks (1 events); ended before the window: 2 tasks (5 events); submitted after the window: 1 tasks (2 events); killed, not seen before: 1 tasks (1 events)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Index(stderr, "running at the start") > strings.Index(stderr, "of virtual time in") {
		t.Errorf("the report comes after the run:\n%s", stderr)
	}
	var st sim.Stats
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatal(err)
	}
	if p := st.Prefill; p == nil || p.Jobs != 3 || p.Tasks != 4 || p.NotPlaced != 0 || p.TargetCPU != 0 {
		t.Errorf("prefill %+v, want the 4 running tasks of 3 jobs placed", p)
	}
	jobs := map[string]int{}
	for _, s := range st.Schedulers {
		jobs[s.Name] = s.Jobs
	}
	if jobs["batch-0"] != 3 || jobs["service-0"] != 1 {
		t.Errorf("jobs by scheduler %v, want 2, 3.pending and 5 batch, 1.pending a service", jobs)
	}
	// The clock starts at the window: the run covers at most its 100 s.
	if st.DurationSeconds <= 0 || st.DurationSeconds > 100 {
		t.Errorf("%v s of virtual time, want at most the window's 100", st.DurationSeconds)
	}

	w, err := WorkloadFlags{Google: dir, From: 100 * time.Second, To: 200 * time.Second, Machines: 10, Compress: 1, CellScale: 1}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if w.Span != 100*time.Second || w.Report == nil || w.Report.RunningTasks != 4 {
		t.Errorf("span %v, report %+v", w.Span, w.Report)
	}
	src, err := w.Source(1)
	if err != nil {
		t.Fatal(err)
	}
	if workload.ReportOf(src) != w.Report || workload.PrefillOf(src) == nil {
		t.Error("the source lacks the report or the running tasks")
	}
}

// TestWorkloadEarlyErrors: a window that replays nothing of a trace, a
// cell for a synthetic workload, a bad cell file: errors before the run.
func TestWorkloadEarlyErrors(t *testing.T) {
	dir := windowGoogle(t)
	late := googleDir(t, "100000000,,1,0,m,4,u,3,9,0.1,0.1,0,0", "200000000,,2,0,m,0,u,0,0,0.1,0.1,0,0")
	csv := writeTemp(t, "t.csv", "submit_time,job,task_index,cpu,memory,duration,priority,type\n"+
		"0,a,0,0.25,1,60,1,batch\n90.5,b,0,0.25,1,600,1,service\n")
	cell := writeTemp(t, "cell.yaml", "cell:\n  shapes:\n    - {name: m, count: 3, cpu_cores: 4, memory_gib: 16, size: big}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-google", late, "-from", "50s"}, "-from 50s, -to the end: google trace: the window holds nothing of the trace: it starts at 50s, before the first event read, at 1m40s"},
		{[]string{"-google", dir, "-from", "301s"}, "after the last event read, at 5m0s"},
		{[]string{"-google", dir, "-from", "220s", "-to", "290s"}, "no event in [3m40s, 4m50s)"},
		{[]string{"-csv", csv, "-from", "91s"}, "after the last submission, at 1m30.5s"},
		{[]string{"-csv", csv, "-from", "1s", "-to", "90s"}, "no job is submitted in [1s, 1m30s)"},
		{[]string{"-config", "testdata/small.yaml", "-cell", cell}, "-cell " + cell + ": for a trace"},
		{[]string{"-csv", csv, "-cell", cell}, "field size not found"},
		{[]string{"-csv", csv, "-cell", csv}, "-cell: "},
	} {
		var out, errs bytes.Buffer
		err := Command{Name: "troupe sim", Stdout: &out, Stderr: &errs}.Run(t.Context(), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		}
		if out.Len() > 0 {
			t.Errorf("%q: a run's output %q", tc.args, out.String())
		}
	}
}

func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWorkloadWarnings: tasks that fit no machine, running tasks the
// cell cannot hold, a CSV trace without its cell: warnings, written to
// the log before any run.
func TestWorkloadWarnings(t *testing.T) {
	csv := writeTemp(t, "t.csv", "submit_time,job,task_index,cpu,memory,duration,priority,type,match_labels\n"+
		"0,a,0,0.25,1,60,1,batch,\n"+
		"1,big,0,64,1,60,1,batch,\n1,big,1,2,512,60,1,batch,\n1,big,2,1,1,60,1,batch,\n"+
		"2,ssd,0,1,1,60,1,service,disk=ssd\n")
	var log bytes.Buffer
	w, err := WorkloadFlags{CSV: csv, Machines: 10, Compress: 1, CellScale: 1, Log: &log}.Open()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"warning: 3 tasks of 2 jobs fit no machine of the cell (the largest machine: 32 cores, 128 GiB) and will never be placed; the largest: job big task 1, 2 cores and 512 GiB",
		"warning: a CSV trace on the Google 2011 cell's mix of -machines 10: give its own cell with -cell FILE.yaml",
		"CSV trace " + csv + ": 5 events, 0s to 2s",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if len(w.Warnings) != 2 {
		t.Errorf("warnings %q", w.Warnings)
	}
	// The cell of a file (a synthetic config's will do) holds the ssd
	// job if its machines have the label, and the 64-core task nowhere.
	cell := writeTemp(t, "cell.yaml", "cell:\n  shapes:\n    - {name: m, count: 3, cpu_cores: 4, memory_gib: 16, labels: {disk: ssd}}\n")
	log.Reset()
	if w, err = (WorkloadFlags{CSV: csv, Cell: cell, Machines: 10, Compress: 1, CellScale: 1, Log: &log}).Open(); err != nil {
		t.Fatal(err)
	}
	if len(w.Cell) != 3 || len(w.Warnings) != 1 || !strings.Contains(w.Warnings[0], "2 tasks of 1 jobs fit no machine of the cell (the largest machine: 4 cores, 16 GiB)") ||
		!strings.Contains(w.Desc, "on the cell of "+cell) {
		t.Errorf("cell of %d machines, desc %q, warnings %q", len(w.Cell), w.Desc, w.Warnings)
	}
	if w, err = (WorkloadFlags{CSV: csv, Cell: "testdata/small.yaml", Compress: 1, CellScale: 1}).Open(); err != nil || len(w.Cell) != 24 {
		t.Errorf("the cell of a synthetic config: %v", err)
	}

	// Running tasks that the cell cannot hold: the window's four take a
	// core each, the cell of one 4-core machine has 4 (no warning), of
	// a 2-core one 2.
	dir := windowGoogle(t)
	for _, tc := range []struct {
		cores string
		warn  bool
	}{{"4", false}, {"2", true}} {
		cell := writeTemp(t, "cell.yaml", "cell: {shapes: [{name: m, count: 1, cpu_cores: "+tc.cores+", memory_gib: 16}]}\n")
		w, err := WorkloadFlags{Google: dir, Cell: cell, From: 100 * time.Second, Compress: 1, CellScale: 1}.Open()
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(w.Warnings, "\n")
		if strings.Contains(got, "request 200% of the cell's CPU") != tc.warn {
			t.Errorf("%s cores: warnings %q", tc.cores, got)
		}
	}
}

// TestWorkloadCheck: a job type no scheduler serves is an error naming
// the first such job and how many there are (of a synthetic workload:
// its classes).
func TestWorkloadCheck(t *testing.T) {
	w, err := WorkloadFlags{Google: windowGoogle(t), From: 100 * time.Second, Machines: 10, Compress: 1, CellScale: 1}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(Params{Batch: 1, Service: 1}); err != nil {
		t.Error(err)
	}
	err = w.Check(Params{Batch: 1, Service: 0})
	if want := "-service 0: no scheduler would serve the workload's service jobs, 2 of them (the first: job 1, running at the start); give -service 1 or more"; err == nil || err.Error() != want {
		t.Errorf("-service 0: %v, want %q", err, want)
	}
	if err := w.Check(Params{Batch: 0, Service: 1}); err == nil || !strings.Contains(err.Error(), "batch jobs, 6 of them (the first: job 3, running at the start)") {
		t.Errorf("-batch 0: %v", err)
	}
	c, err := WorkloadFlags{Config: "testdata/small.yaml", Compress: 1, CellScale: 1}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(Params{Batch: 2, Service: 0}); err == nil || !strings.Contains(err.Error(), "service jobs, of 1 class(es) (the first: class service's service-1)") {
		t.Errorf("synthetic -service 0: %v", err)
	}
	if b, err := (WorkloadFlags{Config: "testdata/batch-only.yaml", Compress: 1, CellScale: 1}).Open(); err != nil || b.Check(Params{Batch: 1}) != nil {
		t.Errorf("a batch-only workload needs no service scheduler: %v", err)
	}
}
