package workload

import (
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// sampleDir is the shared sample of the trace, beside the repository.
const sampleDir = "../../../../shared/traces/google-2011"

func needSample(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(sampleDir); err != nil {
		tb.Skipf("no Google trace sample: %v", err)
	}
}

// TestGoogleSample reads the 8 parts of the sample (about 1 s) and
// checks the event counts against its README.
func TestGoogleSample(t *testing.T) {
	needSample(t)
	tr, err := ReadGoogle2011(sampleDir, DefaultGoogleOptions())
	if err != nil {
		t.Fatal(err)
	}
	st := tr.Stats
	want := [9]int{540421, 508208, 87858, 10636, 182872, 99317, 0, st.Events[7], st.Events[8]}
	if st.Events != want {
		t.Errorf("events by type %v, README says %v", st.Events, want)
	}
	// Every SUBMIT is a replayed task, a resubmission or a task that
	// never ran.
	if got := st.Tasks + st.Resubmissions + st.NeverRan; got != st.Events[evSubmit] {
		t.Errorf("tasks %d + resubmissions %d + never ran %d = %d, want the %d SUBMITs", st.Tasks, st.Resubmissions, st.NeverRan, got, st.Events[evSubmit])
	}
	if len(tr.Jobs) == 0 || len(tr.Jobs) > 12540 {
		t.Errorf("%d jobs, want some and at most the README's 12,540 job SUBMITs", len(tr.Jobs))
	}
	if st.End < 11*time.Hour || st.End > 11*time.Hour+20*time.Minute {
		t.Errorf("last event at %v, want about 11.3 h", st.End)
	}
	o := DefaultGoogleOptions()
	tasks, services := 0, 0
	for i, j := range tr.Jobs {
		if i > 0 && j.Submit < tr.Jobs[i-1].Submit {
			t.Fatalf("job %s at %v after job %s at %v", j.ID, j.Submit, tr.Jobs[i-1].ID, tr.Jobs[i-1].Submit)
		}
		if j.Type == Service {
			services++
		}
		for _, task := range j.Tasks {
			if task.CPU > o.LargestCPU || task.Memory > o.LargestMemory || task.Duration < 0 || task.Duration > st.End {
				t.Fatalf("job %s task %d: %+v out of range", j.ID, task.Index, task)
			}
		}
		tasks += len(j.Tasks)
	}
	if tasks != st.Tasks {
		t.Errorf("%d tasks in jobs, stats say %d", tasks, st.Tasks)
	}
	// The Omega split makes a minority of the jobs services.
	if services == 0 || services > len(tr.Jobs)/5 {
		t.Errorf("%d service jobs of %d", services, len(tr.Jobs))
	}
	t.Logf("%d jobs (%d services), %+v", len(tr.Jobs), services, st)
}

// TestGooglePartsAndUntil reads less of the sample.
func TestGooglePartsAndUntil(t *testing.T) {
	needSample(t)
	o := DefaultGoogleOptions()
	o.Parts, o.Until = 1, time.Hour
	tr, err := ReadGoogle2011(sampleDir, o)
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats; st.End >= time.Hour || st.Events[evSubmit] == 0 {
		t.Errorf("read up to %v with %d SUBMITs, want some before 1h", st.End, st.Events[evSubmit])
	}
	if last := tr.Jobs[len(tr.Jobs)-1]; last.Submit >= time.Hour {
		t.Errorf("job %s submitted at %v, after Until", last.ID, last.Submit)
	}
}

// writeGoogle writes a one-part trace of lines into a new directory.
func writeGoogle(t *testing.T, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "task_events"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "task_events", "part-00000-of-00001.csv.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if _, err := zw.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(zw.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGoogleRules checks the replay rules of the package comment on a
// small trace. Columns: time (µs), missing, job, index, machine, event,
// user, class, priority, cpu, memory, disk, distinct.
func TestGoogleRules(t *testing.T) {
	dir := writeGoogle(t,
		"0,,1,0,m1,0,u,3,9,0.5,0.25,0,0",          // service job 1, task 0
		"0,,1,0,m1,1,u,3,9,0.5,0.25,0,0",          // runs to the end: Duration 0
		"0,2,1,1,,0,u,3,9,,,,",                    // task 1 without requests
		"5,,9,0,m3,1,u,0,0,0.1,0.1,0,0",           // first seen scheduled: pending before the first event
		"600000000,,1,1,m2,1,u,3,9,0.125,0.5,0,0", // its requests come later
		"700000000,,1,1,m2,4,u,3,9,,,,",           // finishes after 100 s
		"1000000000,,2,0,,0,u,0,0,0.25,0.25,0,1",  // batch job 2, distinct
		"1000000000,,2,1,,0,u,0,0,0.25,0.25,0,1",
		"1001000000,,2,0,m4,1,u,0,0,0.25,0.25,0,1",
		"1002000000,,2,0,m4,2,u,0,0,0.25,0.25,0,1", // evicted,
		"1002000000,,2,0,,0,u,0,0,0.25,0.25,0,1",   // resubmitted: not replayed
		"1003000000,,2,1,,5,u,0,0,0.25,0.25,0,1",   // killed while pending: dropped
		"1005000000,,2,0,m5,1,u,0,0,0.25,0.25,0,1",
		"1015000000,,2,0,m5,3,u,0,0,0.25,0.25,0,1", // fails after 10 s
		"2000000000,,3,0,,0,u,1,2,0.1,0.1,0,0",     // job 3 never runs: dropped
		"3000000000,,4,0,,0,u,1,2,0.1,0.1,0,0",
		"3000000000,,4,0,m6,1,u,1,2,0.1,0.1,0,0",
	)
	o := DefaultGoogleOptions()
	tr, err := ReadGoogle2011(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	cores := func(f float64) int64 { return int64(f * float64(o.LargestCPU)) }
	gib := func(f float64) int64 { return int64(f * float64(o.LargestMemory)) }
	want := []Job{
		{ID: "9", Submit: 0, Type: Batch, Priority: 10, Tasks: []Task{{Index: 0, CPU: cores(0.1), Memory: gib(0.1)}}},
		{ID: "1", Submit: 0, Type: Service, Priority: 100, Tasks: []Task{
			{Index: 0, CPU: cores(0.5), Memory: gib(0.25)},
			{Index: 1, CPU: cores(0.125), Memory: gib(0.5), Duration: 100 * time.Second}}},
		{ID: "2", Submit: 1000 * time.Second, Type: Batch, Priority: 10, DistinctMachines: true, Tasks: []Task{
			{Index: 0, CPU: cores(0.25), Memory: gib(0.25), Duration: 10 * time.Second}}},
		{ID: "4", Submit: 3000 * time.Second, Type: Batch, Priority: 30, Tasks: []Task{
			{Index: 0, CPU: cores(0.1), Memory: gib(0.1)}}},
	}
	assertJobs(t, tr.Jobs, want)
	wantStats := GoogleStats{Events: [9]int{7, 6, 1, 1, 1, 1}, Tasks: 5, UntilEnd: 3, Resubmissions: 1, NeverRan: 2, Inferred: 1, End: 3000 * time.Second}
	if tr.Stats != wantStats {
		t.Errorf("stats\n%+v, want\n%+v", tr.Stats, wantStats)
	}

	// Until stops before job 4; job 2's task still ran.
	o.Until = 2500 * time.Second
	if tr, err = ReadGoogle2011(dir, o); err != nil {
		t.Fatal(err)
	}
	assertJobs(t, tr.Jobs, want[:3])
}

func assertJobs(t *testing.T, got, want []Job) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d jobs %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Submit != w.Submit || g.Type != w.Type || g.Priority != w.Priority ||
			g.DistinctMachines != w.DistinctMachines || !equalLabels(g.MatchLabels, w.MatchLabels) || !slices.Equal(g.Tasks, w.Tasks) {
			t.Errorf("job %d:\n%+v, want\n%+v", i, g, w)
		}
	}
}

func equalLabels(a, b map[string]string) bool { return FormatLabels(a) == FormatLabels(b) }

func TestGoogleMalformedRows(t *testing.T) {
	good := "0,,1,0,m1,0,u,3,9,0.5,0.25,0,0"
	for _, tc := range []struct {
		name, row string
		column    int
		want      string
	}{
		{"fields", "0,,1,0,m1,0,u,3,9,0.5,0.25,0", 0, "12 fields, want 13"},
		{"time", "x,,1,1,m1,0,u,3,9,0.5,0.25,0,0", 1, `column 1 (time): "x" is not an integer of 64 bits`},
		{"job", "0,,,1,m1,0,u,3,9,0.5,0.25,0,0", 3, "column 3 (job ID): missing"},
		{"event", "0,,1,1,m1,12,u,3,9,0.5,0.25,0,0", 6, "event type 12 is not 0-8"},
		{"priority", "0,,2,0,m1,0,u,3,15,0.5,0.25,0,0", 9, "priority 15 is not 0-11"},
		{"class", "0,,2,0,m1,0,u,4,9,0.5,0.25,0,0", 8, "scheduling class 4 is not 0-3"},
		{"cpu", "0,,1,1,m1,0,u,3,9,abc,0.25,0,0", 10, `column 10 (CPU request): "abc" is not a number`},
		{"negative memory", "0,,1,1,m1,0,u,3,9,0.5,-1,0,0", 11, "must be a non-negative fraction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeGoogle(t, good, tc.row)
			_, err := ReadGoogle2011(dir, DefaultGoogleOptions())
			var re *RowError
			if !errors.As(err, &re) || re.Line != 2 || re.Column != tc.column || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want line 2, column %d, %q", err, tc.column, tc.want)
			}
			if !strings.Contains(err.Error(), "part-00000-of-00001.csv.gz:2:") {
				t.Errorf("error %q does not name the file and line", err)
			}
		})
	}
}

