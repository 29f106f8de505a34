package main

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// traceCommand is `troupe trace record`.
func (a *app) traceCommand() *cobra.Command {
	return group(&cobra.Command{
		Use:   "trace",
		Short: "Record a live cell as a trace that troupe sim replays",
	}, a.traceRecordCommand())
}

// recordOptions are the flags of `troupe trace record`.
type recordOptions struct {
	out, cellOut string
	duration     time.Duration
	namespace    string // "": every namespace
}

// traceRecordCommand is `troupe trace record --out FILE`: it follows the
// cell's jobs, tasks, runs and machines through the watch until a signal
// (or --duration), then writes the trace and the cell.
func (a *app) traceRecordCommand() *cobra.Command {
	var (
		o  recordOptions
		cf *connFlags
	)
	cmd := &cobra.Command{
		Use:   "record --out FILE [--cell-out FILE]",
		Short: "Follow a cell's jobs and tasks and write them as a CSV trace (and its machines as a cell)",
		Long: `Follow a cell's jobs and tasks through the watch until Ctrl-C (or for
--duration), then write them as a trace in the simulator's generic CSV
format (--out; - for stdout, gzip if it ends in .gz) and the cell's
machines as a cell: section (--cell-out), which troupe sim -csv FILE -cell
FILE -horizon LENGTH replays (it prints the command). Reading is enough:
a viewer's certificate will do.

Per job: its submission (its creation, in seconds from the recording's
start; jobs there before it are submitted at 0), type, priority, distinct
machines and label selectors; per task its cpu and memory requests and
its duration, from its run's start to its end as its machine's agent
recorded them (the task's last attempt that ran). A task still running
when the recording stops has an empty duration (it runs until the end of
the replay); a task running when the recording starts runs for what was
left of its run. Tasks that ended before the recording started, and tasks
that never ran, are left out (as the Google trace's never-scheduled
tasks are); a job left with no task is left out. The job ID is
<namespace>.<name>. When it stops the recording reads the cell once more,
so that it holds everything committed until then.

What the format cannot say is dropped and counted in the file's comments:
spread labels, match expressions other than "key in (value)", CEL
constraints, gangs, requests other than cpu and memory, and the machines'
taints (so tolerations do not matter in the replay). The cell groups the
machines by capacity and labels into shapes; their zone labels become the
simulated cell's zones z0, z1, ..., spread round-robin as it spreads them
(kept names when they already are z<k>; a job's zone selector follows).`,
		Example: `  troupe trace record --out trace.csv --cell-out cell.yaml --duration 1h
  troupe sim -csv trace.csv -cell cell.yaml -horizon 1h`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.out == "":
				return usagef("give --out FILE (the trace, CSV; - for stdout)")
			case o.duration < 0:
				return usagef("--duration %v: must not be negative", o.duration)
			case o.out == o.cellOut:
				return usagef("--out and --cell-out name the same file")
			}
			c, t, syncCtx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rec := newRecorder(o.namespace, time.Now)
			banner := func() {
				what := "until Ctrl-C"
				if o.duration > 0 {
					what = "for " + o.duration.String() + " (or until Ctrl-C)"
				}
				fmt.Fprintf(a.errOut, "Recording the jobs and tasks of %s at %s %s.\n", rec.scope(), strings.Join(t.endpoints, ","), what)
			}
			if err := rec.follow(ctx, syncCtx, c, o.duration, banner); err != nil {
				return err
			}
			stop() // a second Ctrl-C ends the process, the files unwritten
			// The watch may lag: read the cell once more, within
			// --timeout, whatever ended the recording.
			readCtx, cancelRead := context.WithTimeout(context.WithoutCancel(cmd.Context()), cf.timeout)
			defer cancelRead()
			if err := rec.catchUp(readCtx, c); err != nil {
				fmt.Fprintf(a.errOut, "troupe trace record: the last read of the cell failed (%v): writing what the watch showed\n", err)
			}
			r := rec.recording(strings.Join(t.endpoints, ","))
			if err := writeOut(o.out, a.out, r.writeCSV); err != nil {
				return err
			}
			if o.cellOut != "" {
				if err := writeOut(o.cellOut, a.out, r.writeCell); err != nil {
					return err
				}
			}
			fmt.Fprint(a.errOut, r.summary(o))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.out, "out", "", "the trace, in the simulator's generic CSV format (- for stdout; gzip if it ends in .gz)")
	fs.StringVar(&o.cellOut, "cell-out", "", "write the cell's machines to this file as a cell: section (troupe sim -cell)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (0: at Ctrl-C or SIGTERM)")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "record this namespace's jobs only (default: every namespace)")
	cf = a.addConnFlags(cmd, 10*time.Second, "how long the first lists, and the last read, may take")
	return cmd
}

