package workload

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Window keeps the jobs submitted in [from, to) of src's time and moves
// them to start at 0 (Submit - from). to <= 0 means no end. Durations are
// left alone: a task may run past to. It stops reading src at the first
// job at or after to. Jobs submitted before from are left out, even if
// their tasks would still run at from: a trace read with a window
// (ReadGoogle2011, ReadCSV) says what runs at its start instead.
func Window(src Source, from, to time.Duration) Source {
	return &window{src: src, from: from, to: to}
}

type window struct {
	src      Source
	from, to time.Duration
}

// Prefill is the source's: the cell starts as full at the window's start.
func (w *window) Prefill() *Prefill { return PrefillOf(w.src) }

// Report is the source's.
func (w *window) Report() *Report { return ReportOf(w.src) }

func (w *window) Next() (Job, error) {
	for {
		j, err := w.src.Next()
		if err != nil {
			return Job{}, err
		}
		if w.to > 0 && j.Submit >= w.to {
			return Job{}, io.EOF
		}
		if j.Submit >= w.from {
			j.Submit -= w.from
			return j, nil
		}
	}
}

// Compress plays src faster: submit times are divided by arrivals and
// task durations by durations (0, "until the end", stays 0; a positive
// duration stays at least 1ns). Compress(src, k, k) is the same workload
// k times faster: the cell's load (demand at any moment) is unchanged and
// the schedulers see k times the job rate, which is how the Omega paper
// loads its schedulers. Compress(src, k, 1) also puts k times the load on
// the cell. Both factors must be positive and finite; 1 leaves the value
// alone.
func Compress(src Source, arrivals, durations float64) (Source, error) {
	for _, f := range []float64{arrivals, durations} {
		if !(f > 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("compression factor %v: must be positive and finite", f)
		}
	}
	return &compress{src: src, arrivals: arrivals, durations: durations}, nil
}

type compress struct {
	src                 Source
	arrivals, durations float64
}

// Prefill is the source's, its tasks' durations divided too.
func (c *compress) Prefill() *Prefill {
	p := PrefillOf(c.src)
	if p == nil {
		return nil
	}
	q := *p
	q.Jobs = &compress{src: p.Jobs, arrivals: c.arrivals, durations: c.durations}
	return &q
}

// Report is the source's (in the trace's time).
func (c *compress) Report() *Report { return ReportOf(c.src) }

func (c *compress) Next() (Job, error) {
	j, err := c.src.Next()
	if err != nil {
		return Job{}, err
	}
	j.Submit = scaleDown(j.Submit, c.arrivals)
	if c.durations != 1 {
		// The source may share the tasks: copy before changing them.
		tasks := make([]Task, len(j.Tasks))
		for i, t := range j.Tasks {
			if t.Duration > 0 {
				t.Duration = max(scaleDown(t.Duration, c.durations), 1)
			}
			tasks[i] = t
		}
		j.Tasks = tasks
	}
	return j, nil
}

// ScaleArrivals multiplies the arrival rate of src's jobs of type typ by
// factor (their submit times are divided by it) and leaves the other
// jobs alone, so the mix changes: ScaleArrivals(src, Batch, 10) plays
// the batch jobs ten times as fast as the services (the Omega paper's
// scaling of λ_jobs(batch)). factor must be positive and finite. Jobs
// come out in submit order (a tie keeps the order read); jobs of the
// other types are held only until the scaled ones have caught up with
// them.
func ScaleArrivals(src Source, typ Type, factor float64) (Source, error) {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("arrival factor %v: must be positive and finite", factor)
	}
	return &scaleArrivals{src: src, typ: typ, factor: factor}, nil
}

type scaleArrivals struct {
	src    Source
	typ    Type
	factor float64
	held   heldJobs
	read   int
	// low bounds the submit time of any job not yet read: the latest
	// submit time read, scaled or not, whichever is less.
	low  time.Duration
	done error // the source's final error once read
}

// Prefill is the source's.
func (s *scaleArrivals) Prefill() *Prefill { return PrefillOf(s.src) }

// Report is the source's.
func (s *scaleArrivals) Report() *Report { return ReportOf(s.src) }

func (s *scaleArrivals) Next() (Job, error) {
	for s.done == nil && (len(s.held) == 0 || s.held[0].job.Submit > s.low) {
		j, err := s.src.Next()
		if err != nil {
			s.done = err
			break
		}
		s.low = min(j.Submit, scaleDown(j.Submit, s.factor))
		if j.Type == s.typ {
			j.Submit = scaleDown(j.Submit, s.factor)
		}
		heap.Push(&s.held, heldJob{job: j, seq: s.read})
		s.read++
	}
	if len(s.held) == 0 || (s.done != nil && !errors.Is(s.done, io.EOF)) {
		return Job{}, s.done
	}
	return heap.Pop(&s.held).(heldJob).job, nil
}

