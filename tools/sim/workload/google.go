package workload

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// GoogleOptions says how to read the Google cluster trace 2011
// (clusterdata-2011-2) and which cell to replay it on.
type GoogleOptions struct {
	// Parts is how many task_events parts to read, from the first; 0
	// reads all there are.
	Parts int
	// Until, if positive, stops reading at the first event at or after
	// this trace time. Tasks still running then have Duration 0.
	Until time.Duration
	// From and To are the window replayed, in the trace's time: the jobs
	// submitted in [From, To) (To 0: to the end), moved to start at 0,
	// and the tasks running (or pending) at From, placed (or submitted)
	// at 0. From 0 is the first event read.
	From, To time.Duration
	// LargestCPU (millicores) and LargestMemory (bytes) are the trace's
	// largest machine: the trace's requests and capacities are fractions
	// of it.
	LargestCPU, LargestMemory int64
	// Machines is the size of the cell GoogleCell builds.
	Machines int
}

// DefaultGoogleOptions reads every part on a cell of 12,500 machines
// whose largest has 32 cores and 128 GiB.
func DefaultGoogleOptions() GoogleOptions {
	return GoogleOptions{LargestCPU: 32000, LargestMemory: 128 << 30, Machines: 12500}
}

// Validate reports the first problem of o.
func (o GoogleOptions) Validate() error {
	switch {
	case o.Parts < 0:
		return fmt.Errorf("parts %d: must not be negative", o.Parts)
	case o.Until < 0:
		return fmt.Errorf("until %v: must not be negative", o.Until)
	case o.From < 0 || o.To < 0 || (o.To > 0 && o.To <= o.From):
		return fmt.Errorf("window from %v to %v: need 0 <= from < to (or to 0, the end)", o.From, o.To)
	case o.LargestCPU <= 0 || o.LargestMemory <= 0:
		return fmt.Errorf("largest machine cpu %d, memory %d: both must be positive", o.LargestCPU, o.LargestMemory)
	case o.Machines <= 0:
		return fmt.Errorf("machines %d: must be positive", o.Machines)
	}
	return nil
}

// GoogleCell is the cell of the trace, whose machine_events table the
// sample lacks: o.Machines machines in the published capacity mix, 93%
// at half the largest machine's CPU, 6% at all of it and 1% at a
// quarter, each with the same fraction of its memory. No labels. o must
// be valid.
func GoogleCell(o GoogleOptions) CellConfig {
	cores, gib := float64(o.LargestCPU)/1000, float64(o.LargestMemory)/(1<<30)
	full, quarter := int(math.Round(0.06*float64(o.Machines))), int(math.Round(0.01*float64(o.Machines)))
	shape := func(name string, count int, f float64) ShapeConfig {
		return ShapeConfig{Name: name, Count: count, CPUCores: f * cores, MemoryGiB: f * gib}
	}
	shapes := []ShapeConfig{shape("half", o.Machines-full-quarter, 0.5), shape("full", full, 1), shape("quarter", quarter, 0.25)}
	return CellConfig{Shapes: slices.DeleteFunc(shapes, func(s ShapeConfig) bool { return s.Count == 0 })}
}

// GoogleTrace is the workload read from the trace, in memory: a task's
// duration is known only once its run ends, which can be hours after it
// was submitted. Replay it with Source (Trace's), which places the tasks
// running at the window's start first.
type GoogleTrace struct {
	Trace
	Stats GoogleStats
}

// GoogleStats says what was read and what was left out.
type GoogleStats struct {
	// Events counts the task events read by type: 0 SUBMIT, 1 SCHEDULE,
	// 2 EVICT, 3 FAIL, 4 FINISH, 5 KILL, 6 LOST, 7 UPDATE_PENDING,
	// 8 UPDATE_RUNNING.
	Events [9]int
	// Tasks replayed (in Jobs and Running), and among them UntilEnd,
	// those with Duration 0.
	Tasks, UntilEnd int
	// Resubmissions are SUBMITs of tasks submitted before (after an
	// eviction, failure or kill): not replayed.
	Resubmissions int
	// NeverRan counts tasks submitted but never scheduled in what was
	// read, or in the window (killed while pending, or pending to the
	// end): not replayed.
	NeverRan int
	// EndedBefore counts the tasks that ended before the window's start
	// (and were not pending again at it), AfterWindow those of the jobs
	// submitted at or after its end: not replayed.
	EndedBefore, AfterWindow int
	// Inferred counts the tasks first seen after their SUBMIT (existing
	// before the first event read), KilledUnseen the tasks first seen by
	// a KILL (not replayed: running or pending is not known).
	Inferred, KilledUnseen int
	// Start and End are the times of the first and last event read.
	Start, End time.Duration
}