// recorder holds what the watch showed of a cell: every job, task, run
// and machine seen since the recording started, deleted ones included,
// each as last seen.
type recorder struct {
	namespace string // "": all
	now       func() time.Time

	mu       sync.Mutex
	start    time.Time
	end      time.Time                    // zero: still recording
	jobs     map[string]*troupev1.Job     // by "<namespace>/<name>"
	tasks    map[string]*taskRecord       // by "<namespace>/<job>/<index>"
	machines map[string]*troupev1.Machine // by name
}

// taskRecord is a task as last seen, the runs of its attempts, and when
// its status said an attempt ended (its machine lost, its job stopped: the
// run may never say, or say it later).
type taskRecord struct {
	task  *troupev1.Task // nil: only its runs seen so far
	runs  map[int32]*runRecord
	ended map[int32]time.Time
}

// runRecord is one attempt's run: when it started and finished (zero:
// not yet), as its machine's agent recorded it.
type runRecord struct {
	version           uint64
	started, finished time.Time
}

func newRecorder(namespace string, now func() time.Time) *recorder {
	return &recorder{namespace: namespace, now: now, jobs: map[string]*troupev1.Job{}, tasks: map[string]*taskRecord{},
		machines: map[string]*troupev1.Machine{}}
}

// scope says which jobs are recorded.
func (r *recorder) scope() string {
	if r.namespace == "" {
		return "every namespace"
	}
	return "namespace " + r.namespace
}

// within is the key prefix of the recorded jobs and tasks below their
// kind's.
func (r *recorder) within() string {
	if r.namespace == "" {
		return ""
	}
	return r.namespace + "/"
}

// follow starts the recording: informers of the jobs, tasks, runs and
// machines, whose first lists must come before syncCtx ends; then it
// calls started and records until ctx ends or, if d > 0, for d.
func (r *recorder) follow(ctx, syncCtx context.Context, c *clientlib.Client, d time.Duration, started func()) error {
	r.mu.Lock()
	r.start = r.now()
	r.mu.Unlock()
	followCtx, stopFollowing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // the handlers are done when follow returns
	defer stopFollowing()
	syncers := []cache.Syncer{
		record(c, clientlib.Jobs, r.within(), r.job),
		record(c, clientlib.Tasks, r.within(), r.task),
		record(c, clientlib.Runs, "", r.run),
		record(c, clientlib.Machines, "", r.machine),
	}
	for _, s := range syncers {
		wg.Go(func() { s.Run(followCtx) })
	}
	// The first lists must come within --timeout, and before a signal.
	syncCtx, stopSync := context.WithCancel(syncCtx)
	defer context.AfterFunc(ctx, stopSync)()
	defer stopSync()
	for _, s := range syncers {
		if err := s.WaitForSync(syncCtx); err != nil {
			if ctx.Err() != nil {
				return errors.New("stopped before the cell's first lists came: nothing recorded")
			}
			return fmt.Errorf("the first lists: %w", err)
		}
	}
	started()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	<-ctx.Done()
	return nil
}

// record is an informer of kind k (within) whose objects, as they are
// added or change, go to put; deletions change nothing: the recording
// keeps what was.
func record[T clientlib.Object](c *clientlib.Client, k clientlib.Kind[T], within string, put func(T)) *cache.Informer[T] {
	in := clientlib.NewInformer(c, k, within, nil)
	in.AddHandler(cache.Handler[T]{
		OnAdd:    func(_ string, obj T) { put(obj) },
		OnUpdate: func(_ string, _, obj T) { put(obj) },
	})
	return in
}