func TestGoogleOptions(t *testing.T) {
	if _, err := ReadGoogle2011(t.TempDir(), DefaultGoogleOptions()); err == nil || !strings.Contains(err.Error(), "no task_events") {
		t.Errorf("empty directory: error %v", err)
	}
	dir := writeGoogle(t, "0,,1,0,m1,0,u,3,9,0.5,0.25,0,0")
	o := DefaultGoogleOptions()
	o.Parts = 2
	if _, err := ReadGoogle2011(dir, o); err == nil || !strings.Contains(err.Error(), "2 parts asked for") {
		t.Errorf("too many parts: error %v", err)
	}
	o = DefaultGoogleOptions()
	o.LargestCPU = 0
	if _, err := ReadGoogle2011(dir, o); err == nil || !strings.Contains(err.Error(), "largest machine") {
		t.Errorf("no largest machine: error %v", err)
	}
}

// TestGooglePriority checks that the trace's production band (9-11) is
// Troupe's.
func TestGooglePriority(t *testing.T) {
	for p := int64(0); p <= 11; p++ {
		if got := googlePriority(p) >= framework.ProductionPriority; got != (p >= 9) {
			t.Errorf("trace priority %d → %d: production %v", p, googlePriority(p), got)
		}
	}
}

func TestGoogleCell(t *testing.T) {
	o := DefaultGoogleOptions()
	cell := GoogleCell(o)
	if err := cell.Validate(); err != nil {
		t.Fatal(err)
	}
	count := map[int64]int{}
	for _, m := range cell.Machines() {
		count[m.CPU]++
		if m.Memory*o.LargestCPU != m.CPU*o.LargestMemory {
			t.Fatalf("machine %+v: memory is not the CPU's fraction of the largest", m)
		}
	}
	want := map[int64]int{16000: 11625, 32000: 750, 8000: 125}
	if len(count) != len(want) || count[16000] != want[16000] || count[32000] != want[32000] || count[8000] != want[8000] {
		t.Errorf("machines by CPU %v, want %v", count, want)
	}
}

// BenchmarkReadGoogle2011 reads all the sample's parts and reports what
// it allocated in all and what the trace holds once read.
func BenchmarkReadGoogle2011(b *testing.B) {
	needSample(b)
	b.ReportAllocs()
	var tr *GoogleTrace
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		var err error
		if tr, err = ReadGoogle2011(sampleDir, DefaultGoogleOptions()); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	allocated := float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(len(tr.Jobs)), "jobs")
	b.ReportMetric(float64(tr.Stats.Tasks), "tasks")
	b.ReportMetric(allocated/1e6, "MB-allocated/op")
	b.ReportMetric(float64(after.HeapAlloc)/1e6, "MB-live")
}