// ReadGoogle2011 reads dir/task_events/part-*.csv.gz of the Google
// cluster trace 2011 as the package comment describes, part by part in
// name order (which is time order), streaming each gzip file, and keeps
// the window o.From, o.To. A window that starts before the first event
// read, after the last, or holds no event is an error (ErrWindow),
// found at the first event in the first case.
func ReadGoogle2011(dir string, o GoogleOptions) (*GoogleTrace, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("google trace options: %w", err)
	}
	parts, err := filepath.Glob(filepath.Join(dir, "task_events", "part-*.csv.gz"))
	if err != nil {
		return nil, err
	}
	switch {
	case len(parts) == 0:
		return nil, fmt.Errorf("google trace: no task_events/part-*.csv.gz in %s", dir)
	case o.Parts > len(parts):
		return nil, fmt.Errorf("google trace: %d parts asked for, %s has %d", o.Parts, dir, len(parts))
	case o.Parts > 0:
		parts = parts[:o.Parts]
	}
	b := &googleBuilder{jobIndex: map[int64]int32{}, tasks: map[taskKey]taskRef{}, until: math.MaxInt64 / 1000,
		first: -1, from: o.From.Microseconds(), to: math.MaxInt64, skipped: map[string]Skip{}}
	if o.Until > 0 {
		b.until = o.Until.Microseconds()
	}
	if o.To > 0 {
		b.to = o.To.Microseconds()
	}
	b.largest = [2]float64{float64(o.LargestCPU), float64(o.LargestMemory)}
	for _, p := range parts {
		err := readGoogleFile(p, b.event)
		if errors.Is(err, errStop) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("google trace: %w", err)
		}
	}
	tr, err := b.finish()
	if err != nil {
		return nil, fmt.Errorf("google trace %s: %w", dir, err)
	}
	tr.Report.Trace = "Google 2011 trace " + dir
	return tr, nil
}

// Google task event types and the columns read.
const (
	evSubmit = iota
	evSchedule
	evEvict
	evFail
	evFinish
	evKill
	evLost
	evUpdatePending
	evUpdateRunning
	numEventTypes

	gcTime       = 0
	gcJob        = 2
	gcIndex      = 3
	gcEvent      = 5
	gcClass      = 7
	gcPriority   = 8
	gcCPU        = 9
	gcMemory     = 10
	gcDistinct   = 12
	googleFields = 13
)

var googleColumns = [googleFields]string{"time", "missing info", "job ID", "task index", "machine ID",
	"event type", "user", "scheduling class", "priority", "CPU request", "memory request", "disk request",
	"different-machines restriction"}

// googleType is the Omega paper's split (its simulator's "cmb_pbb"
// policy): service = production priority (9-11) and a latency-sensitive
// scheduling class (2 or 3); everything else is batch.
func googleType(priority, class int64) Type {
	if priority >= 9 && class >= 2 {
		return Service
	}
	return Batch
}

// googlePriority maps the trace's 0-11 onto Troupe's scale keeping the
// production band: p becomes 10(p+1), so 9-11 become 100-120.
func googlePriority(p int64) int32 { return int32(10 * (p + 1)) }

type taskKey struct {
	job   int64
	index int32
}

// taskRef locates a task being read: googleBuilder.jobs[job].tasks[pos].
type taskRef struct{ job, pos int32 }

// readJob and readTask are a job and a task while the trace is read.
type readJob struct {
	job   Job // its Tasks are set at the end
	tasks []readTask
	// before: submitted before the window's start (or existing before
	// the first event read); its tasks have a state at the start.
	before bool
}

// taskState is where a task of a job submitted before the window stood
// at its start.
type taskState uint8

const (
	// stateNew: submitted after the window's start (every task of a job
	// submitted in the window).
	stateNew taskState = iota
	stateRunning
	statePending
	stateEnded
)

