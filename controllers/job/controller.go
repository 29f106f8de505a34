// Package job is the job controller: it closes the gap between what a Job
// asks for and the tasks that exist.
//
//   - It creates a job's tasks (one per index below spec.count), pending
//     for the job's scheduler.
//   - It follows each bound task's Run (written by the machine's agent):
//     a running task is marked RUNNING; a finished one is unbound (its
//     Binding deleted, its machine's counters given back) and marked
//     SUCCEEDED or FAILED.
//   - Restarts are shared with the agents. A task carries its job's
//     restart policy (ALWAYS taken as ON_FAILURE for batch jobs),
//     max_retries and retry_backoff, and under ON_FAILURE or ALWAYS its
//     machine's agent restarts the process in place; a batch task whose
//     run failed under those policies has used its retries there and is
//     not replaced. Otherwise failed and lost tasks are replaced (the same
//     index, attempt+1, after spec.retry_backoff): batch jobs up to
//     spec.max_retries, service jobs always; a service job keeps
//     spec.count replicas, stopping the tasks above it.
//   - A stopped job's tasks are unbound and marked STOPPED.
//   - The job's status counts its tasks; a batch job succeeds when every
//     task has, and fails when a task fails with no retries left.
//
// Each change is its own small transaction with version conditions, but
// for the creation of tasks, whose puts go in as few requests as the
// store's limits allow (one group per task, each on the condition that
// the task does not exist yet); a conflict requeues the job. Once a
// change is written it is recorded as an Event (Config.Events): tasks
// created (TasksCreated) or stopped above a reduced count (ScaledDown), a
// task failed (Failed, with its exit code), retried (Retrying, n of
// max_retries) or, for a service, replaced (Replaced), and the job
// succeeded, failed or stopped.
//
// A job, task or run whose stored value cannot be read (see
// clientlib.DecodeAt) is skipped, logged once and recorded as an
// Unreadable event on its job (its machine, for a run): an unreadable
// job gets no tasks and its tasks are left alone; an unreadable task is
// neither created again over nor counted in its job's status.
package job

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Config configures the controller.
type Config struct {
	Now    func() time.Time
	Logger *zap.Logger
	// Queue sets the retry backoff of jobs whose sync failed.
	Queue cache.QueueConfig
	// Events records what the controller did (nil: nothing is recorded).
	Events *clientlib.EventRecorder
	// Workers is how many jobs are synced at once (0: one). The queue
	// never hands one job to two workers.
	Workers int
}

// Controller is a running job controller.
type Controller struct {
	cfg   Config
	c     *clientlib.Client
	jobs  *cache.Informer[*troupev1.Job]
	tasks *cache.Informer[*troupev1.Task]
	runs  *cache.Informer[*troupev1.Run]
	queue *cache.WorkQueue
}

// New returns a job controller over client c.
func New(c *clientlib.Client, cfg Config) (*Controller, error) {
	if cfg.Now == nil || cfg.Logger == nil {
		return nil, errors.New("job controller: Now and Logger are required")
	}
	ctl := &Controller{cfg: cfg, c: c, queue: cache.NewWorkQueue(cfg.Queue)}
	ctl.jobs = clientlib.NewInformer(c, clientlib.Jobs, "", nil)
	ctl.tasks = clientlib.NewInformer(c, clientlib.Tasks, "", clientlib.TaskIndexes())
	ctl.runs = clientlib.NewInformer(c, clientlib.Runs, "", nil)
	ctl.jobs.AddHandler(cache.Handler[*troupev1.Job]{
		OnAdd:        func(k string, _ *troupev1.Job) { ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix)) },
		OnUpdate:     func(k string, _, _ *troupev1.Job) { ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix)) },
		OnDelete:     func(k string, _ *troupev1.Job) { ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix)) },
		OnUnreadable: cfg.Events.RecordUnreadable,
	})
	taskJob := func(t *troupev1.Task) { ctl.queue.Add(t.GetMetadata().GetNamespace() + "/" + t.GetSpec().GetJob()) }
	ctl.tasks.AddHandler(cache.Handler[*troupev1.Task]{
		OnAdd: func(_ string, t *troupev1.Task) { taskJob(t) }, OnUpdate: func(_ string, _, t *troupev1.Task) { taskJob(t) },
		OnDelete: func(_ string, t *troupev1.Task) { taskJob(t) }, OnUnreadable: cfg.Events.RecordUnreadable,
	})
	runJob := func(r *troupev1.Run) {
		if ns, rest, ok := strings.Cut(r.GetMetadata().GetName(), "/"); ok {
			if job, _, ok := strings.Cut(rest, "/"); ok {
				ctl.queue.Add(ns + "/" + job)
			}
		}
	}
	ctl.runs.AddHandler(cache.Handler[*troupev1.Run]{
		OnAdd: func(_ string, r *troupev1.Run) { runJob(r) }, OnUpdate: func(_ string, _, r *troupev1.Run) { runJob(r) },
		OnUnreadable: cfg.Events.RecordUnreadable,
	})
	return ctl, nil
}

