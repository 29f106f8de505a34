package job

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// State is what Plan decides from: one job and its tasks, as the
// controller's caches hold them (and as its Observe writes left them).
type State struct {
	// Job is the job; nil when it is gone, and its tasks go too.
	Job *troupev1.Job
	// Tasks are the job's tasks, in any order, one per index.
	Tasks []*troupev1.Task
	// Unreadable says whether the stored task at an index cannot be read
	// (see clientlib.DecodeAt): no task is created over it, and it is
	// not counted. Nil: every task can be read.
	Unreadable func(index int32) bool
	// Refused are the rules the job breaks (the controller's verdict:
	// clientlib.ValidateWith under the cell's ValidationPolicies, with
	// DefaultJobLimits unless the cell stores its own); nil: none, or
	// not checked. They hold back only a job's first tasks: Plan heeds
	// them while the job has no task and is not stopped (admitting), so a
	// job admitted before a limit was lowered is never blocked, and the
	// controller checks no other job.
	Refused []clientlib.FieldError
}

// admitting reports whether Plan would create the first tasks of s's
// job, and so heeds s.Refused: the job exists, is not stopped, and has no
// task, readable or not (below its count).
func (s State) admitting() bool {
	if s.Job == nil || s.Job.GetSpec().GetStopped() || len(s.Tasks) > 0 {
		return false
	}
	if s.Unreadable != nil {
		for i := range s.Job.GetSpec().GetCount() {
			if s.Unreadable(i) {
				return false
			}
		}
	}
	return true
}

// Action is why a TaskUpdate writes a task.
type Action int

const (
	// Observed: the task's Run says it runs, or has ended.
	Observed Action = iota + 1
	// Stopped: the job is stopped.
	Stopped
	// ScaledDown: the task's index is at or above the job's count.
	ScaledDown
	// Replaced: the task failed, was lost, or (a service's) ended; it
	// becomes its next attempt, pending again.
	Replaced
	// Released: the task has ended (its job's controller did not end it:
	// a lost machine, an abandoning scheduler) and still holds a quota
	// charge, which it gives back.
	Released
	// Updated: the task is not of its job's current version; it becomes
	// its next attempt of that version (a pending batch task keeps its
	// attempt).
	Updated
	// Superseded: a service's task of an older version is stopped, new
	// ones having taken its place.
	Superseded
)