// catchUp reads the recorded kinds once more, so that the recording holds
// what the store had committed when it stopped whatever the watch's lag,
// and ends the recording.
func (r *recorder) catchUp(ctx context.Context, c *clientlib.Client) error {
	var errs []error
	read := func(err error) {
		if err != nil && !errors.Is(err, clientlib.ErrUnreadable) {
			errs = append(errs, err)
		}
	}
	jobs, _, err := clientlib.List(ctx, c, clientlib.Jobs, r.within())
	read(err)
	tasks, _, err := clientlib.List(ctx, c, clientlib.Tasks, r.within())
	read(err)
	runs, _, err := clientlib.List(ctx, c, clientlib.Runs, "")
	read(err)
	machines, _, err := clientlib.List(ctx, c, clientlib.Machines, "")
	read(err)
	for _, j := range jobs {
		r.job(j)
	}
	for _, t := range tasks {
		r.task(t)
	}
	for _, run := range runs {
		r.run(run)
	}
	for _, m := range machines {
		r.machine(m)
	}
	r.mu.Lock()
	r.end = r.now()
	r.mu.Unlock()
	return errors.Join(errs...)
}

// newer reports whether object cur replaces old (nil: none): the watch
// and the last read may bring a state twice, or an older one after a
// newer.
func newer[T clientlib.Object](old, cur T) bool {
	return cur.GetMetadata().GetVersion() >= old.GetMetadata().GetVersion() // nil's version is 0
}

func (r *recorder) job(j *troupev1.Job) {
	key := j.GetMetadata().GetNamespace() + "/" + j.GetMetadata().GetName()
	r.mu.Lock()
	defer r.mu.Unlock()
	if newer(r.jobs[key], j) {
		r.jobs[key] = j
	}
}

func (r *recorder) machine(m *troupev1.Machine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if newer(r.machines[m.GetMetadata().GetName()], m) {
		r.machines[m.GetMetadata().GetName()] = m
	}
}

// taskRecord returns the record of the task ref names, made if new.
// r.mu is held.
func (r *recorder) taskRecord(ref string) *taskRecord {
	tr := r.tasks[ref]
	if tr == nil {
		tr = &taskRecord{runs: map[int32]*runRecord{}, ended: map[int32]time.Time{}}
		r.tasks[ref] = tr
	}
	return tr
}

func (r *recorder) task(t *troupev1.Task) {
	ref := clientlib.TaskRef(t.GetMetadata().GetNamespace(), t.GetSpec().GetJob(), t.GetSpec().GetIndex())
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.taskRecord(ref)
	if !newer(tr.task, t) {
		return
	}
	tr.task = t
	if st := t.GetStatus(); final(st.GetPhase()) && st.GetFinished() != nil {
		tr.ended[t.GetSpec().GetAttempt()] = st.GetFinished().AsTime()
	}
}

