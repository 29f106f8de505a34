// Package gc is the garbage collector: it deletes the Runs that no task
// needs any more — their task is gone, has moved on to a later attempt, or
// finished — once they have been finished for the retention period, so
// that `troupe describe` can still show recent outcomes, and the Events
// (of jobs, tasks and machines) last seen more than the retention period
// ago, and the stop keys (clientlib.JobStopKey) and JobSchedulings
// (schedulers' word on a job's pending tasks) of jobs that are gone with
// every task of theirs. (Bindings need no collection: a task's Binding
// is deleted in the transaction that unbinds it.)
//
// Stored values that cannot be read (see clientlib.DecodeAt) are skipped
// and logged once: an unreadable run or event is not collected, nor a run
// whose task is unreadable (it may still need it).
package gc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Config configures the collector.
type Config struct {
	Now       func() time.Time
	Retention time.Duration
	Interval  time.Duration
	Logger    *zap.Logger
}

// Collector is a running garbage collector.
type Collector struct {
	cfg   Config
	s     clientlib.Store
	runs  *cache.Informer[*troupev1.Run]
	tasks *cache.Informer[*troupev1.Task]

	mu sync.Mutex // guards skipped
	// skipped are the unreadable events the last pass skipped (and
	// logged), by key: a pass logs only those new since.
	skipped map[string]bool
}

// New returns a collector over store s (a *clientlib.Client, or an
// in-memory store in tests).
func New(s clientlib.Store, cfg Config) (*Collector, error) {
	if cfg.Now == nil || cfg.Logger == nil || cfg.Retention < 0 || cfg.Interval <= 0 {
		return nil, errors.New("gc: Now, Logger, a non-negative Retention and a positive Interval are required")
	}
	return &Collector{cfg: cfg, s: s, runs: clientlib.NewInformer(s, clientlib.Runs, "", nil),
		tasks: clientlib.NewInformer(s, clientlib.Tasks, "", nil)}, nil
}

