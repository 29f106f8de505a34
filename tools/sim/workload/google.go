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
// was submitted. Replay it with FromJobs(t.Jobs).
type GoogleTrace struct {
	Jobs  []Job
	Stats GoogleStats
}

// GoogleStats says what was read and what was left out.
type GoogleStats struct {
	// Events counts the task events read by type: 0 SUBMIT, 1 SCHEDULE,
	// 2 EVICT, 3 FAIL, 4 FINISH, 5 KILL, 6 LOST, 7 UPDATE_PENDING,
	// 8 UPDATE_RUNNING.
	Events [9]int
	// Tasks replayed, and among them UntilEnd, those with Duration 0.
	Tasks, UntilEnd int
	// Resubmissions are SUBMITs of tasks submitted before (after an
	// eviction, failure or kill): not replayed.
	Resubmissions int
	// NeverRan counts tasks submitted but never scheduled in what was
	// read (killed while pending, or pending to the end): not replayed.
	NeverRan int
	// End is the time of the last event read.
	End time.Duration
}

// ReadGoogle2011 reads dir/task_events/part-*.csv.gz of the Google
// cluster trace 2011 as the package comment describes, part by part in
// name order (which is time order), streaming each gzip file.
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
	b := &googleBuilder{jobIndex: map[int64]int32{}, tasks: map[taskKey]taskRef{}, until: math.MaxInt64 / 1000}
	if o.Until > 0 {
		b.until = o.Until.Microseconds()
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
	return b.finish(), nil
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
	numEventTypes = 9

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
}

type readTask struct {
	Task
	// runStart is when the task's current run started (µs); -1 when it is
	// not running.
	runStart int64
	ran      bool
	// noRequests: its SUBMIT had no requests; a later event may have them.
	noRequests bool
}

type googleBuilder struct {
	until    int64 // µs
	largest  [2]float64
	jobs     []readJob // in order of first SUBMIT
	jobIndex map[int64]int32
	tasks    map[taskKey]taskRef
	stats    GoogleStats
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
	b.stats.Events[ev]++
	b.stats.End = time.Duration(t) * time.Microsecond
	key := taskKey{job, int32(index)}
	ref, ok := b.tasks[key]
	if !ok {
		if ev != evSubmit {
			return nil // a task submitted before the trace's records start
		}
		return b.submit(r, t, key)
	}
	task := &b.jobs[ref.job].tasks[ref.pos]
	switch ev {
	case evSubmit:
		b.stats.Resubmissions++
	case evSchedule:
		task.runStart, task.ran, task.Duration = t, true, 0
	case evEvict:
		task.runStart = -1
	case evFail, evFinish, evKill, evLost:
		if task.runStart >= 0 {
			task.Duration = max(time.Duration(t-task.runStart)*time.Microsecond, time.Microsecond)
			task.runStart = -1
		}
	}
	if task.noRequests {
		task.noRequests, err = b.requests(r, &task.Task)
	}
	return err
}

// submit adds a task, and its job at its first task.
func (b *googleBuilder) submit(r *googleRow, t int64, key taskKey) error {
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
	task := readTask{Task: Task{Index: key.index}, runStart: -1}
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

// finish keeps the tasks that ran, packed into one array, and the jobs
// that have any.
func (b *googleBuilder) finish() *GoogleTrace {
	for _, j := range b.jobs {
		for _, t := range j.tasks {
			switch {
			case !t.ran:
				b.stats.NeverRan++
			case t.Duration == 0:
				b.stats.UntilEnd++
			}
		}
	}
	b.stats.Tasks = len(b.tasks) - b.stats.NeverRan
	arena := make([]Task, 0, b.stats.Tasks)
	jobs := make([]Job, 0, len(b.jobs))
	for _, j := range b.jobs {
		start := len(arena)
		for _, t := range j.tasks {
			if t.ran {
				arena = append(arena, t.Task)
			}
		}
		if len(arena) > start {
			j.job.Tasks = arena[start:len(arena):len(arena)]
			jobs = append(jobs, j.job)
		}
	}
	// Parts in time order give jobs in Submit order; keep it if not.
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Submit, b.Submit) })
	return &GoogleTrace{Jobs: jobs, Stats: b.stats}
}