// jobFromKey turns "/jobs/<ns>/<job>" into "<ns>/<job>".
func jobFromKey(key, prefix string) string { return strings.TrimPrefix(key, prefix) }

// Run reconciles jobs until ctx ends.
func (ctl *Controller) Run(ctx context.Context) error {
	if err := cache.Start(ctx, ctl.jobs, ctl.tasks, ctl.runs); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		ctl.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range max(ctl.cfg.Workers, 1) {
		wg.Go(func() { ctl.work(ctx) })
	}
	wg.Wait()
	return ctx.Err()
}

// work syncs the jobs the queue hands it until the queue shuts down.
func (ctl *Controller) work(ctx context.Context) {
	for {
		job, shutdown := ctl.queue.Get()
		if shutdown {
			return
		}
		retryIn, err := ctl.sync(ctx, job)
		switch {
		case err != nil && ctx.Err() == nil:
			ctl.cfg.Logger.Info("job sync failed; retrying", zap.String("job", job), zap.Error(err))
			ctl.queue.AddRateLimited(job)
		case retryIn > 0:
			ctl.queue.Forget(job)
			ctl.queue.AddAfter(job, retryIn)
		default:
			ctl.queue.Forget(job)
		}
		ctl.queue.Done(job)
	}
}

// write commits one transaction and turns conflicts into errors (the job
// is requeued and synced again from fresh caches).
func (ctl *Controller) write(ctx context.Context, tx *clientlib.Txn) error {
	out, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	return out.Err()
}