func (a Action) String() string {
	switch a {
	case Observed:
		return "observe"
	case Stopped:
		return "stop"
	case ScaledDown:
		return "scale-down"
	case Replaced:
		return "replace"
	case Released:
		return "release"
	case Updated:
		return "update"
	case Superseded:
		return "supersede"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// TaskUpdate is one write of an existing task, its own transaction: To
// over From, on the condition that the task still has From's version.
// If From is bound and To is not, the same transaction takes the task
// off its machine (clientlib.Unbind: its Binding deleted, its requests
// given back). Events are recorded once the write is committed.
type TaskUpdate struct {
	Action   Action
	From, To *troupev1.Task
	Events   []Event
}

// Unbinds reports whether the update takes the task off its machine.
func (u TaskUpdate) Unbinds() bool {
	return u.From.GetBinding().GetMachine() != "" && u.To.GetBinding().GetMachine() == ""
}

// Event is an event to record: the arguments of clientlib.EventRecorder's
// Record.
type Event struct {
	InvolvedKind, Namespace, Scope, Name string
	Type, Reason, Message                string
}

func jobEvent(job *troupev1.Job, eventType, reason, format string, args ...any) Event {
	m := job.GetMetadata()
	return Event{InvolvedKind: clientlib.Jobs.Name, Namespace: m.GetNamespace(), Scope: m.GetName(), Name: m.GetName(),
		Type: eventType, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func taskEvent(t *troupev1.Task, eventType, reason, format string, args ...any) Event {
	m := t.GetMetadata()
	return Event{InvolvedKind: clientlib.Tasks.Name, Namespace: m.GetNamespace(), Scope: t.GetSpec().GetJob(), Name: m.GetName(),
		Type: eventType, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Changes is what Plan decides for one job: the writes that bring its
// tasks and status in line, in the order the controller commits them,
// stopping at the first that fails (the job is then synced again).
type Changes struct {
	// Delete are the tasks of a job that is gone, in index order: each is
	// deleted (and unbound) in its own transaction, on the condition that
	// the job is still absent (a job written with its tasks may reach the
	// task cache first).
	Delete []*troupev1.Task
	// Update are the tasks to stop or replace, in index order.
	Update []TaskUpdate
	// Create are the new tasks in index order, in batches: one request
	// each, a group per task on the condition that it does not exist.
	Create [][]*troupev1.Task
	// Status is the job's new status; nil when it is unchanged.
	Status *troupev1.JobStatus
	// StatusEvents are recorded once Status is written.
	StatusEvents []Event
	// RetryIn is when to look again, once the shortest retry back-off of
	// a task has passed; 0: only when something changes.
	RetryIn time.Duration

	job *troupev1.Job // for Summary
}

// Summary returns the events that sum a sync up once it has committed
// the first updated of Update and created of the new tasks, however far
// it got: tasks created (TasksCreated) and stopped above the count
// (ScaledDown).
func (c Changes) Summary(updated, created int) []Event {
	if c.job == nil {
		return nil
	}
	scaledDown := 0
	for _, u := range c.Update[:updated] {
		if u.Action == ScaledDown {
			scaledDown++
		}
	}
	count := c.job.GetSpec().GetCount()
	var out []Event
	if created > 0 {
		out = append(out, jobEvent(c.job, clientlib.EventNormal, "TasksCreated", "Created %d task(s) of %d", created, count))
	}
	if scaledDown > 0 {
		out = append(out, jobEvent(c.job, clientlib.EventNormal, "ScaledDown", "Stopped %d task(s) above count %d", scaledDown, count))
	}
	return out
}

// Observe returns the write that brings bound task t's status in line
// with run, the Run its machine's agent reports for it (nil: none yet),
// or nil when there is nothing to write: t is not bound, the run is of
// another placement (OfPlacement) or has not started, or t already says
// what it says. A running task is marked RUNNING with its restarts, last
// exit and reason; a finished one is unbound and marked SUCCEEDED or
// FAILED (a killed run fails it too), with a Failed event.
func Observe(t *troupev1.Task, run *troupev1.Run) *TaskUpdate {
	m := t.GetBinding().GetMachine()
	if m == "" || run == nil || !OfPlacement(run, t) {
		return nil // not bound, not started yet, or a run of an earlier placement
	}
	switch run.GetPhase() {
	case troupev1.RunPhase_RUN_PHASE_RUNNING:
		// A run restarted in place says so: its restarts, its last exit
		// and the reason (back-off, restarted).
		st := &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_RUNNING, Restarts: run.GetRestarts(),
			Reason: run.GetReason(), ExitCode: run.GetExitCode(), Started: run.GetStarted(), Healthy: run.GetHealthy()}
		if proto.Equal(t.GetStatus(), st) {
			return nil
		}
		u := proto.Clone(t).(*troupev1.Task)
		u.Status = st
		return &TaskUpdate{Action: Observed, From: t, To: u}
	case troupev1.RunPhase_RUN_PHASE_SUCCEEDED:
		return &TaskUpdate{Action: Observed, From: t, To: finishRun(t, run, troupev1.TaskPhase_TASK_PHASE_SUCCEEDED)}
	case troupev1.RunPhase_RUN_PHASE_FAILED, troupev1.RunPhase_RUN_PHASE_KILLED:
		msg := fmt.Sprintf("Attempt %d %s on %s with exit code %d", run.GetAttempt(),
			strings.ToLower(strings.TrimPrefix(run.GetPhase().String(), "RUN_PHASE_")), m, run.GetExitCode())
		if r := run.GetReason(); r != "" {
			msg += ": " + r
		}
		return &TaskUpdate{Action: Observed, From: t, To: finishRun(t, run, troupev1.TaskPhase_TASK_PHASE_FAILED),
			Events: []Event{taskEvent(t, clientlib.EventWarning, "Failed", "%s", msg)}}
	}
	return nil
}

// OfPlacement reports whether run, read at bound task t's machine's key,
// is of t's current placement: of its attempt and, when the run says (all
// but those of agents older than Run.bound_at), of its binding's
// bound_at. A preempted task goes back to pending with its attempt, and
// may be placed again on the machine it was evicted from; the Run there
// is then its eviction's (KILLED), or a late report of the evicted
// placement, until the agent reports the new one. Taking it for the new
// placement's would fail the task, or mark it running before it runs.
func OfPlacement(run *troupev1.Run, t *troupev1.Task) bool {
	if run.GetAttempt() != t.GetSpec().GetAttempt() {
		return false
	}
	return run.GetBoundAt() == nil || proto.Equal(run.GetBoundAt(), t.GetBinding().GetBoundAt())
}

// Plan decides what one job needs, at now: the tasks to create, stop,
// replace or (the job gone) delete, the job's status, the events to
// record, and when to look again. It reads nothing but its arguments
// and changes none of them.
func Plan(s State, now time.Time) Changes {
	tasks := make(map[int32]*troupev1.Task, len(s.Tasks))
	for _, t := range s.Tasks {
		tasks[t.GetSpec().GetIndex()] = t
	}
	job := s.Job
	if job == nil {
		var ch Changes
		for _, i := range slices.Sorted(maps.Keys(tasks)) {
			ch.Delete = append(ch.Delete, tasks[i])
		}
		return ch
	}
	if len(s.Refused) > 0 && s.admitting() {
		return refuse(job, s.Refused)
	}
	ch := Changes{job: job}
	v := versionsOf(job, now)
	status := &troupev1.JobStatus{}
	var missing []*troupev1.Task
	exhausted := "" // a batch task that failed with no retries left
	if job.GetSpec().GetType() == troupev1.JobType_JOB_TYPE_SERVICE && !job.GetSpec().GetStopped() {
		missing = planService(&ch, s, tasks, v, status, now)
	} else {
		missing, exhausted = planIndexed(&ch, s, tasks, v, status, now)
	}
	ch.Update = release(tasks, ch.Update)
	for len(missing) > 0 {
		n := createBatch(missing)
		ch.Create = append(ch.Create, missing[:n:n])
		missing = missing[n:]
	}
	status.Retries = retries(tasks, ch.Update)
	status.Version, status.StableVersion, status.History, status.Rollout = v.cur.GetVersion(), v.stable, v.history, v.rollout
	ch.Status, ch.StatusEvents = jobStatus(job, status, exhausted, now)
	if ch.Status != nil {
		ch.StatusEvents = append(v.events, ch.StatusEvents...)
	}
	return ch
}

// refuse plans a job that has no task and breaks the rules in errs: no
// task is created, and the job waits, its status.admission saying why
// (clientlib.AdmissionRefused), with a Refused warning when that is new.
// The versions its status holds (if it ever had tasks) are kept; a new
// job has none until it is admitted.
func refuse(job *troupev1.Job, errs []clientlib.FieldError) Changes {
	ch := Changes{job: job}
	rules := make([]string, len(errs))
	for i, e := range errs {
		rules[i] = e.String()
	}
	why := strings.Join(rules, "; ")
	old := job.GetStatus()
	st := &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_PENDING, Admission: clientlib.AdmissionRefused + why,
		Version: old.GetVersion(), StableVersion: old.GetStableVersion(), Rollout: old.GetRollout()}
	for _, h := range old.GetHistory() {
		st.History = append(st.History, proto.Clone(h).(*troupev1.JobVersion))
	}
	if st.Rollout != nil {
		st.Rollout = proto.Clone(st.Rollout).(*troupev1.Rollout)
	}
	if proto.Equal(old, st) {
		return ch
	}
	ch.Status = st
	if old.GetAdmission() != st.Admission {
		ch.StatusEvents = []Event{jobEvent(job, clientlib.EventWarning, "Refused",
			"No task created: the job breaks the cell's policies (edit it, or the policy): %s", why)}
	}
	return ch
}

// planIndexed plans a batch job, or a stopped one: task i for each
// index below the count, each replaced (up to max_retries) when it
// fails or is lost, the tasks above the count (all, when the job is
// stopped) stopped; a pending task not yet placed runs the job's
// current version. It returns the tasks to create, and the name of a
// task that failed with no retries left.
func planIndexed(ch *Changes, s State, tasks map[int32]*troupev1.Task, v *versions, status *troupev1.JobStatus,
	now time.Time) (missing []*troupev1.Task, exhausted string) {
	job, spec := s.Job, s.Job.GetSpec()
	end := spec.GetCount()
	for i := range tasks {
		end = max(end, i+1)
	}
	for i := range end {
		t, exists := tasks[i]
		switch {
		case spec.GetStopped() || i >= spec.GetCount():
			if exists && !finished(t) {
				action := ScaledDown
				if spec.GetStopped() {
					action = Stopped
				}
				ch.Update = append(ch.Update, TaskUpdate{Action: action, From: t,
					To: finish(t, &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_STOPPED, Reason: "job stopped or scaled down",
						Finished: timestamppb.New(now)})})
			}
			continue
		case !exists && s.Unreadable != nil && s.Unreadable(i):
			continue // skipped: not recreated over, nor counted
		case !exists:
			missing = append(missing, newTask(job, v.cur, i, now))
			status.Pending++
			continue
		}
		phase := t.GetStatus().GetPhase()
		if clientlib.Pending(t) && taskVersion(t) != v.cur.GetVersion() {
			u := proto.Clone(t).(*troupev1.Task)
			setVersion(u.Spec, v.cur)
			ch.Update = append(ch.Update, TaskUpdate{Action: Updated, From: t, To: u})
		}
		retry := phase == troupev1.TaskPhase_TASK_PHASE_FAILED || phase == troupev1.TaskPhase_TASK_PHASE_LOST
		if retry && (t.GetSpec().GetAttempt() >= spec.GetMaxRetries() ||
			phase == troupev1.TaskPhase_TASK_PHASE_FAILED && restartsInPlace(t.GetSpec())) {
			exhausted = t.GetMetadata().GetName()
			retry = false
		}
		if retry {
			wait := spec.GetRetryBackoff().AsDuration() - now.Sub(t.GetStatus().GetFinished().AsTime())
			if t.GetStatus().GetFinished() == nil || wait <= 0 {
				ch.Update = append(ch.Update, replace(job, v.cur, t, now))
				status.Pending++
				continue
			}
			if ch.RetryIn == 0 || wait < ch.RetryIn {
				ch.RetryIn = wait
			}
		}
		count(status, phase)
	}
	return missing, exhausted
}

// release adds to updates the release of the quota charge of each
// ended task that holds one and is not written otherwise, in index order.
func release(tasks map[int32]*troupev1.Task, updates []TaskUpdate) []TaskUpdate {
	written := make(map[int32]bool, len(updates))
	for _, u := range updates {
		written[u.From.GetSpec().GetIndex()] = true
	}
	n := len(updates)
	for i, t := range tasks {
		if finished(t) && t.GetCharge() != nil && !written[i] {
			u := proto.Clone(t).(*troupev1.Task)
			u.Charge = nil
			updates = append(updates, TaskUpdate{Action: Released, From: t, To: u})
		}
	}
	slices.SortFunc(updates[n:], func(a, b TaskUpdate) int { return int(a.From.GetSpec().GetIndex() - b.From.GetSpec().GetIndex()) })
	return updates
}

// retries is how many times the job's tasks were replaced: the sum of
// their attempts once the updates are written. It is worked out from the
// tasks, not counted up sync by sync, so that a status write that loses
// a race (the job's cache behind the controller's own last write) loses
// no count: the next sync writes it again.
func retries(tasks map[int32]*troupev1.Task, updates []TaskUpdate) int32 {
	var n int32
	for _, t := range tasks {
		n += t.GetSpec().GetAttempt()
	}
	for _, u := range updates {
		n += u.To.GetSpec().GetAttempt() - u.From.GetSpec().GetAttempt()
	}
	return n
}

func finished(t *troupev1.Task) bool {
	switch t.GetStatus().GetPhase() {
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED,
		troupev1.TaskPhase_TASK_PHASE_STOPPED, troupev1.TaskPhase_TASK_PHASE_LOST:
		return true
	}
	return false
}

func count(s *troupev1.JobStatus, phase troupev1.TaskPhase) {
	switch phase {
	case troupev1.TaskPhase_TASK_PHASE_RUNNING:
		s.Running++
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED:
		s.Succeeded++
	case troupev1.TaskPhase_TASK_PHASE_FAILED, troupev1.TaskPhase_TASK_PHASE_LOST:
		s.Failed++
	case troupev1.TaskPhase_TASK_PHASE_STOPPED:
	default:
		s.Pending++
	}
}

// finishRun is t with the final phase of its run, unbound.
func finishRun(t *troupev1.Task, run *troupev1.Run, phase troupev1.TaskPhase) *troupev1.Task {
	return finish(t, &troupev1.TaskStatus{Phase: phase, ExitCode: run.GetExitCode(), Reason: run.GetReason(),
		Finished: run.GetFinished(), Restarts: run.GetRestarts()})
}

// finish is t unbound, with final status st and the machine it was on.
func finish(t *troupev1.Task, st *troupev1.TaskStatus) *troupev1.Task {
	st.Machine = t.GetBinding().GetMachine()
	u := proto.Clone(t).(*troupev1.Task)
	u.Binding = nil
	u.Status = st
	return u
}

// Bounds of one request creating tasks, well inside the store's default
// limits (1,024 groups, 4,096 operations, 4 MiB).
const (
	maxCreateTasks = 256
	maxCreateBytes = 1 << 20
)

// createBatch returns how many of tasks, at least one, go in one request.
func createBatch(tasks []*troupev1.Task) int {
	size := 0
	for i, t := range tasks {
		size += proto.Size(t)
		if i > 0 && (i == maxCreateTasks || size > maxCreateBytes) {
			return i
		}
	}
	return len(tasks)
}

// NewTask returns task i of job as the controller creates it for the
// job's spec as it is (its content as the current version): what a
// client that asks where a job's tasks would go (troupe apply's room
// check) decides about.
func NewTask(job *troupev1.Job, i int32, now time.Time) *troupev1.Task {
	v := content(job.GetSpec())
	v.Version = max(1, job.GetStatus().GetVersion())
	return newTask(job, v, i, now)
}

// newTask returns task i of job, its first attempt, pending for the job's
// scheduler.
func newTask(job *troupev1.Job, v *troupev1.JobVersion, i int32, now time.Time) *troupev1.Task {
	spec := job.GetSpec()
	t := &troupev1.Task{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job.GetMetadata().GetName(), i), Namespace: job.GetMetadata().GetNamespace(),
			Labels: job.GetMetadata().GetLabels()},
		Spec: &troupev1.TaskSpec{Job: job.GetMetadata().GetName(), Index: i, Type: spec.GetType(),
			Priority: spec.GetPriority(), Scheduler: spec.GetScheduler(), GangMin: spec.GetGangMin(), Submitted: timestamppb.New(now)},
		Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING},
	}
	setVersion(t.Spec, v)
	setRestarts(t.Spec, spec)
	return t
}

