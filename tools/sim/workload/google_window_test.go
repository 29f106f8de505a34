package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// windowTrace is a tiny trace for the window [100 s, 200 s): tasks
// running at its start, pending at it, ended before it, submitted in
// it and after it, and two tasks first seen without their SUBMIT.
// Each task requests 1/32 of the largest machine's CPU and memory.
func windowTrace(t *testing.T) string {
	t.Helper()
	// ev is an event at sec seconds: job, task, type; job 1 is a
	// service (class 3, priority 9), the others batch.
	ev := func(sec, job, task, typ int) string {
		class, prio := 0, 0
		if job == 1 {
			class, prio = 3, 9
		}
		return fmt.Sprintf("%d,,%d,%d,m,%d,u,%d,%d,0.03125,0.03125,0,0", sec*1e6, job, task, typ, class, prio)
	}
	const submit, schedule, evict, finish, kill = 0, 1, 2, 4, 5
	return writeGoogle(t,
		ev(0, 1, 0, submit), ev(0, 1, 0, schedule), ev(0, 1, 1, submit),
		ev(10, 1, 1, schedule), // job 1's tasks 0 and 1 run at 100
		ev(20, 2, 0, submit), ev(20, 2, 1, submit),
		ev(30, 2, 0, schedule),
		ev(40, 3, 0, submit), ev(40, 3, 1, submit), ev(40, 3, 1, schedule), // 3/1 runs at 100
		ev(50, 3, 0, schedule),
		ev(60, 2, 0, finish),                      // 2/0 ended before the window
		ev(80, 3, 0, evict), ev(80, 3, 0, submit), // 3/0 evicted, resubmitted: pending at 100
		ev(90, 4, 0, submit), ev(90, 4, 1, submit),
		ev(95, 4, 0, kill), // killed while pending: ended before the window; 4/1 never runs
		// The window starts at 100.
		ev(105, 8, 0, kill), // first seen killed: not known to have run
		ev(110, 3, 0, schedule),
		ev(120, 2, 1, schedule), ev(120, 1, 2, submit), // 2/1 pending at 100; 1/2 added to job 1
		ev(125, 1, 2, schedule),
		ev(130, 2, 1, finish),
		ev(135, 1, 2, finish),
		ev(140, 3, 1, evict),                         // 3/1's run at 100 is evicted: until the end
		ev(150, 1, 0, finish), ev(150, 5, 0, submit), // 1/0: 50 s of its run remain at 100
		ev(155, 5, 0, schedule),
		ev(160, 7, 0, finish), // first seen finishing: running since the first event, 60 s left at 100
		ev(170, 3, 0, finish),
		// The window ends at 200.
		ev(210, 6, 0, submit), ev(215, 6, 0, schedule),
		ev(300, 5, 0, finish), // job 5's task ran 145 s
	)
}