// sync reconciles one job; a positive duration asks to be called again
// then (a retry backoff is running).
func (ctl *Controller) sync(ctx context.Context, jobName string) (time.Duration, error) {
	job, ok := ctl.jobs.Indexer().Get(clientlib.Jobs.Prefix + jobName)
	tasks := map[int32]*troupev1.Task{}
	for _, t := range ctl.tasks.Indexer().ByIndex(clientlib.IndexJob, jobName) {
		tasks[t.GetSpec().GetIndex()] = t
	}
	if !ok && ctl.jobs.Unreadable(clientlib.Jobs.Prefix+jobName) != nil {
		return 0, nil // skipped: neither created nor gone
	}
	if !ok {
		// The job is gone: its tasks go too. Only if the store agrees: a
		// job written with its tasks may reach the task cache first.
		for _, t := range tasks {
			tx := clientlib.NewTxn(ctl.c)
			g := tx.Group().Require(clientlib.Jobs.Prefix+jobName, 0)
			clientlib.Unbind(g, t)
			clientlib.DeleteObject(g, clientlib.Tasks, t)
			if err := ctl.write(ctx, tx); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	now := ctl.cfg.Now()
	var retryIn time.Duration
	for _, t := range tasks {
		if err := ctl.observe(ctx, t); err != nil {
			return 0, err
		}
	}
	// Re-read after observing: the tasks changed.
	for i := range tasks {
		if t, ok := ctl.tasks.Indexer().Get(taskKey(jobName, i)); ok {
			tasks[i] = t
		}
	}
	spec := job.GetSpec()
	status := &troupev1.JobStatus{}
	exhausted := "" // a task that failed with no retries left
	var (
		missing             []*troupev1.Task // to create
		created, scaledDown int
	)
	defer func() {
		if created > 0 {
			ctl.jobEvent(job, clientlib.EventNormal, "TasksCreated", "Created %d task(s) of %d", created, spec.GetCount())
		}
		if scaledDown > 0 {
			ctl.jobEvent(job, clientlib.EventNormal, "ScaledDown", "Stopped %d task(s) above count %d", scaledDown, spec.GetCount())
		}
	}()
	for i := int32(0); i < spec.GetCount() || int(i) < len(tasks); i++ {
		t, exists := tasks[i]
		switch {
		case spec.GetStopped() || i >= spec.GetCount():
			if exists && !finished(t) {
				if err := ctl.finish(ctx, t, troupev1.TaskPhase_TASK_PHASE_STOPPED, "job stopped or scaled down"); err != nil {
					return 0, err
				}
				if !spec.GetStopped() {
					scaledDown++
				}
			}
			continue
		case !exists && ctl.tasks.Unreadable(taskKey(jobName, i)) != nil:
			continue // skipped: not recreated over, nor counted
		case !exists:
			missing = append(missing, newTask(job, i, now))
			status.Pending++
			continue
		}
		phase := t.GetStatus().GetPhase()
		retry := phase == troupev1.TaskPhase_TASK_PHASE_FAILED || phase == troupev1.TaskPhase_TASK_PHASE_LOST ||
			(phase == troupev1.TaskPhase_TASK_PHASE_SUCCEEDED && spec.GetType() == troupev1.JobType_JOB_TYPE_SERVICE)
		batch := spec.GetType() == troupev1.JobType_JOB_TYPE_BATCH
		if retry && batch && (t.GetSpec().GetAttempt() >= spec.GetMaxRetries() ||
			phase == troupev1.TaskPhase_TASK_PHASE_FAILED && restartsInPlace(t.GetSpec())) {
			exhausted = t.GetMetadata().GetName()
			retry = false
		}
		if retry {
			wait := spec.GetRetryBackoff().AsDuration() - now.Sub(t.GetStatus().GetFinished().AsTime())
			if t.GetStatus().GetFinished() == nil || wait <= 0 {
				prev := proto.Clone(t).(*troupev1.Task) // replace changes an unbound t
				if err := ctl.replace(ctx, job, t, now); err != nil {
					return 0, err
				}
				ctl.retried(job, prev)
				status.Retries++
				status.Pending++
				continue
			}
			if retryIn == 0 || wait < retryIn {
				retryIn = wait
			}
		}
		count(status, phase)
	}
	for len(missing) > 0 {
		n := createBatch(missing)
		if err := ctl.create(ctx, missing[:n]); err != nil {
			return 0, err
		}
		created += n
		missing = missing[n:]
	}
	return retryIn, ctl.setStatus(ctx, job, status, exhausted, now)
}

func taskKey(job string, i int32) string {
	return fmt.Sprintf("%s%s/%d", clientlib.Tasks.Prefix, job, i)
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

// observe brings a bound task's phase in line with its Run.
func (ctl *Controller) observe(ctx context.Context, t *troupev1.Task) error {
	m := t.GetBinding().GetMachine()
	if m == "" {
		return nil
	}
	ref := clientlib.TaskRef(t.GetMetadata().GetNamespace(), t.GetSpec().GetJob(), t.GetSpec().GetIndex())
	run, ok := ctl.runs.Indexer().Get(clientlib.Runs.Prefix + m + "/" + ref)
	if !ok || run.GetAttempt() != t.GetSpec().GetAttempt() {
		return nil // not started yet, or a run of an earlier attempt
	}
	switch run.GetPhase() {
	case troupev1.RunPhase_RUN_PHASE_RUNNING:
		// A run restarted in place says so: its restarts, its last exit
		// and the reason (back-off, restarted).
		st := &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_RUNNING, Restarts: run.GetRestarts(),
			Reason: run.GetReason(), ExitCode: run.GetExitCode()}
		if proto.Equal(t.GetStatus(), st) {
			return nil
		}
		u := proto.Clone(t).(*troupev1.Task)
		u.Status = st
		tx := clientlib.NewTxn(ctl.c)
		clientlib.PutObject(tx.Group(), clientlib.Tasks, u)
		return ctl.write(ctx, tx)
	case troupev1.RunPhase_RUN_PHASE_SUCCEEDED:
		return ctl.finishRun(ctx, t, run, troupev1.TaskPhase_TASK_PHASE_SUCCEEDED)
	case troupev1.RunPhase_RUN_PHASE_FAILED, troupev1.RunPhase_RUN_PHASE_KILLED:
		if err := ctl.finishRun(ctx, t, run, troupev1.TaskPhase_TASK_PHASE_FAILED); err != nil {
			return err
		}
		msg := fmt.Sprintf("Attempt %d %s on %s with exit code %d", run.GetAttempt(),
			strings.ToLower(strings.TrimPrefix(run.GetPhase().String(), "RUN_PHASE_")), m, run.GetExitCode())
		if r := run.GetReason(); r != "" {
			msg += ": " + r
		}
		ctl.taskEvent(t, clientlib.EventWarning, "Failed", "%s", msg)
	}
	return nil
}

func (ctl *Controller) finishRun(ctx context.Context, t *troupev1.Task, run *troupev1.Run, phase troupev1.TaskPhase) error {
	return ctl.finishStatus(ctx, t, &troupev1.TaskStatus{Phase: phase, ExitCode: run.GetExitCode(), Reason: run.GetReason(),
		Finished: run.GetFinished(), Restarts: run.GetRestarts()})
}

// finish unbinds t (if bound) and gives it a final phase.
func (ctl *Controller) finish(ctx context.Context, t *troupev1.Task, phase troupev1.TaskPhase, reason string) error {
	return ctl.finishStatus(ctx, t, &troupev1.TaskStatus{Phase: phase, Reason: reason, Finished: timestamppb.New(ctl.cfg.Now())})
}

func (ctl *Controller) finishStatus(ctx context.Context, t *troupev1.Task, st *troupev1.TaskStatus) error {
	st.Machine = t.GetBinding().GetMachine()
	tx := clientlib.NewTxn(ctl.c)
	g := tx.Group()
	u := clientlib.Unbind(g, t)
	u.Status = st
	clientlib.PutObject(g, clientlib.Tasks, u)
	return ctl.write(ctx, tx)
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

// create writes tasks in one request, a group each on the condition that
// the task does not exist: any that does fails the sync (the cache had not
// shown it yet), and the job is synced again.
func (ctl *Controller) create(ctx context.Context, tasks []*troupev1.Task) error {
	tx := clientlib.NewTxn(ctl.c)
	for _, t := range tasks {
		clientlib.PutObject(tx.Group(), clientlib.Tasks, t)
	}
	return ctl.write(ctx, tx)
}

// newTask returns task i of job, its first attempt, pending for the job's
// scheduler.
func newTask(job *troupev1.Job, i int32, now time.Time) *troupev1.Task {
	spec := job.GetSpec()
	t := &troupev1.Task{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job.GetMetadata().GetName(), i), Namespace: job.GetMetadata().GetNamespace(),
			Labels: job.GetMetadata().GetLabels()},
		Spec: &troupev1.TaskSpec{Job: job.GetMetadata().GetName(), Index: i, Template: spec.GetTemplate(), Type: spec.GetType(),
			Priority: spec.GetPriority(), Scheduler: spec.GetScheduler(), Constraints: spec.GetConstraints(),
			Tolerations: spec.GetTolerations(), GangMin: spec.GetGangMin(), Submitted: timestamppb.New(now)},
		Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING},
	}
	setRestarts(t.Spec, spec)
	return t
}