// replace turns finished task t into its next attempt, pending again,
// with the Retrying (batch) or Replaced (service) event.
func replace(job *troupev1.Job, v *troupev1.JobVersion, t *troupev1.Task, now time.Time) TaskUpdate {
	u := proto.Clone(t).(*troupev1.Task)
	u.Binding = nil
	u.Spec.Attempt++
	u.Spec.Submitted = timestamppb.New(now)
	setVersion(u.Spec, v)
	setRestarts(u.Spec, job.GetSpec())
	u.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: fmt.Sprintf("attempt %d after: %s", u.Spec.Attempt, t.GetStatus().GetReason())}
	return TaskUpdate{Action: Replaced, From: t, To: u, Events: []Event{retried(job, t)}}
}

// setRestarts copies the job's restart policy, max_retries and
// retry_backoff into a task's spec, for its machine's agent. A batch task
// that succeeded is done: ALWAYS is ON_FAILURE for batch jobs, as a
// Kubernetes Job allows no Always.
func setRestarts(t *troupev1.TaskSpec, job *troupev1.JobSpec) {
	t.RestartPolicy, t.MaxRetries, t.RetryBackoff = job.GetRestartPolicy(), job.GetMaxRetries(), job.GetRetryBackoff()
	if job.GetType() != troupev1.JobType_JOB_TYPE_SERVICE && t.RestartPolicy == troupev1.RestartPolicy_RESTART_POLICY_ALWAYS {
		t.RestartPolicy = troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE
	}
}