// TestGoogleWindow is the known answer of windowTrace's window: the
// tasks running at 100 s with what remains of their runs, the tasks
// pending then submitted at 0, the jobs submitted in the window moved
// back by 100 s, and what is left out, by reason.
func TestGoogleWindow(t *testing.T) {
	o := DefaultGoogleOptions()
	o.From, o.To = 100*time.Second, 200*time.Second
	tr, err := ReadGoogle2011(windowTrace(t), o)
	if err != nil {
		t.Fatal(err)
	}
	cpu, mem := o.LargestCPU/32, o.LargestMemory/32
	task := func(i int32, d time.Duration) Task { return Task{Index: i, CPU: cpu, Memory: mem, Duration: d} }
	svc := func(id string, submit time.Duration, tasks ...Task) Job {
		return Job{ID: id, Submit: submit, Type: Service, Priority: 100, Tasks: tasks}
	}
	batch := func(id string, submit time.Duration, tasks ...Task) Job {
		return Job{ID: id, Submit: submit, Type: Batch, Priority: 10, Tasks: tasks}
	}
	assertJobs(t, tr.Running, []Job{
		svc("1", 0, task(0, 50*time.Second), task(1, 0)),
		batch("3", 0, task(1, 0)),
		batch("7", 0, task(0, 60*time.Second)),
	})
	assertJobs(t, tr.Jobs, []Job{
		svc("1.pending", 0, task(2, 10*time.Second)),
		batch("2", 0, task(1, 10*time.Second)),
		batch("3.pending", 0, task(0, 60*time.Second)),
		batch("5", 50*time.Second, task(0, 145*time.Second)),
	})
	want := Report{Trace: tr.Report.Trace, Events: 33, First: 0, Last: 300 * time.Second, From: 100 * time.Second, To: 200 * time.Second,
		InWindow: 13, Jobs: 4, Tasks: 4, PendingJobs: 3, PendingTasks: 3, RunningJobs: 3, RunningTasks: 4, Inferred: 1,
		Skipped: []Skip{{SkipResubmitted, 1, 0}, {SkipNeverScheduled, 1, 1}, {SkipEndedBefore, 5, 2}, {SkipAfter, 2, 1}, {SkipKilledUnseen, 1, 1}}}
	if !reflect.DeepEqual(tr.Report, want) {
		t.Errorf("report\n%+v, want\n%+v", tr.Report, want)
	}
	wantStats := GoogleStats{Events: [9]int{12, 10, 2, 0, 7, 2}, Tasks: 8, UntilEnd: 2, Resubmissions: 1, NeverRan: 1, EndedBefore: 2,
		AfterWindow: 1, Inferred: 1, KilledUnseen: 1, End: 300 * time.Second}
	if tr.Stats != wantStats {
		t.Errorf("stats\n%+v, want\n%+v", tr.Stats, wantStats)
	}
	if !strings.HasPrefix(tr.Report.Trace, "Google 2011 trace ") {
		t.Errorf("report names %q", tr.Report.Trace)
	}

	// The source: the jobs, the running ones as a list to place whole,
	// and the report.
	src := tr.Source()
	p := PrefillOf(src)
	if p == nil || p.CPU != 0 || p.Memory != 0 {
		t.Fatalf("prefill %+v, want a list without targets", p)
	}
	running, err := Collect(p.Jobs)
	if err != nil || !reflect.DeepEqual(running, tr.Running) {
		t.Errorf("prefill jobs %+v (%v), want the running ones", running, err)
	}
	if jobs, err := Collect(src); err != nil || !reflect.DeepEqual(jobs, tr.Jobs) {
		t.Errorf("source jobs %+v (%v)", jobs, err)
	}
	// Compress and ScaleArrivals keep both, the prefill's durations
	// compressed.
	c, err := Compress(tr.Source(), 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ScaleArrivals(c, Batch, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ReportOf(s) != ReportOf(src) {
		t.Error("Compress and ScaleArrivals lost the report")
	}
	if running, _ := Collect(PrefillOf(s).Jobs); running[0].Tasks[0].Duration != 25*time.Second {
		t.Errorf("compressed prefill %+v, want 1/0 to run 25 s", running[0])
	}
}

// TestGoogleWindowCounts reads a window of the sample: every SUBMIT is
// a task replayed (running at the start, pending at it, or submitted
// in the window), a resubmission, or a task left out, and every event
// is a replayed task's or counted as skipped.
func TestGoogleWindowCounts(t *testing.T) {
	needSample(t)
	o := DefaultGoogleOptions()
	o.From, o.To = 3*time.Hour, 4*time.Hour
	start := time.Now()
	tr, err := ReadGoogle2011(sampleDir, o)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	st, rep := tr.Stats, tr.Report
	if got := st.Tasks + st.Resubmissions + st.NeverRan + st.EndedBefore + st.AfterWindow; got != st.Events[evSubmit]+st.Inferred {
		t.Errorf("tasks %d + resubmissions %d + never ran %d + ended before %d + after %d = %d, want the %d SUBMITs",
			st.Tasks, st.Resubmissions, st.NeverRan, st.EndedBefore, st.AfterWindow, got, st.Events[evSubmit])
	}
	if rep.RunningTasks == 0 || rep.PendingTasks == 0 || rep.Tasks+rep.RunningTasks != st.Tasks {
		t.Errorf("report %+v, stats %+v", rep, st)
	}
	for _, j := range tr.Jobs {
		if j.Submit < 0 || j.Submit >= time.Hour {
			t.Fatalf("job %s at %v, outside the hour played", j.ID, j.Submit)
		}
	}
	for _, j := range tr.Running {
		for _, task := range j.Tasks {
			if task.Duration < 0 || task.Duration > rep.Last-rep.From {
				t.Fatalf("running job %s: task %+v", j.ID, task)
			}
		}
	}
	// The report as JSON: names in snake_case, times in seconds, read
	// back the same.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, rep) {
		t.Errorf("JSON %s read back as %+v (%v)", b, back, err)
	}
	t.Logf("read in %v:\n%s%s", read, rep.String(), b)
}

// TestGoogleWindowErrors: a window starting before the first event
// read (found at that event), after the last, or holding no event is an
// ErrWindow, before anything runs.
func TestGoogleWindowErrors(t *testing.T) {
	dir := windowTrace(t)
	// A trace read from a later part starts later: copy its events
	// from 100 s.
	late := writeGoogle(t, "100000000,,1,0,m,4,u,3,9,0.1,0.1,0,0", "200000000,,2,0,m,0,u,0,0,0.1,0.1,0,0")
	for _, tc := range []struct {
		name     string
		dir      string
		from, to time.Duration
		want     string
	}{
		{"before the first event", late, 50 * time.Second, 0, "starts at 50s, before the first event read, at 1m40s"},
		{"after the last", dir, 301 * time.Second, 0, "starts at 5m1s, after the last event read, at 5m0s"},
		{"no event", dir, 220 * time.Second, 290 * time.Second, "no event in [3m40s, 4m50s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultGoogleOptions()
			o.From, o.To = tc.from, tc.to
			_, err := ReadGoogle2011(tc.dir, o)
			if !errors.Is(err, ErrWindow) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrWindow with %q", err, tc.want)
			}
		})
	}
	// From 0 is the first event read: the late trace's task finishing
	// at 100 s was running then, with nothing left.
	tr, err := ReadGoogle2011(late, DefaultGoogleOptions())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Report.From != 100*time.Second || tr.Report.Inferred != 1 || len(tr.Jobs) != 0 {
		t.Errorf("late trace from its first event: %+v, jobs %+v", tr.Report, tr.Jobs)
	}
	o := DefaultGoogleOptions()
	o.From, o.To = 2*time.Second, time.Second
	if _, err := ReadGoogle2011(dir, o); err == nil || !strings.Contains(err.Error(), "need 0 <= from < to") {
		t.Errorf("to before from: %v", err)
	}
}