// heldJob is a job ScaleArrivals holds, in the order it was read.
type heldJob struct {
	job Job
	seq int
}

// heldJobs is a min-heap by (submit time, order read).
type heldJobs []heldJob

func (h heldJobs) Len() int { return len(h) }
func (h heldJobs) Less(i, j int) bool {
	if h[i].job.Submit != h[j].job.Submit {
		return h[i].job.Submit < h[j].job.Submit
	}
	return h[i].seq < h[j].seq
}
func (h heldJobs) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldJobs) Push(x any)   { *h = append(*h, x.(heldJob)) }
func (h *heldJobs) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func scaleDown(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) / f))
}

// ErrWindow is the error, wrapped, of a window that replays nothing: one
// that starts before the trace's first event or after its last, or holds
// no event.
var ErrWindow = errors.New("the window holds nothing of the trace")

// Trace is a trace read into memory through a window (ReadGoogle2011,
// ReadCSV): the jobs submitted in it, moved to start at 0, and the tasks
// running at its start, which the cell holds at 0. Read it once, replay
// it as often as needed with Source.
type Trace struct {
	// Jobs are those submitted in the window, Submit - From, in submit
	// order; first, at 0, the parts of jobs submitted before the window
	// that were pending at its start.
	Jobs []Job
	// Running are the tasks running at the window's start, by job, each
	// with what remains of its run as its Duration (0: until the end).
	// Their Submit is 0.
	Running []Job
	// Report says what was read and what is replayed.
	Report Report
}

// Source returns a new Source of t's jobs. It is a Reporter (t's Report)
// and, if tasks run at the window's start, a Prefiller whose Prefill is
// the list t.Running (no targets: each task is placed if it fits).
func (t *Trace) Source() Source {
	return &traceSource{sliceSource: sliceSource{jobs: t.Jobs}, t: t}
}

type traceSource struct {
	sliceSource
	t *Trace
}

func (s *traceSource) Prefill() *Prefill {
	if len(s.t.Running) == 0 {
		return nil
	}
	return &Prefill{Jobs: FromJobs(s.t.Running)}
}

func (s *traceSource) Report() *Report { return &s.t.Report }

// Reporter is a Source that says what it read: a trace's (Trace.Source,
// *CSVReader). Window, Compress and ScaleArrivals keep their source's.
type Reporter interface {
	Source
	// Report is read-only; nil: nothing to say.
	Report() *Report
}

// ReportOf returns src's report (nil if it has none).
func ReportOf(src Source) *Report {
	if r, ok := src.(Reporter); ok {
		return r.Report()
	}
	return nil
}

// Report says what a trace source read and what of it is replayed, for
// the run to print before it starts and keep with its measures. Times
// are the trace's (before any Compress).
type Report struct {
	// Trace names what was read: "Google 2011 trace DIR", "CSV trace
	// FILE".
	Trace string
	// Events read (task events; a CSV trace's rows), and the times of
	// the first and last (a CSV row's is its submit time).
	Events      int
	First, Last time.Duration
	// From and To are the window replayed (To 0: to the end); virtual
	// time 0 is From. InWindow counts the events read in it.
	From, To time.Duration
	InWindow int
	// Jobs and Tasks replayed: submitted in the window, and at 0 the
	// PendingTasks of PendingJobs submitted before it that were pending
	// at its start (or added to them later), counted in Jobs and Tasks.
	Jobs, Tasks               int
	PendingJobs, PendingTasks int
	// RunningTasks of RunningJobs ran at the window's start: the cell
	// holds them at 0, before any job arrives (Trace.Running).
	RunningJobs, RunningTasks int
	// Inferred counts the tasks whose first event read was not their
	// SUBMIT (a trace read from a later part): they existed before the
	// first event read, running or pending as that event says.
	Inferred int
	// Skipped is what was read but is not replayed, by reason, in a
	// fixed order; reasons with nothing are left out.
	Skipped []Skip
}

// Skip is what a Report leaves out for one reason: Events read, of
// Tasks (0 when the reason is about events, not tasks).
type Skip struct {
	Reason string `json:"reason"`
	Events int    `json:"events"`
	Tasks  int    `json:"tasks"`
}

// Reasons of Skip.
const (
	SkipResubmitted    = "resubmitted"             // SUBMIT of a task submitted before (the simulated schedulers resubmit on their own)
	SkipNeverScheduled = "never scheduled"         // a task not scheduled in the window (killed while pending, or pending to the end)
	SkipEndedBefore    = "ended before the window" // a task that ended before the window's start and was not pending at it
	SkipBefore         = "submitted before the window"
	SkipAfter          = "submitted after the window"
	SkipKilledUnseen   = "killed, not seen before" // first seen by its KILL: running or pending is not known
)