type readTask struct {
	Task
	// runStart is when the task's current run started (µs), or the
	// window's start if that is later; -1 when it is not running.
	runStart int64
	// ran: scheduled in what was read (since the window's start, for a
	// task pending at it).
	ran bool
	// pending: submitted and neither running nor ended.
	pending bool
	// noRequests: its SUBMIT had no requests; a later event may have them.
	noRequests bool
	state      taskState
	// events counts the task's events read, but for resubmissions.
	events int32
}

type googleBuilder struct {
	until    int64 // µs
	from, to int64 // µs; to: MaxInt64 without an end
	// first is the time of the first event read (-1 before it); crossed
	// says the window's start was reached, and every task then given
	// its state.
	first    int64
	crossed  bool
	inWindow int
	largest  [2]float64
	jobs     []readJob // in order of first SUBMIT
	jobIndex map[int64]int32
	tasks    map[taskKey]taskRef
	stats    GoogleStats
	skipped  map[string]Skip
}

// errStop ends reading at GoogleOptions.Until.
var errStop = errors.New("stop")

func (b *googleBuilder) event(r *googleRow) error {
	t, err := r.int(gcTime, 64)
	if err != nil {
		return err
	}
	if t >= b.until {
		return errStop
	}
	job, err := r.int(gcJob, 64)
	if err != nil {
		return err
	}
	index, err := r.int(gcIndex, 32)
	if err != nil {
		return err
	}
	ev, err := r.int(gcEvent, 8)
	if err != nil {
		return err
	}
	if ev < 0 || ev >= numEventTypes {
		return r.errorf(gcEvent, "event type %d is not 0-8", ev)
	}
	if b.first < 0 {
		b.first = t
		b.stats.Start = time.Duration(t) * time.Microsecond
		switch {
		case b.from == 0:
			b.from = t
		case b.from < t:
			return fmt.Errorf("%w: it starts at %v, before the first event read, at %v (%s:%d)",
				ErrWindow, time.Duration(b.from)*time.Microsecond, b.stats.Start, r.file, r.line)
		}
	}
	b.stats.Events[ev]++
	b.stats.End = time.Duration(t) * time.Microsecond
	if !b.crossed && t >= b.from {
		b.cross()
	}
	if t >= b.from && t < b.to {
		b.inWindow++
	}
	key := taskKey{job, int32(index)}
	ref, ok := b.tasks[key]
	if !ok {
		if ev != evSubmit {
			return b.unseen(r, ev, key)
		}
		if err := b.submit(r, t, key, false); err != nil {
			return err
		}
		ref = b.tasks[key]
	}
	task := &b.jobs[ref.job].tasks[ref.pos]
	task.events++
	switch ev {
	case evSubmit:
		if ok {
			b.stats.Resubmissions++
			task.events--
		}
		task.pending = true
	case evSchedule:
		task.runStart, task.ran, task.Duration, task.pending = t, true, 0, false
	case evEvict:
		task.runStart, task.pending = -1, false
	case evFail, evFinish, evKill, evLost:
		if task.runStart >= 0 {
			task.Duration = max(time.Duration(t-task.runStart)*time.Microsecond, time.Microsecond)
			task.runStart = -1
		}
		task.pending = false
	}
	if task.noRequests {
		task.noRequests, err = b.requests(r, &task.Task)
	}
	return err
}

// cross gives every task read so far, all of jobs submitted before the
// window, its state at the window's start. A run going on then is cut
// there, so that a task's Duration is what remains of it; a task pending
// then counts only the runs that follow.
func (b *googleBuilder) cross() {
	b.crossed = true
	for ji := range b.jobs {
		j := &b.jobs[ji]
		j.before = true
		for ti := range j.tasks {
			task := &j.tasks[ti]
			switch {
			case task.runStart >= 0:
				task.state, task.runStart = stateRunning, b.from
			case task.pending:
				task.state, task.ran, task.Duration = statePending, false, 0
			default:
				task.state = stateEnded
			}
		}
	}
}