// TestGoogleLaterParts reads the sample from its part 4, as a copy of a
// later stretch of the trace would be: the tasks first seen finishing,
// failing, evicted or updated while running are running at the start,
// and nearly all of them are those a reading from part 0 finds running
// then, with the same remaining durations. (Tasks that run through
// the parts read without an event are not seen at all.)
func TestGoogleLaterParts(t *testing.T) {
	needSample(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "task_events"), 0o755); err != nil {
		t.Fatal(err)
	}
	parts, err := filepath.Glob(filepath.Join(sampleDir, "task_events", "part-*.csv.gz"))
	if err != nil || len(parts) != 8 {
		t.Fatalf("parts %v: %v", parts, err)
	}
	for _, p := range parts[4:] {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, "task_events", filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	late, err := ReadGoogle2011(dir, DefaultGoogleOptions())
	if err != nil {
		t.Fatal(err)
	}
	if late.Report.First < 5*time.Hour || late.Report.From != late.Report.First {
		t.Fatalf("part 4 on: %+v, want the window from its first event, after 5 h", late.Report)
	}
	o := DefaultGoogleOptions()
	o.From = late.Report.First
	full, err := ReadGoogle2011(sampleDir, o)
	if err != nil {
		t.Fatal(err)
	}
	truth := map[string]map[int32]Task{}
	for _, j := range full.Running {
		truth[j.ID] = map[int32]Task{}
		for _, task := range j.Tasks {
			truth[j.ID][task.Index] = task
		}
	}
	running, same := 0, 0
	for _, j := range late.Running {
		for _, task := range j.Tasks {
			if tt, ok := truth[j.ID][task.Index]; ok {
				running++
				if tt == task {
					same++
				}
			}
		}
	}
	n := late.Report.RunningTasks
	if n < 30000 || running < n*99/100 || same < n*95/100 {
		t.Errorf("%d tasks running at part 4's start: %d of them running then read from part 0, %d with the same remaining duration", n, running, same)
	}
	t.Logf("%d tasks running at part 4's start (%d read from part 0): %d running then read from part 0, %d with the same remaining duration\n%s",
		n, full.Report.RunningTasks, running, same, late.Report.String())
}