// replace turns failed task t into its next attempt, pending again.
func (ctl *Controller) replace(ctx context.Context, job *troupev1.Job, t *troupev1.Task, now time.Time) error {
	tx := clientlib.NewTxn(ctl.c)
	g := tx.Group()
	u := clientlib.Unbind(g, t)
	u.Spec.Attempt++
	u.Spec.Submitted = timestamppb.New(now)
	u.Spec.Template = job.GetSpec().GetTemplate()
	setRestarts(u.Spec, job.GetSpec())
	u.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: fmt.Sprintf("attempt %d after: %s", u.Spec.Attempt, t.GetStatus().GetReason())}
	clientlib.PutObject(g, clientlib.Tasks, u)
	return ctl.write(ctx, tx)
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

// retried records the replacement of finished task t by its next attempt.
func (ctl *Controller) retried(job *troupev1.Job, t *troupev1.Task) {
	spec, st := job.GetSpec(), t.GetStatus()
	prev := fmt.Sprintf("attempt %d %s", t.GetSpec().GetAttempt(), strings.ToLower(strings.TrimPrefix(st.GetPhase().String(), "TASK_PHASE_")))
	if st.GetPhase() == troupev1.TaskPhase_TASK_PHASE_FAILED {
		prev += fmt.Sprintf(" with exit code %d", st.GetExitCode())
	}
	if st.GetReason() != "" {
		prev += ": " + st.GetReason()
	}
	backoff := spec.GetRetryBackoff().AsDuration()
	if spec.GetType() == troupev1.JobType_JOB_TYPE_SERVICE {
		ctl.taskEvent(t, clientlib.EventNormal, "Replaced", "Replica replaced by attempt %d after %v backoff; %s",
			t.GetSpec().GetAttempt()+1, backoff, prev)
		return
	}
	ctl.taskEvent(t, clientlib.EventNormal, "Retrying", "Retry %d of %d after %v backoff; %s",
		t.GetSpec().GetAttempt()+1, spec.GetMaxRetries(), backoff, prev)
}