// skips lists the counts by reason in the order given, without the empty.
func skips(reasons []string, counts map[string]Skip) []Skip {
	var out []Skip
	for _, r := range reasons {
		if c := counts[r]; c.Events > 0 || c.Tasks > 0 {
			c.Reason = r
			out = append(out, c)
		}
	}
	return out
}

// reportJSON is Report as JSON: times in seconds.
type reportJSON struct {
	Trace        string  `json:"trace"`
	Events       int     `json:"events"`
	First        float64 `json:"first_event_seconds"`
	Last         float64 `json:"last_event_seconds"`
	From         float64 `json:"from_seconds"`
	To           float64 `json:"to_seconds"`
	InWindow     int     `json:"events_in_window"`
	Jobs         int     `json:"jobs"`
	Tasks        int     `json:"tasks"`
	PendingJobs  int     `json:"pending_jobs"`
	PendingTasks int     `json:"pending_tasks"`
	RunningJobs  int     `json:"running_jobs"`
	RunningTasks int     `json:"running_tasks"`
	Inferred     int     `json:"inferred_tasks"`
	Skipped      []Skip  `json:"skipped"`
}

// MarshalJSON writes r with snake_case names and times in seconds.
func (r Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(reportJSON{Trace: r.Trace, Events: r.Events, First: r.First.Seconds(), Last: r.Last.Seconds(),
		From: r.From.Seconds(), To: r.To.Seconds(), InWindow: r.InWindow, Jobs: r.Jobs, Tasks: r.Tasks,
		PendingJobs: r.PendingJobs, PendingTasks: r.PendingTasks, RunningJobs: r.RunningJobs, RunningTasks: r.RunningTasks,
		Inferred: r.Inferred, Skipped: r.Skipped})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Report) UnmarshalJSON(b []byte) error {
	var j reportJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	sec := func(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
	*r = Report{Trace: j.Trace, Events: j.Events, First: sec(j.First), Last: sec(j.Last), From: sec(j.From), To: sec(j.To),
		InWindow: j.InWindow, Jobs: j.Jobs, Tasks: j.Tasks, PendingJobs: j.PendingJobs, PendingTasks: j.PendingTasks,
		RunningJobs: j.RunningJobs, RunningTasks: j.RunningTasks, Inferred: j.Inferred, Skipped: j.Skipped}
	return nil
}

// String writes r for a person, a few lines:
//
//	Google 2011 trace DIR: 1429340 events, 0s to 11h18m9.064033s
//	window [3h0m0s, 4h0m0s) of the trace's time, virtual time 0 at 3h0m0s: 128313 events in it
//	replayed: 1052 jobs, 33290 tasks (of them at 0, pending at the start: 361 jobs, 8009 tasks)
//	running at the start, placed at 0: 131262 tasks of 3795 jobs
//	skipped: resubmitted: 40234 events; never scheduled: 3209 tasks (9800 events); ...
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d events, %v to %v\n", r.Trace, r.Events, r.First, r.Last)
	to := "the end"
	if r.To > 0 {
		to = r.To.String()
	}
	fmt.Fprintf(&b, "window [%v, %s) of the trace's time, virtual time 0 at %v: %d events in it\n", r.From, to, r.From, r.InWindow)
	fmt.Fprintf(&b, "replayed: %d jobs, %d tasks", r.Jobs, r.Tasks)
	if r.PendingTasks > 0 {
		fmt.Fprintf(&b, " (of them at 0, pending at the start: %d jobs, %d tasks)", r.PendingJobs, r.PendingTasks)
	}
	fmt.Fprintf(&b, "\nrunning at the start, placed at 0: %d tasks of %d jobs\n", r.RunningTasks, r.RunningJobs)
	if r.Inferred > 0 {
		fmt.Fprintf(&b, "existing before the first event read (first seen after their SUBMIT): %d tasks\n", r.Inferred)
	}
	b.WriteString("skipped:")
	if len(r.Skipped) == 0 {
		b.WriteString(" nothing")
	}
	for i, s := range r.Skipped {
		if i > 0 {
			b.WriteByte(';')
		}
		if s.Tasks > 0 {
			fmt.Fprintf(&b, " %s: %d tasks (%d events)", s.Reason, s.Tasks, s.Events)
		} else {
			fmt.Fprintf(&b, " %s: %d events", s.Reason, s.Events)
		}
	}
	b.WriteByte('\n')
	return b.String()
}