func (r *recorder) run(run *troupev1.Run) {
	ns, rest, _ := strings.Cut(run.GetMetadata().GetName(), "/")
	if r.namespace != "" && ns != r.namespace {
		return
	}
	if run.GetStarted() == nil {
		return // not started yet (or killed before it started)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.taskRecord(ns + "/" + rest)
	rr := tr.runs[run.GetAttempt()]
	if rr == nil {
		rr = &runRecord{}
		tr.runs[run.GetAttempt()] = rr
	} else if run.GetMetadata().GetVersion() < rr.version {
		return
	}
	rr.version = run.GetMetadata().GetVersion()
	rr.started = run.GetStarted().AsTime()
	if run.GetFinished() != nil {
		rr.finished = run.GetFinished().AsTime()
	}
}

// final reports whether a task in phase p has ended.
func final(p troupev1.TaskPhase) bool {
	switch p {
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED, troupev1.TaskPhase_TASK_PHASE_LOST,
		troupev1.TaskPhase_TASK_PHASE_STOPPED:
		return true
	}
	return false
}

// traceRecording is what a recording writes: the trace's jobs, the cell,
// and what was left out or dropped, for the files' comments and the
// summary.
type traceRecording struct {
	from, scope       string // the cell's endpoints, the namespaces recorded
	start, end        time.Time
	jobs              []workload.Job
	cell              workload.CellConfig
	machines          int
	zones             map[string]string // the cell's zone values → the simulated cell's
	tasks, unfinished int
	// leftOut counts tasks by why they are not in the trace; jobsLeftOut
	// the jobs left with no task; dropped the jobs by what of them the
	// format cannot say; cellNotes what the cell file leaves out.
	leftOut     map[string]int
	jobsLeftOut int
	dropped     map[string][]string
	cellNotes   []string
}

// Why tasks are left out.
const (
	leftEnded   = "ended before the recording started"
	leftNever   = "never ran"
	leftLongID  = "belong to a job whose ID is longer than the format's 200 characters"
	leftNoTask  = "were seen only through their runs"
	dropSpread  = "spread_label"
	dropExpr    = "match_expressions"
	dropCEL     = "cel"
	dropGang    = "gang_min"
	dropRequest = "requests other than cpu and memory"
)

// recording makes the trace and the cell of what was recorded.
func (r *recorder) recording(from string) *traceRecording {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &traceRecording{from: from, scope: r.scope(), start: r.start, end: r.end, leftOut: map[string]int{}, dropped: map[string][]string{}}
	out.cell, out.zones, out.cellNotes, out.machines = recordedCell(slices.Collect(maps.Values(r.machines)))

	byJob := map[string][]*taskRecord{} // "<namespace>/<job>"
	for _, ref := range slices.Sorted(maps.Keys(r.tasks)) {
		tr := r.tasks[ref]
		if tr.task == nil { // gone before the recording saw it
			why := leftNoTask
			if _, end, ok := tr.lastRun(); ok && !end.IsZero() && end.Before(r.start) {
				why = leftEnded
			}
			out.leftOut[why]++
			continue
		}
		key := tr.task.GetMetadata().GetNamespace() + "/" + tr.task.GetSpec().GetJob()
		byJob[key] = append(byJob[key], tr)
	}
	for _, key := range slices.Sorted(maps.Keys(byJob)) {
		j, ok := out.job(key, r.jobs[key], byJob[key], r.start)
		if ok {
			out.jobs = append(out.jobs, j)
		}
	}
	slices.SortStableFunc(out.jobs, func(a, b workload.Job) int {
		return cmp.Or(cmp.Compare(a.Submit, b.Submit), strings.Compare(a.ID, b.ID))
	})
	return out
}

// job makes the trace's job of key from the job (nil if never seen: its
// first task says what the job said) and its tasks' records; false if
// none of its tasks is in the trace.
func (out *traceRecording) job(key string, job *troupev1.Job, tasks []*taskRecord, start time.Time) (workload.Job, bool) {
	first := tasks[0].task
	spec := first.GetSpec()
	typ, prio, cons, created := spec.GetType(), spec.GetPriority(), spec.GetConstraints(), first.GetMetadata().GetCreated()
	gang := spec.GetGangMin()
	if job != nil {
		typ, prio, cons, created = job.GetSpec().GetType(), job.GetSpec().GetPriority(), job.GetSpec().GetConstraints(), job.GetMetadata().GetCreated()
		gang = job.GetSpec().GetGangMin()
	}
	ns, name, _ := strings.Cut(key, "/")
	j := workload.Job{ID: ns + "." + name, Priority: prio}
	if typ == troupev1.JobType_JOB_TYPE_SERVICE {
		j.Type = workload.Service
	}
	if created != nil {
		j.Submit = max(0, created.AsTime().Sub(start)).Round(time.Millisecond)
	}
	extra := false // a request other than cpu and memory
	for _, tr := range tasks {
		t, ok, why := out.task(tr, start)
		if !ok {
			out.leftOut[why]++
			continue
		}
		for res := range tr.task.GetSpec().GetTemplate().GetRequests() {
			extra = extra || (res != "cpu" && res != "memory")
		}
		j.Tasks = append(j.Tasks, t)
	}
	switch {
	case len(j.Tasks) == 0:
		out.jobsLeftOut++
		return j, false
	case len(j.ID) > workload.MaxJobID:
		out.leftOut[leftLongID] += len(j.Tasks)
		out.jobsLeftOut++
		return j, false
	}
	slices.SortFunc(j.Tasks, func(a, b workload.Task) int { return cmp.Compare(a.Index, b.Index) })
	out.tasks += len(j.Tasks)
	for _, t := range j.Tasks {
		if t.Duration == 0 {
			out.unfinished++
		}
	}
	drop := func(what string, when bool) {
		if when {
			out.dropped[what] = append(out.dropped[what], j.ID)
		}
	}
	j.DistinctMachines = cons.GetDistinctMachines()
	for k, v := range cons.GetMatchLabels() {
		j.MatchLabels = setLabel(j.MatchLabels, k, v)
	}
	exprs := false
	for _, e := range cons.GetMatchExpressions() {
		k := e.GetKey()
		if e.GetOperator() == troupev1.LabelOperator_LABEL_OPERATOR_IN && len(e.GetValues()) == 1 {
			if v, set := j.MatchLabels[k]; !set || v == e.GetValues()[0] {
				j.MatchLabels = setLabel(j.MatchLabels, k, e.GetValues()[0])
				continue
			}
		}
		exprs = true
	}
	if z, ok := j.MatchLabels["zone"]; ok && out.zones[z] != "" {
		j.MatchLabels["zone"] = out.zones[z]
	}
	drop(dropSpread, cons.GetSpreadLabel() != "")
	drop(dropExpr, exprs)
	drop(dropCEL, cons.GetCel() != "")
	drop(dropGang, gang > 0)
	drop(dropRequest, extra)
	return j, true
}

func setLabel(labels map[string]string, k, v string) map[string]string {
	if labels == nil {
		labels = map[string]string{}
	}
	labels[k] = v
	return labels
}

// task makes the trace's task of a record: the run of its last attempt
// that ran, from its start (or the recording's, if it started before)
// to its end, to the millisecond (at least 1 ms), or 0 (until the end)
// if it was still running; false and why if it is left out.
func (out *traceRecording) task(tr *taskRecord, start time.Time) (workload.Task, bool, string) {
	t := tr.task
	req := t.GetSpec().GetTemplate().GetRequests()
	wt := workload.Task{Index: t.GetSpec().GetIndex(), CPU: max(0, req["cpu"]), Memory: max(0, req["memory"])}
	if len(tr.runs) == 0 {
		if st := t.GetStatus(); final(st.GetPhase()) && st.GetFinished() != nil && st.GetFinished().AsTime().Before(start) {
			return wt, false, leftEnded // its run already collected
		}
		return wt, false, leftNever
	}
	started, end, _ := tr.lastRun()
	switch {
	case end.IsZero():
		return wt, true, "" // still running: until the end
	case end.Before(start):
		return wt, false, leftEnded
	}
	wt.Duration = max(end.Sub(later(started, start)).Round(time.Millisecond), time.Millisecond)
	return wt, true, ""
}

// lastRun is the run of the task's last attempt that ran: when it
// started and ended (zero: still running); false if none ran.
func (tr *taskRecord) lastRun() (started, end time.Time, ok bool) {
	if len(tr.runs) == 0 {
		return started, end, false
	}
	attempt := slices.Max(slices.Collect(maps.Keys(tr.runs)))
	run := tr.runs[attempt]
	end = run.finished
	if end.IsZero() {
		end = tr.ended[attempt]
	}
	return run.started, end, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// recordedCell is the cell of machines as a synthetic config's cell:
// section: shapes of the machines with the same cpu, memory and labels
// (their zone aside), in order of cpu, memory and labels; the zones
// renamed as the simulated cell names them (the map: the cell's values
// to the simulation's); notes on what it leaves out; and the number of
// machines it holds.
func recordedCell(machines []*troupev1.Machine) (workload.CellConfig, map[string]string, []string, int) {
	type group struct {
		shape workload.ShapeConfig
		key   string
		cpu   int64
		mem   int64
	}
	groups := map[string]*group{}
	zoneSet := map[string]bool{}
	var notes []string
	tainted, down, noZone, kept := 0, 0, 0, 0
	var noCapacity []string
	for _, m := range machines {
		capacity := m.GetSpec().GetCapacity()
		cpu, mem := capacity["cpu"], capacity["memory"]
		if cpu <= 0 || mem <= 0 {
			noCapacity = append(noCapacity, m.GetMetadata().GetName())
			continue
		}
		kept++
		if len(m.GetSpec().GetTaints()) > 0 {
			tainted++
		}
		if m.GetSpec().GetUnschedulable() || m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST {
			down++
		}
		labels := maps.Clone(m.GetMetadata().GetLabels())
		if z := labels["zone"]; z != "" {
			zoneSet[z] = true
		} else {
			noZone++
		}
		delete(labels, "zone")
		key := fmt.Sprintf("%020d/%020d/%s", cpu, mem, workload.FormatLabels(labels))
		g := groups[key]
		if g == nil {
			g = &group{key: key, cpu: cpu, mem: mem, shape: workload.ShapeConfig{CPUCores: float64(cpu) / 1000,
				MemoryGiB: float64(mem) / (1 << 30), Labels: labels}}
			groups[key] = g
		}
		g.shape.Count++
	}
	var cell workload.CellConfig
	names := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		s := groups[key].shape
		base := strconv.FormatFloat(s.CPUCores, 'f', -1, 64) + "cpu-" + strconv.FormatFloat(s.MemoryGiB, 'f', -1, 64) + "gib"
		s.Name = base
		for n := 2; names[s.Name]; n++ {
			s.Name = base + "-" + strconv.Itoa(n)
		}
		names[s.Name] = true
		cell.Shapes = append(cell.Shapes, s)
	}
	zones := zoneNames(slices.Sorted(maps.Keys(zoneSet)))
	cell.Zones = len(zones)
	if len(noCapacity) > 0 {
		notes = append(notes, fmt.Sprintf("left out: %d machine(s) without cpu and memory capacity (%s)", len(noCapacity), strings.Join(noCapacity, ", ")))
	}
	if tainted > 0 {
		notes = append(notes, fmt.Sprintf("dropped: the taints of %d machine(s) (the simulated cell has none: every job may land anywhere)", tainted))
	}
	if down > 0 {
		notes = append(notes, fmt.Sprintf("%d machine(s) were lost or unschedulable when last seen; they are in the cell", down))
	}
	if len(zones) > 0 {
		var renamed []string
		for _, z := range slices.Sorted(maps.Keys(zones)) {
			if zones[z] != z {
				renamed = append(renamed, z+" is "+zones[z])
			}
		}
		note := fmt.Sprintf("zones: the machines' %d zones (their zone label), spread round-robin over the machines as the simulated cell spreads them", len(zones))
		if len(renamed) > 0 {
			note += " (" + strings.Join(renamed, ", ") + "; jobs' zone selectors renamed alike)"
		}
		notes = append(notes, note)
		if noZone > 0 {
			notes = append(notes, fmt.Sprintf("%d machine(s) had no zone label; here they have one", noZone))
		}
	}
	return cell, zones, notes, kept
}

// zoneNames names the zones as the simulated cell does, z0 ... z<n-1>:
// a zone already named z<k> (k < n) keeps its name; the others take the
// free names in order.
func zoneNames(zones []string) map[string]string {
	out := map[string]string{}
	taken := map[string]bool{}
	for _, z := range zones {
		if k, err := strconv.Atoi(strings.TrimPrefix(z, "z")); err == nil && strings.HasPrefix(z, "z") && k >= 0 && k < len(zones) &&
			z == "z"+strconv.Itoa(k) {
			out[z], taken[z] = z, true
		}
	}
	next := 0
	for _, z := range zones {
		if out[z] != "" {
			continue
		}
		for taken["z"+strconv.Itoa(next)] {
			next++
		}
		out[z] = "z" + strconv.Itoa(next)
		taken[out[z]] = true
	}
	return out
}

// writeCSV writes the trace: comments saying where it comes from and what
// it leaves out, then the rows (workload.WriteCSV).
func (r *traceRecording) writeCSV(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Recorded by troupe trace record from %s (%s), %s for %v.\n", r.from, r.scope, r.start.UTC().Format(time.RFC3339),
		r.end.Sub(r.start).Round(time.Millisecond))
	fmt.Fprintf(bw, "# Times in seconds from the start, to the millisecond: jobs there before it are submitted at 0, their tasks\n"+
		"# running then for what was left of their run. Job IDs are <namespace>.<name>. An empty duration: still running\n"+
		"# when the recording stopped (%d task(s); until the end of the replay).\n"+
		"# Replay the recorded span: %s (without -horizon, the replay ends at the last submission).\n", r.unfinished, r.replay("FILE", "CELL"))
	for _, line := range r.notes() {
		fmt.Fprintf(bw, "# %s\n", line)
	}
	if _, err := workload.WriteCSV(bw, workload.FromJobs(r.jobs)); err != nil {
		return err
	}
	return bw.Flush()
}