func (ctl *Controller) jobEvent(job *troupev1.Job, eventType, reason, format string, args ...any) {
	m := job.GetMetadata()
	ctl.cfg.Events.Record(clientlib.Jobs.Name, m.GetNamespace(), m.GetName(), m.GetName(), eventType, reason, fmt.Sprintf(format, args...))
}

func (ctl *Controller) taskEvent(t *troupev1.Task, eventType, reason, format string, args ...any) {
	m := t.GetMetadata()
	ctl.cfg.Events.Record(clientlib.Tasks.Name, m.GetNamespace(), t.GetSpec().GetJob(), m.GetName(), eventType, reason, fmt.Sprintf(format, args...))
}

// setStatus writes the job's status if it changed, and records the
// job's end (succeeded, failed, stopped) once.
func (ctl *Controller) setStatus(ctx context.Context, job *troupev1.Job, st *troupev1.JobStatus, exhausted string, now time.Time) error {
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
	st.Retries += old.GetRetries()
	final := st.Phase == troupev1.JobPhase_JOB_PHASE_SUCCEEDED || st.Phase == troupev1.JobPhase_JOB_PHASE_FAILED
	if final {
		st.Finished = old.GetFinished()
		if st.Finished == nil {
			st.Finished = timestamppb.New(now)
		}
	}
	if proto.Equal(old, st) {
		return nil
	}
	u := proto.Clone(job).(*troupev1.Job)
	u.Status = st
	if _, err := clientlib.Update(ctx, ctl.c, clientlib.Jobs, u); err != nil {
		return err
	}
	if st.Phase != old.GetPhase() {
		switch st.Phase {
		case troupev1.JobPhase_JOB_PHASE_SUCCEEDED:
			ctl.jobEvent(job, clientlib.EventNormal, "Succeeded", "All %d task(s) succeeded", spec.GetCount())
		case troupev1.JobPhase_JOB_PHASE_FAILED:
			ctl.jobEvent(job, clientlib.EventWarning, "Failed", "Job failed: %s", st.Message)
		case troupev1.JobPhase_JOB_PHASE_STOPPED:
			ctl.jobEvent(job, clientlib.EventNormal, "Stopped", "Job stopped: its tasks are stopped")
		}
	}
	return nil
}