// unseen handles the first event of a task whose SUBMIT was not read:
// it existed before the first event read (the trace is read from a
// later part), running if the event says so (EVICT, FAIL, FINISH, LOST,
// UPDATE_RUNNING), pending if it is a SCHEDULE or UPDATE_PENDING, not
// known if it is a KILL (left out).
func (b *googleBuilder) unseen(r *googleRow, ev int64, key taskKey) error {
	if ev == evKill {
		b.stats.KilledUnseen++
		s := b.skipped[SkipKilledUnseen]
		s.Events++
		s.Tasks++
		b.skipped[SkipKilledUnseen] = s
		return nil
	}
	if err := b.submit(r, b.first, key, true); err != nil {
		return err
	}
	b.stats.Inferred++
	ref := b.tasks[key]
	task := &b.jobs[ref.job].tasks[ref.pos]
	running := ev != evSchedule && ev != evUpdatePending
	switch {
	case running && b.crossed:
		task.state, task.runStart, task.ran = stateRunning, b.from, true
	case running:
		task.runStart, task.ran = b.first, true
	case b.crossed:
		task.state, task.pending = statePending, true
	default:
		task.pending = true
	}
	// The event itself is the task's first: played as any other.
	return b.replayUnseen(r, ev, task)
}

// replayUnseen applies an unseen task's first event to it.
func (b *googleBuilder) replayUnseen(r *googleRow, ev int64, task *readTask) error {
	t, _ := r.int(gcTime, 64)
	task.events++
	switch ev {
	case evSchedule:
		task.runStart, task.ran, task.Duration, task.pending = t, true, 0, false
	case evEvict:
		task.runStart, task.pending = -1, false
	case evFail, evFinish, evLost:
		task.Duration = max(time.Duration(t-task.runStart)*time.Microsecond, time.Microsecond)
		task.runStart, task.pending = -1, false
	}
	var err error
	if task.noRequests {
		task.noRequests, err = b.requests(r, &task.Task)
	}
	return err
}

// submit adds a task submitted at t, and its job at its first task; a
// task that existed before the first event read makes its job one
// submitted before the window.
func (b *googleBuilder) submit(r *googleRow, t int64, key taskKey, existed bool) error {
	ji, ok := b.jobIndex[key.job]
	if !ok {
		priority, err := r.int(gcPriority, 8)
		if err != nil {
			return err
		}
		if priority < 0 || priority > 11 {
			return r.errorf(gcPriority, "priority %d is not 0-11", priority)
		}
		class, err := r.int(gcClass, 8)
		if err != nil {
			return err
		}
		if class < 0 || class > 3 {
			return r.errorf(gcClass, "scheduling class %d is not 0-3", class)
		}
		distinct, _, err := r.float(gcDistinct)
		if err != nil {
			return err
		}
		ji = int32(len(b.jobs))
		b.jobIndex[key.job] = ji
		b.jobs = append(b.jobs, readJob{job: Job{ID: strconv.FormatInt(key.job, 10), Submit: time.Duration(t) * time.Microsecond,
			Type: googleType(priority, class), Priority: googlePriority(priority), DistinctMachines: distinct == 1}})
	}
	j := &b.jobs[ji]
	if existed && !j.before {
		j.before, j.job.Submit = true, time.Duration(b.first)*time.Microsecond
	}
	task := readTask{Task: Task{Index: key.index}, runStart: -1}
	if j.before && b.crossed {
		task.state = statePending // added to a job submitted before the window: with its part at 0
	}
	var err error
	if task.noRequests, err = b.requests(r, &task.Task); err != nil {
		return err
	}
	b.tasks[key] = taskRef{ji, int32(len(j.tasks))}
	j.tasks = append(j.tasks, task)
	return nil
}

// requests sets the task's requests from the row's, scaled to the
// largest machine, and reports whether the row had none.
func (b *googleBuilder) requests(r *googleRow, task *Task) (missing bool, err error) {
	var v [2]int64
	for i, col := range []int{gcCPU, gcMemory} {
		f, ok, err := r.float(col)
		if err != nil || !ok {
			return true, err
		}
		if v[i], err = toUnits(f*b.largest[i], 1); err != nil {
			return true, r.errorf(col, "request %v: must be a non-negative fraction of the largest machine", f)
		}
	}
	task.CPU, task.Memory = v[0], v[1]
	return false, nil
}