// notes are what the trace leaves out and drops, one line each.
func (r *traceRecording) notes() []string {
	var out []string
	for _, why := range slices.Sorted(maps.Keys(r.leftOut)) {
		out = append(out, fmt.Sprintf("left out: %d task(s) that %s", r.leftOut[why], why))
	}
	if r.jobsLeftOut > 0 {
		out = append(out, fmt.Sprintf("left out: %d job(s) with no task in the trace", r.jobsLeftOut))
	}
	for _, what := range slices.Sorted(maps.Keys(r.dropped)) {
		ids := r.dropped[what]
		list := strings.Join(ids[:min(len(ids), 5)], ", ")
		if len(ids) > 5 {
			list += ", ..."
		}
		out = append(out, fmt.Sprintf("dropped (the format cannot say it): %s, of %d job(s) (%s)", what, len(ids), list))
	}
	return out
}

// writeCell writes the cell as a cell: section that LoadCell reads.
func (r *traceRecording) writeCell(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# The cell recorded by troupe trace record from %s, %s: %d machine(s) in %d shape(s).\n",
		r.from, r.start.UTC().Format(time.RFC3339), r.machines, len(r.cell.Shapes))
	fmt.Fprintf(bw, "# Replay: %s.\n", r.replay("TRACE", "FILE"))
	for _, n := range r.cellNotes {
		fmt.Fprintf(bw, "# %s\n", n)
	}
	if len(r.cell.Shapes) == 0 {
		fmt.Fprintf(bw, "# No machine was seen: the cell is empty, which troupe sim refuses.\n")
	}
	enc := yaml.NewEncoder(bw)
	enc.SetIndent(2)
	if err := enc.Encode(struct {
		Cell workload.CellConfig `yaml:"cell"`
	}{r.cell}); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// summary is what the command prints when it has written the files.