// restartsInPlace says whether the task's agent restarts its failed
// process itself (and so has used the task's retries when its run fails).
func restartsInPlace(t *troupev1.TaskSpec) bool {
	p := t.GetRestartPolicy()
	return p == troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE || p == troupev1.RestartPolicy_RESTART_POLICY_ALWAYS
}

func lowerPhase(p troupev1.TaskPhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "TASK_PHASE_"))
}

// retried is the event of the replacement of finished task t by its next
// attempt.
func retried(job *troupev1.Job, t *troupev1.Task) Event {
	spec, st := job.GetSpec(), t.GetStatus()
	prev := fmt.Sprintf("attempt %d %s", t.GetSpec().GetAttempt(), lowerPhase(st.GetPhase()))
	if st.GetPhase() == troupev1.TaskPhase_TASK_PHASE_FAILED {
		prev += fmt.Sprintf(" with exit code %d", st.GetExitCode())
	}
	if st.GetReason() != "" {
		prev += ": " + st.GetReason()
	}
	backoff := spec.GetRetryBackoff().AsDuration()
	if spec.GetType() == troupev1.JobType_JOB_TYPE_SERVICE {
		return taskEvent(t, clientlib.EventNormal, "Replaced", "Replica replaced by attempt %d after %v backoff; %s",
			t.GetSpec().GetAttempt()+1, backoff, prev)
	}
	return taskEvent(t, clientlib.EventNormal, "Retrying", "Retry %d of %d after %v backoff; %s",
		t.GetSpec().GetAttempt()+1, spec.GetMaxRetries(), backoff, prev)
}

