package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

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
	cfg    Config
	s      clientlib.Store
	jobs   *cache.Informer[*troupev1.Job]
	tasks  *cache.Informer[*troupev1.Task]
	runs   *cache.Informer[*troupev1.Run]
	quotas *cache.Informer[*troupev1.Quota]
	// policies are the cell's ValidationPolicies, which validator
	// follows: the rules a job must keep for its first tasks to be
	// created (State.Refused).
	policies  *cache.Informer[*troupev1.ValidationPolicy]
	validator *clientlib.Validator
	queue     *cache.WorkQueue
	// written are the task writes the task cache does not show yet.
	written written
}

// indexAdmission indexes the jobs waiting for their namespace's quota
// (status.admission set, not a refusal) by namespace; indexRefused the
// jobs refused under the cell's policies (clientlib.JobRefused), all
// under "".
const (
	indexAdmission = "admission"
	indexRefused   = "refused"
)

// New returns a job controller over store s (a *clientlib.Client, or an
// in-memory store in tests). The controller judges jobs under the cell's
// ValidationPolicies itself; s must enforce the built-in rules alone (no
// LoadPolicies or StartPolicies on it), or its status writes of the jobs
// it refuses, or of those admitted before a limit was lowered, would be
// refused too.
func New(s clientlib.Store, cfg Config) (*Controller, error) {
	if cfg.Now == nil || cfg.Logger == nil {
		return nil, errors.New("job controller: Now and Logger are required")
	}
	v, err := clientlib.NewValidator()
	if err != nil {
		return nil, fmt.Errorf("job controller: %w", err)
	}
	ctl := &Controller{cfg: cfg, s: s, queue: cache.NewWorkQueue(cfg.Queue), validator: v}
	ctl.jobs = clientlib.NewInformer(s, clientlib.Jobs, "", map[string]cache.IndexFunc[*troupev1.Job]{
		indexAdmission: func(j *troupev1.Job) []string {
			if j.GetStatus().GetAdmission() == "" || clientlib.JobRefused(j) {
				return nil
			}
			return []string{j.GetMetadata().GetNamespace()}
		},
		indexRefused: func(j *troupev1.Job) []string {
			if !clientlib.JobRefused(j) {
				return nil
			}
			return []string{""}
		},
	})
	ctl.tasks = clientlib.NewInformer(s, clientlib.Tasks, "", clientlib.TaskIndexes())
	ctl.runs = clientlib.NewInformer(s, clientlib.Runs, "", nil)
	ctl.quotas = clientlib.NewInformer(s, clientlib.Quotas, "", nil)
	ctl.jobs.AddHandler(cache.Handler[*troupev1.Job]{
		OnAdd:        func(k string, _ *troupev1.Job) { ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix)) },
		OnUpdate:     func(k string, _, _ *troupev1.Job) { ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix)) },
		OnDelete:     func(k string, _ *troupev1.Job) { ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix)) },
		OnUnreadable: cfg.Events.RecordUnreadable,
	})
	taskJob := func(t *troupev1.Task) { ctl.queue.Add(t.GetMetadata().GetNamespace() + "/" + t.GetSpec().GetJob()) }
	// A task that gives its charge back makes room in its namespace's
	// quota: the jobs waiting for it look again.
	ctl.tasks.AddHandler(cache.Handler[*troupev1.Task]{
		OnAdd: func(_ string, t *troupev1.Task) { taskJob(t) },
		OnUpdate: func(_ string, old, t *troupev1.Task) {
			taskJob(t)
			if old.GetCharge() != nil && t.GetCharge() == nil {
				ctl.wakeWaiting(t.GetMetadata().GetNamespace())
			}
		},
		OnDelete: func(_ string, t *troupev1.Task) {
			taskJob(t)
			if t.GetCharge() != nil {
				ctl.wakeWaiting(t.GetMetadata().GetNamespace())
			}
		},
		OnUnreadable: cfg.Events.RecordUnreadable,
	})
	// The controller judges with the cell's policies, and writes with the
	// built-in rules alone (s carries no validator of the policies): its
	// status writes of a refused job, or of one admitted before a limit
	// was lowered, are not refused. A change of the policies has the
	// refused jobs judged again.
	ctl.policies = clientlib.NewInformer(s, clientlib.ValidationPolicies, "", nil)
	v.Follow(ctl.policies, func(err error) {
		if err != nil {
			cfg.Logger.Warn("validation policies that do not compile are not enforced", zap.Error(err))
		}
		for _, k := range ctl.jobs.Indexer().IndexKeys(indexRefused, "") {
			ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix))
		}
	})
	quotaChanged := func(_ string, q *troupev1.Quota) { ctl.wakeWaiting(q.GetMetadata().GetName()) }
	ctl.quotas.AddHandler(cache.Handler[*troupev1.Quota]{
		OnAdd: quotaChanged, OnUpdate: func(k string, _, q *troupev1.Quota) { quotaChanged(k, q) }, OnDelete: quotaChanged,
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

// wakeWaiting queues the jobs of namespace that wait for its quota.
func (ctl *Controller) wakeWaiting(namespace string) {
	for _, k := range ctl.jobs.Indexer().IndexKeys(indexAdmission, namespace) {
		ctl.queue.Add(jobFromKey(k, clientlib.Jobs.Prefix))
	}
}

// caches are the controller's informers.
func (ctl *Controller) caches() []cache.Syncer {
	return []cache.Syncer{ctl.jobs, ctl.tasks, ctl.runs, ctl.quotas, ctl.policies}
}

// Run reconciles jobs until ctx ends.
func (ctl *Controller) Run(ctx context.Context) error {
	if err := cache.Start(ctx, ctl.caches()...); err != nil {
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
		ctl.process(ctx, job)
	}
}

// process syncs one job the queue handed out, requeues it as the outcome
// says, and hands it back. A job whose tasks wait for quota is looked at
// again with the same back-off as a failed sync, or as soon as its
// namespace's quota has room (wakeWaiting).
func (ctl *Controller) process(ctx context.Context, job string) {
	retryIn, err := ctl.sync(ctx, job)
	switch {
	case errors.Is(err, clientlib.ErrOverQuota) && ctx.Err() == nil:
		ctl.cfg.Logger.Debug("job waits for quota", zap.String("job", job), zap.Error(err))
		ctl.queue.AddRateLimited(job)
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

// sync reconciles one job ("<namespace>/<name>"): it writes what the
// tasks' runs say (Observe), then what Plan decides from the job and
// its tasks as written, and, for a job with no task yet, the controller's
// verdict on it under the cell's policies (judge). A positive duration
// asks to be called again then (a retry backoff is running). An error
// that matches clientlib.ErrOverQuota says that tasks wait for quota.
func (ctl *Controller) sync(ctx context.Context, jobName string) (time.Duration, error) {
	jobKey := clientlib.Jobs.Prefix + jobName
	job, ok := ctl.jobs.Indexer().Get(jobKey)
	if !ok && ctl.jobs.Unreadable(jobKey) != nil {
		return 0, nil // skipped: neither created nor gone
	}
	now := ctl.cfg.Now()
	if ctl.written.behind(jobName, ctl.tasks.Indexer().Get, now) {
		// The cache's events for the writes bring the job back.
		return behindRetry, nil
	}
	tasks := ctl.tasks.Indexer().ByIndex(clientlib.IndexJob, jobName)
	if !ok {
		job = nil // gone: its tasks go too
	}
	ns, _, _ := strings.Cut(jobName, "/")
	quota, _ := ctl.quotas.Indexer().Get(clientlib.QuotaKey(ns)) // nil: none
	if job != nil {
		for i, t := range tasks {
			u := Observe(t, ctl.runOf(t))
			if u == nil {
				continue
			}
			written, err := ctl.update(ctx, jobName, *u, quota)
			if err != nil {
				return 0, err
			}
			ctl.record(u.Events...)
			tasks[i] = written
		}
	}
	st := State{Job: job, Tasks: tasks, Unreadable: func(i int32) bool {
		return ctl.tasks.Unreadable(taskKey(jobName, i)) != nil
	}}
	if st.admitting() {
		st.Refused = ctl.judge(job)
	}
	ch := Plan(st, now)
	if err := ctl.commit(ctx, jobName, job, ch, quota); err != nil {
		return 0, err
	}
	return ch.RetryIn, nil
}

// judge returns the rules job breaks under the cell's policies as the
// controller follows them (and the built-in ones): why its first tasks
// are not created, whatever client wrote it.
func (ctl *Controller) judge(job *troupev1.Job) []clientlib.FieldError {
	var invalid *clientlib.ValidationError
	if err := clientlib.ValidateWith(ctl.validator, clientlib.Jobs, job); errors.As(err, &invalid) {
		return invalid.Errors
	} else if err != nil {
		return []clientlib.FieldError{{Rule: "validate", Message: err.Error()}}
	}
	return nil
}

// runOf returns the Run at bound task t's machine's key, if cached: maybe
// of an earlier placement of the task there, which Observe ignores
// (OfPlacement).
func (ctl *Controller) runOf(t *troupev1.Task) *troupev1.Run {
	m := t.GetBinding().GetMachine()
	if m == "" {
		return nil
	}
	ref := clientlib.TaskRef(t.GetMetadata().GetNamespace(), t.GetSpec().GetJob(), t.GetSpec().GetIndex())
	run, _ := ctl.runs.Indexer().Get(clientlib.Runs.Prefix + m + "/" + ref)
	return run
}

// commit writes ch, and records each change's events once it is
// committed; the first failure (a conflict: the caches were behind) ends
// the sync. Changes to many tasks go in batches, one group per task and
// as many groups per request as createBatch allows, as creation does: a
// 100,000-task job is deleted, stopped or created in a few hundred
// requests. The job's status goes first, so that a large job shows its
// counts while its tasks are still being written.
//
// Every write of a task charges or releases its namespace's quota in its
// group (clientlib.ChargeQuota, against quota as cached). A task the
// quota refuses is not a failure: it waits (a missing task stays
// missing, a task to replace stays ended), the other writes go on, the
// job's status.admission says why, and commit returns the *QuotaError so
// that the job is looked at again. Once nothing waits, the admission
// message is cleared. A job refused under the cell's policies (Plan's
// verdict: see State.Refused) keeps the admission Plan wrote.
func (ctl *Controller) commit(ctx context.Context, jobName string, job *troupev1.Job, ch Changes, quota *troupev1.Quota) error {
	jobKey := clientlib.Jobs.Prefix + jobName
	wrote := func(gone bool) func(t *troupev1.Task, version uint64) {
		return func(t *troupev1.Task, version uint64) {
			ctl.written.note(jobName, taskKey(jobName, t.GetSpec().GetIndex()), version, gone, ctl.cfg.Now())
		}
	}
	if err := writeBatches(ctx, ctl.s, ch.Delete, func(t *troupev1.Task) *troupev1.Task { return t }, func(g *clientlib.Group, t *troupev1.Task) {
		// Only if the store agrees that the job is gone.
		g.Require(jobKey, 0)
		clientlib.Unbind(g, t)
		clientlib.ChargeQuota(g, t, nil, nil)
		clientlib.DeleteObject(g, clientlib.Tasks, t)
	}, wrote(true), nil); err != nil {
		return err
	}
	if job == nil {
		return nil
	}
	if ch.Status != nil {
		u := proto.Clone(job).(*troupev1.Job)
		u.Status = ch.Status
		written, err := clientlib.Update(ctx, ctl.s, clientlib.Jobs, u)
		if err != nil {
			return err
		}
		job = written
		ctl.record(ch.StatusEvents...)
	}
	updated, created := 0, 0
	defer func() { ctl.record(ch.Summary(updated, created)...) }()
	wait := &quotaWait{quota: quota}
	if err := writeBatches(ctx, ctl.s, ch.Update, func(u TaskUpdate) *troupev1.Task { return u.To }, func(g *clientlib.Group, u TaskUpdate) {
		putUpdate(g, u, quota)
	}, func(u TaskUpdate, version uint64) {
		wrote(false)(u.To, version)
		ctl.record(u.Events...)
		updated++
	}, func(u TaskUpdate, c *clientlib.Conflict) bool { return wait.refused(u.To, c) }); err != nil {
		return err
	}
	ns, name := job.GetMetadata().GetNamespace(), job.GetMetadata().GetName()
	for _, batch := range ch.Create {
		if wait.err != nil {
			// The tasks are alike: those the quota refused would be
			// refused the same.
			wait.waiting += len(batch)
			continue
		}
		// Any task that exists fails the sync (the cache had not shown
		// it yet), and the job is synced again; so does a stop or
		// deletion of the job committed meanwhile, and no task of it is
		// created after that.
		if err := writeBatches(ctx, ctl.s, batch, func(t *troupev1.Task) *troupev1.Task { return t }, func(g *clientlib.Group, t *troupev1.Task) {
			clientlib.PutObject(clientlib.RequireJobRunning(g, ns, name), clientlib.Tasks, clientlib.ChargeQuota(g, nil, t, quota))
		}, func(t *troupev1.Task, version uint64) {
			wrote(false)(t, version)
			created++
		}, wait.refused); err != nil {
			return err
		}
	}
	if clientlib.JobRefused(job) {
		return nil // its admission is the policies' verdict (Plan's), not the quota's
	}
	return ctl.admit(ctx, job, wait)
}

// quotaWait is what the quota refused in one sync.
type quotaWait struct {
	quota *troupev1.Quota // as the sync read it
	// err is the first refusal; waiting counts the tasks it left
	// waiting.
	err     *clientlib.QuotaError
	waiting int
}

// refused reports whether c, the conflict of the group that wrote task t,
// is the quota's refusal, and then counts t as waiting.
func (w *quotaWait) refused(t *troupev1.Task, c *clientlib.Conflict) bool {
	qe := clientlib.QuotaRefusal(c, t, w.quota)
	if qe == nil {
		return false
	}
	if w.err == nil {
		w.err = qe
	}
	w.waiting++
	return true
}

// admission is the job's status.admission: why tasks wait, or "".
func (w *quotaWait) admission() string {
	if w.err == nil {
		return ""
	}
	return fmt.Sprintf("%s, %d task(s) waiting", w.err.Usage(), w.waiting)
}

// admit writes what w says into job's status.admission, if it changed,
// with a QuotaExceeded event when tasks start or keep waiting, and
// returns w's refusal (nil when nothing waits).
func (ctl *Controller) admit(ctx context.Context, job *troupev1.Job, w *quotaWait) error {
	msg := w.admission()
	if job.GetStatus().GetAdmission() != msg {
		u := proto.Clone(job).(*troupev1.Job)
		if u.Status == nil {
			u.Status = &troupev1.JobStatus{}
		}
		u.Status.Admission = msg
		if _, err := clientlib.Update(ctx, ctl.s, clientlib.Jobs, u); err != nil {
			return err
		}
		if msg != "" {
			ctl.record(jobEvent(job, clientlib.EventWarning, "QuotaExceeded", "%s", msg))
		}
	}
	if w.err != nil {
		return fmt.Errorf("job %s/%s: %d task(s) wait: %w", job.GetMetadata().GetNamespace(), job.GetMetadata().GetName(), w.waiting, w.err)
	}
	return nil
}

// writeBatches writes items to s in requests of createBatch's size (by
// the tasks task returns), one group per item built by build; committed,
// if set, is called with each item whose group committed and the version
// it wrote the item's task at. A failed group
// ends the writing with its conflict, once the others of its request are
// accounted for, unless refused (if set) takes the conflict as the
// quota's refusal of that item, which then waits.
func writeBatches[T any](ctx context.Context, s clientlib.Store, items []T, task func(T) *troupev1.Task,
	build func(*clientlib.Group, T), committed func(T, uint64), refused func(T, *clientlib.Conflict) bool) error {
	tasks := make([]*troupev1.Task, len(items))
	for i, it := range items {
		tasks[i] = task(it)
	}
	for len(items) > 0 {
		n := withinOps(tasks, createBatch(tasks))
		tx := clientlib.NewTxn(s)
		for _, it := range items[:n] {
			build(tx.Group(), it)
		}
		out, err := tx.Commit(ctx)
		if err != nil {
			return err
		}
		var conflicts []*clientlib.Conflict
		for i, g := range out.Groups {
			switch {
			case g.Committed:
				if committed != nil {
					key, _ := clientlib.Tasks.Key(tasks[i])
					committed(items[i], g.VersionOf(key))
				}
			case refused == nil || !refused(items[i], g.Conflict):
				conflicts = append(conflicts, g.Conflict)
			}
		}
		if len(conflicts) > 0 {
			return &clientlib.ConflictError{Conflicts: conflicts}
		}
		items, tasks = items[n:], tasks[n:]
	}
	return nil
}

// maxRequestOps bounds the conditions and operations of one request:
// the store's default limit.
const maxRequestOps = 4096

// withinOps returns how many of the first n tasks, at least one, go in
// one request without their groups' conditions and operations passing
// maxRequestOps. A task's group holds fewer than 8 + 2 per resource it
// requests: conditions (the task, the job or its stop key, the quota),
// its put or delete, its binding's deletion, and per resource its
// machine's counter and its quota counters (old and new band), and the
// quota's task counters.
func withinOps(tasks []*troupev1.Task, n int) int {
	ops := 0
	for i, t := range tasks[:n] {
		ops += 8 + 2*len(t.GetSpec().GetTemplate().GetRequests())
		if i > 0 && ops > maxRequestOps {
			return i
		}
	}
	return n
}

// putUpdate adds u to g: the task taken off its machine if it leaves it,
// its quota charged or released against quota, and To written. It
// returns the task as written.
func putUpdate(g *clientlib.Group, u TaskUpdate, quota *troupev1.Quota) *troupev1.Task {
	if u.Unbinds() {
		clientlib.Unbind(g, u.From)
	}
	to := clientlib.ChargeQuota(g, u.From, u.To, quota)
	clientlib.PutObject(g, clientlib.Tasks, to)
	return to
}

// update writes u in one transaction and returns the task as written,
// with its new version.
func (ctl *Controller) update(ctx context.Context, jobName string, u TaskUpdate, quota *troupev1.Quota) (*troupev1.Task, error) {
	tx := clientlib.NewTxn(ctl.s)
	written := putUpdate(tx.Group(), u, quota)
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		return nil, err
	}
	key, err := clientlib.Tasks.Key(written)
	if err != nil {
		return nil, err
	}
	written.Metadata.Version = out.Groups[0].VersionOf(key)
	ctl.written.note(jobName, key, written.Metadata.Version, false, ctl.cfg.Now())
	return written, nil
}

func (ctl *Controller) record(events ...Event) {
	for _, e := range events {
		ctl.cfg.Events.Record(e.InvolvedKind, e.Namespace, e.Scope, e.Name, e.Type, e.Reason, e.Message)
	}
}

// taskKey is the key of task i of job "<namespace>/<name>".
func taskKey(job string, i int32) string {
	return clientlib.Tasks.Prefix + job + "/" + strconv.Itoa(int(i))
}