// finish sorts the tasks read: those of the jobs submitted in the
// window that ran, the parts of jobs submitted before it running
// (Running) and pending (submitted at 0) at its start, packed into one
// array; and counts what is left out.
func (b *googleBuilder) finish() (*GoogleTrace, error) {
	us := func(t int64) time.Duration { return time.Duration(t) * time.Microsecond }
	switch {
	case b.first < 0:
		return nil, errors.New("no event read")
	case us(b.from) > b.stats.End:
		return nil, fmt.Errorf("%w: it starts at %v, after the last event read, at %v", ErrWindow, us(b.from), b.stats.End)
	case b.inWindow == 0:
		return nil, fmt.Errorf("%w: no event in [%v, %v) (events read from %v to %v)", ErrWindow, us(b.from), us(b.to), b.stats.Start, b.stats.End)
	}
	skip := func(reason string, task readTask) {
		s := b.skipped[reason]
		s.Tasks++
		s.Events += int(task.events)
		b.skipped[reason] = s
	}
	from := us(b.from)
	rep := Report{Events: b.stats.Events[0], First: b.stats.Start, Last: b.stats.End, From: from, InWindow: b.inWindow,
		Inferred: b.stats.Inferred}
	for _, n := range b.stats.Events[1:] {
		rep.Events += n
	}
	if b.to < math.MaxInt64 {
		rep.To = us(b.to)
	}
	// part is a job's tasks, of one kind, packed in arena.
	arena := make([]Task, 0, len(b.tasks))
	part := func(j Job, id string, submit time.Duration, keep func(readTask) bool, tasks []readTask) (Job, bool) {
		start := len(arena)
		for _, t := range tasks {
			if keep(t) {
				arena = append(arena, t.Task)
				if t.Duration == 0 {
					b.stats.UntilEnd++
				}
			}
		}
		if len(arena) == start {
			return Job{}, false
		}
		j.ID, j.Submit, j.Tasks = id, submit, arena[start:len(arena):len(arena)]
		b.stats.Tasks += len(j.Tasks)
		return j, true
	}
	var pending, jobs, running []Job
	for _, j := range b.jobs {
		switch {
		case !j.before && j.job.Submit.Microseconds() >= b.to:
			for _, t := range j.tasks {
				b.stats.AfterWindow++
				skip(SkipAfter, t)
			}
		case !j.before:
			for _, t := range j.tasks {
				if !t.ran {
					b.stats.NeverRan++
					skip(SkipNeverScheduled, t)
				}
			}
			if job, ok := part(j.job, j.job.ID, j.job.Submit-from, func(t readTask) bool { return t.ran }, j.tasks); ok {
				jobs = append(jobs, job)
			}
		default:
			for _, t := range j.tasks {
				switch {
				case t.state == stateEnded:
					b.stats.EndedBefore++
					skip(SkipEndedBefore, t)
				case t.state != stateRunning && !t.ran:
					b.stats.NeverRan++
					skip(SkipNeverScheduled, t)
				}
			}
			job, isRunning := part(j.job, j.job.ID, 0, func(t readTask) bool { return t.state == stateRunning }, j.tasks)
			if isRunning {
				running = append(running, job)
				rep.RunningJobs++
				rep.RunningTasks += len(job.Tasks)
			}
			id := j.job.ID
			if isRunning {
				id += pendingSuffix
			}
			if job, ok := part(j.job, id, 0, func(t readTask) bool {
				return (t.state == statePending || t.state == stateNew) && t.ran
			}, j.tasks); ok {
				pending = append(pending, job)
				rep.PendingJobs++
				rep.PendingTasks += len(job.Tasks)
			}
		}
	}
	b.skipped[SkipResubmitted] = Skip{Events: b.stats.Resubmissions}
	// Parts in time order give jobs in Submit order; keep it if not.
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Submit, b.Submit) })
	tr := &GoogleTrace{Trace: Trace{Jobs: append(pending, jobs...), Running: running}, Stats: b.stats}
	rep.Jobs, rep.Tasks = len(tr.Jobs), b.stats.Tasks-rep.RunningTasks
	rep.Skipped = skips([]string{SkipResubmitted, SkipNeverScheduled, SkipEndedBefore, SkipAfter, SkipKilledUnseen}, b.skipped)
	tr.Report = rep
	return tr, nil
}

// pendingSuffix names the part of a job submitted before the window that
// is submitted at 0 (pending at the window's start) when another part
// of it runs at the start under the job's own ID.
const pendingSuffix = ".pending"