func (r *traceRecording) summary(o recordOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Recorded %v: %d job(s), %d task(s) (%d still running: until the end)", r.end.Sub(r.start).Round(time.Millisecond),
		len(r.jobs), r.tasks, r.unfinished)
	if o.out != "-" {
		fmt.Fprintf(&b, " in %s", o.out)
	}
	if o.cellOut != "" {
		fmt.Fprintf(&b, "; %d machine(s) in %d shape(s) in %s", r.machines, len(r.cell.Shapes), o.cellOut)
	}
	b.WriteString(".\n")
	notes := r.notes()
	if o.cellOut != "" {
		notes = append(notes, r.cellNotes...)
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	switch {
	case len(r.jobs) == 0:
		b.WriteString("The trace has no job: troupe sim refuses it.\n")
	case o.out != "-":
		fmt.Fprintf(&b, "Replay: %s\n", r.replay(o.out, cmp.Or(o.cellOut, "CELL")))
	}
	return b.String()
}

// replay is the command that replays the trace in file on the cell of
// cellFile for the recorded span.
func (r *traceRecording) replay(file, cellFile string) string {
	return fmt.Sprintf("troupe sim -csv %s -cell %s -horizon %v", file, cellFile, max(r.end.Sub(r.start).Round(time.Millisecond), time.Millisecond))
}

// writeOut writes a file with write, whole or not at all (a temporary
// file beside it, renamed over it; gzip-compressed if its name ends in
// .gz), or to stdout if path is "-".
func writeOut(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "-" {
		return write(stdout)
	}
	err := pki.WriteFileAtomicWith(path, 0o644, func(w io.Writer) error {
		if !strings.HasSuffix(path, ".gz") {
			return write(w)
		}
		zw := gzip.NewWriter(w)
		if err := write(zw); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