// Run collects every Interval until ctx ends.
func (gc *Collector) Run(ctx context.Context) error {
	if err := cache.Start(ctx, gc.runs, gc.tasks); err != nil {
		return err
	}
	t := time.NewTicker(gc.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := gc.Collect(ctx); err != nil && ctx.Err() == nil {
			gc.cfg.Logger.Info("gc", zap.Int("deleted", n), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Collect deletes the collectable runs and events once and says how many
// it deleted. Events are listed from the store each time rather than
// cached: they are many and read only here.
func (gc *Collector) Collect(ctx context.Context) (int, error) {
	now := gc.cfg.Now()
	deleted, errs := deleteIf(ctx, gc.s, clientlib.Runs, gc.runs.Indexer().List(), func(r *troupev1.Run) bool { return gc.collectable(r, now) })
	for _, k := range []clientlib.Kind[*troupev1.Event]{clientlib.Events, clientlib.MachineEvents} {
		events, _, err := clientlib.List(ctx, gc.s, k, "")
		var unreadable clientlib.Unreadables
		if err == nil || errors.As(err, &unreadable) {
			gc.reportUnreadable(k, unreadable)
			err = nil
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n, more := deleteIf(ctx, gc.s, k, events, func(e *troupev1.Event) bool {
			return !e.GetLastSeen().AsTime().Add(gc.cfg.Retention).After(now)
		})
		deleted += n
		errs = append(errs, more...)
	}
	n, more := gc.collectStops(ctx)
	deleted += n
	errs = append(errs, more...)
	n, more = gc.collectSchedulings(ctx)
	return deleted + n, errors.Join(append(errs, more...)...)
}

// collectSchedulings deletes the JobSchedulings of jobs that are gone
// with every task of theirs. A scheduler that knew of the job deletes
// its own once the job's tasks are gone, or at its next decision; these
// are the rest (of a scheduler that stopped meanwhile, or lost a race
// with the deletion). Schedulers write a job's only about its pending
// tasks, so none is written again once they are gone; the deletion is
// conditioned on the object being as read and the job absent, so the
// JobScheduling of a job created again under the name is kept. Tasks
// without a job object (the simulator's) keep theirs while they last.
func (gc *Collector) collectSchedulings(ctx context.Context) (int, []error) {
	return gc.collectJobKeys(ctx, clientlib.JobSchedulings.Prefix, func(*storev1.KeyValue) bool { return true })
}

// collectStops deletes the stop keys of deleted jobs once no task of
// theirs is left. No task of a stopped job can be created, so a fresh
// read that finds none means none will appear while the key says
// stopped; the deletion is conditioned on the key being as read and the
// job absent, so a job created again under the name (which writes its
// key) keeps it.
func (gc *Collector) collectStops(ctx context.Context) (int, []error) {
	return gc.collectJobKeys(ctx, clientlib.JobStopsPrefix, func(kv *storev1.KeyValue) bool { return string(kv.GetValue()) == "1" })
}

// collectJobKeys deletes the keys "<prefix><namespace>/<job>" that want
// accepts, of jobs that are absent and have no task left, each on the
// condition that the key is as read and the job still absent.
func (gc *Collector) collectJobKeys(ctx context.Context, prefix string, want func(*storev1.KeyValue) bool) (int, []error) {
	kvs, _, err := gc.s.List(ctx, prefix)
	if err != nil {
		return 0, []error{err}
	}
	deleted := 0
	var errs []error
	for _, kv := range kvs {
		job := strings.TrimPrefix(kv.GetKey(), prefix) // <namespace>/<job>
		if strings.Count(job, "/") != 1 || !want(kv) {
			continue
		}
		jobKey := clientlib.Jobs.Prefix + job
		j, err := gc.s.Get(ctx, jobKey)
		if err != nil || j != nil {
			errs = append(errs, err)
			continue // the job is there
		}
		tasks, _, err := gc.s.List(ctx, clientlib.Tasks.Prefix+job+"/")
		if err != nil || len(tasks) > 0 {
			errs = append(errs, err)
			continue // the job controller is still deleting them
		}
		tx := clientlib.NewTxn(gc.s)
		tx.Group().Require(kv.GetKey(), kv.GetVersion()).Require(jobKey, 0).Delete(kv.GetKey())
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	return deleted, errs
}

// reportUnreadable logs the unreadable events of kind k a pass skipped,
// each once for as long as it stays unreadable.
func (gc *Collector) reportUnreadable(k clientlib.Kind[*troupev1.Event], unreadable clientlib.Unreadables) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	prev := gc.skipped
	gc.skipped = map[string]bool{}
	for key := range prev {
		if !strings.HasPrefix(key, k.Prefix) {
			gc.skipped[key] = true
		}
	}
	for _, u := range unreadable {
		if !prev[u.Key] {
			gc.cfg.Logger.Error("gc: unreadable event skipped", zap.String("key", u.Key), zap.Uint64("version", u.Version), zap.Error(u.Err))
		}
		gc.skipped[u.Key] = true
	}
}

// deleteIf deletes the objects of kind k that collectable accepts.
func deleteIf[T clientlib.Object](ctx context.Context, s clientlib.Store, k clientlib.Kind[T], objs []T, collectable func(T) bool) (int, []error) {
	deleted := 0
	var errs []error
	for _, o := range objs {
		if !collectable(o) {
			continue
		}
		if err := clientlib.Delete(ctx, s, k, o); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	return deleted, errs
}

func (gc *Collector) collectable(run *troupev1.Run, now time.Time) bool {
	fin := run.GetFinished()
	if fin == nil || fin.AsTime().Add(gc.cfg.Retention).After(now) {
		return false // running, or finished too recently
	}
	// The run's name is the task's "<namespace>/<job>/<index>".
	key := clientlib.Tasks.Prefix + run.GetMetadata().GetName()
	task, ok := gc.tasks.Indexer().Get(key)
	switch {
	case !ok:
		return gc.tasks.Unreadable(key) == nil // gone; an unreadable task may still need it
	case task.GetSpec().GetAttempt() > run.GetAttempt():
		return true
	}
	switch task.GetStatus().GetPhase() {
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED,
		troupev1.TaskPhase_TASK_PHASE_STOPPED, troupev1.TaskPhase_TASK_PHASE_LOST:
		return true
	}
	return false
}
