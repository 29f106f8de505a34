package job

import (
	"context"
	"errors"
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
	cfg   Config
	s     clientlib.Store
	jobs  *cache.Informer[*troupev1.Job]
	tasks *cache.Informer[*troupev1.Task]
	runs  *cache.Informer[*troupev1.Run]
	queue *cache.WorkQueue
}

// New returns a job controller over store s (a *clientlib.Client, or an
// in-memory store in tests).
func New(s clientlib.Store, cfg Config) (*Controller, error) {
	if cfg.Now == nil || cfg.Logger == nil {
		return nil, errors.New("job controller: Now and Logger are required")
	}
	ctl := &Controller{cfg: cfg, s: s, queue: cache.NewWorkQueue(cfg.Queue)}
	ctl.jobs = clientlib.NewInformer(s, clientlib.Jobs, "", nil)
	ctl.tasks = clientlib.NewInformer(s, clientlib.Tasks, "", clientlib.TaskIndexes())
	ctl.runs = clientlib.NewInformer(s, clientlib.Runs, "", nil)
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
		ctl.process(ctx, job)
	}
}

// process syncs one job the queue handed out, requeues it as the outcome
// says, and hands it back.
func (ctl *Controller) process(ctx context.Context, job string) {
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

// sync reconciles one job ("<namespace>/<name>"): it writes what the
// tasks' runs say (Observe), then what Plan decides from the job and
// its tasks as written. A positive duration asks to be called again then
// (a retry backoff is running).
func (ctl *Controller) sync(ctx context.Context, jobName string) (time.Duration, error) {
	jobKey := clientlib.Jobs.Prefix + jobName
	job, ok := ctl.jobs.Indexer().Get(jobKey)
	if !ok && ctl.jobs.Unreadable(jobKey) != nil {
		return 0, nil // skipped: neither created nor gone
	}
	tasks := ctl.tasks.Indexer().ByIndex(clientlib.IndexJob, jobName)
	if !ok {
		job = nil // gone: its tasks go too
	}
	now := ctl.cfg.Now()
	if job != nil {
		for i, t := range tasks {
			u := Observe(t, ctl.runOf(t))
			if u == nil {
				continue
			}
			written, err := ctl.update(ctx, *u)
			if err != nil {
				return 0, err
			}
			ctl.record(u.Events...)
			tasks[i] = written
		}
	}
	ch := Plan(State{Job: job, Tasks: tasks, Unreadable: func(i int32) bool {
		return ctl.tasks.Unreadable(taskKey(jobName, i)) != nil
	}}, now)
	if err := ctl.commit(ctx, jobKey, job, ch); err != nil {
		return 0, err
	}
	return ch.RetryIn, nil
}

// runOf returns the Run of bound task t's current machine, if cached.
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
func (ctl *Controller) commit(ctx context.Context, jobKey string, job *troupev1.Job, ch Changes) error {
	if err := writeBatches(ctx, ctl.s, ch.Delete, func(t *troupev1.Task) *troupev1.Task { return t }, func(g *clientlib.Group, t *troupev1.Task) {
		// Only if the store agrees that the job is gone.
		g.Require(jobKey, 0)
		clientlib.Unbind(g, t)
		clientlib.DeleteObject(g, clientlib.Tasks, t)
	}, nil); err != nil {
		return err
	}
	if ch.Status != nil {
		u := proto.Clone(job).(*troupev1.Job)
		u.Status = ch.Status
		if _, err := clientlib.Update(ctx, ctl.s, clientlib.Jobs, u); err != nil {
			return err
		}
		ctl.record(ch.StatusEvents...)
	}
	updated, created := 0, 0
	defer func() { ctl.record(ch.Summary(updated, created)...) }()
	if err := writeBatches(ctx, ctl.s, ch.Update, func(u TaskUpdate) *troupev1.Task { return u.To }, func(g *clientlib.Group, u TaskUpdate) {
		if u.Unbinds() {
			clientlib.Unbind(g, u.From)
		}
		clientlib.PutObject(g, clientlib.Tasks, u.To)
	}, func(u TaskUpdate) {
		ctl.record(u.Events...)
		updated++
	}); err != nil {
		return err
	}
	ns, name := job.GetMetadata().GetNamespace(), job.GetMetadata().GetName()
	for _, batch := range ch.Create {
		// Any task that exists fails the sync (the cache had not shown
		// it yet), and the job is synced again; so does a stop or
		// deletion of the job committed meanwhile, and no task of it is
		// created after that.
		tx := clientlib.NewTxn(ctl.s)
		for _, t := range batch {
			clientlib.PutObject(clientlib.RequireJobRunning(tx.Group(), ns, name), clientlib.Tasks, t)
		}
		if err := write(ctx, tx); err != nil {
			return err
		}
		created += len(batch)
	}
	return nil
}

// writeBatches writes items to s in requests of createBatch's size (by
// the tasks task returns), one group per item built by build; committed,
// if set, is called with each item whose group committed. A failed group
// ends the writing with its conflict, once the others of its request are
// accounted for.
func writeBatches[T any](ctx context.Context, s clientlib.Store, items []T, task func(T) *troupev1.Task,
	build func(*clientlib.Group, T), committed func(T)) error {
	tasks := make([]*troupev1.Task, len(items))
	for i, it := range items {
		tasks[i] = task(it)
	}
	for len(items) > 0 {
		n := createBatch(tasks)
		tx := clientlib.NewTxn(s)
		for _, it := range items[:n] {
			build(tx.Group(), it)
		}
		out, err := tx.Commit(ctx)
		if err != nil {
			return err
		}
		for i, g := range out.Groups {
			if g.Committed && committed != nil {
				committed(items[i])
			}
		}
		if err := out.Err(); err != nil {
			return err
		}
		items, tasks = items[n:], tasks[n:]
	}
	return nil
}

// update writes u in one transaction and returns the task as written,
// with its new version.
func (ctl *Controller) update(ctx context.Context, u TaskUpdate) (*troupev1.Task, error) {
	tx := clientlib.NewTxn(ctl.s)
	g := tx.Group()
	if u.Unbinds() {
		clientlib.Unbind(g, u.From)
	}
	clientlib.PutObject(g, clientlib.Tasks, u.To)
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		return nil, err
	}
	written := proto.Clone(u.To).(*troupev1.Task)
	key, err := clientlib.Tasks.Key(written)
	if err != nil {
		return nil, err
	}
	written.Metadata.Version = out.Groups[0].VersionOf(key)
	return written, nil
}

// write commits one transaction and turns conflicts into errors (the job
// is requeued and synced again from fresh caches).
func write(ctx context.Context, tx *clientlib.Txn) error {
	out, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	return out.Err()
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