// jobStatus returns the job's status from the counts of its tasks (nil
// when it has not changed), with the events of the job's end (succeeded,
// failed, stopped) when it comes.
func jobStatus(job *troupev1.Job, st *troupev1.JobStatus, exhausted string, now time.Time) (*troupev1.JobStatus, []Event) {
	spec := job.GetSpec()
	switch {
	case spec.GetStopped():
		st.Phase = troupev1.JobPhase_JOB_PHASE_STOPPED
	case exhausted != "":
		st.Phase = troupev1.JobPhase_JOB_PHASE_FAILED
		st.Message = fmt.Sprintf("task %s failed with no retries left (max_retries %d)", exhausted, spec.GetMaxRetries())
	case spec.GetType() == troupev1.JobType_JOB_TYPE_BATCH && st.Succeeded == spec.GetCount():
		st.Phase = troupev1.JobPhase_JOB_PHASE_SUCCEEDED
	case st.Running > 0 || st.Succeeded > 0:
		st.Phase = troupev1.JobPhase_JOB_PHASE_RUNNING
	default:
		st.Phase = troupev1.JobPhase_JOB_PHASE_PENDING
	}
	old := job.GetStatus()
	// The controller's own admission verdict on quota (see
	// Controller.commit); a refusal under the policies no longer holds
	// (see refuse): the job got past them.
	if !clientlib.JobRefused(job) {
		st.Admission = old.GetAdmission()
	}
	final := st.Phase == troupev1.JobPhase_JOB_PHASE_SUCCEEDED || st.Phase == troupev1.JobPhase_JOB_PHASE_FAILED
	if final {
		st.Finished = old.GetFinished()
		if st.Finished == nil {
			st.Finished = timestamppb.New(now)
		}
	}
	if proto.Equal(old, st) {
		return nil, nil
	}
	var events []Event
	if st.Phase != old.GetPhase() {
		switch st.Phase {
		case troupev1.JobPhase_JOB_PHASE_SUCCEEDED:
			events = append(events, jobEvent(job, clientlib.EventNormal, "Succeeded", "All %d task(s) succeeded", spec.GetCount()))
		case troupev1.JobPhase_JOB_PHASE_FAILED:
			events = append(events, jobEvent(job, clientlib.EventWarning, "Failed", "Job failed: %s", st.Message))
		case troupev1.JobPhase_JOB_PHASE_STOPPED:
			events = append(events, jobEvent(job, clientlib.EventNormal, "Stopped", "Job stopped: its tasks are stopped"))
		}
	}
	return st, events
}
