package storerun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// monitor is what the run follows of the store by watch: the workload's
// tasks (is the run done; which jobs keep tasks unplaced) and the
// machines' counters (the CPU allocated over time, each value checked
// against its machine's capacity as it changes, as the simulator checks
// every counter write). Its fields are guarded by run.mu.
type monitor struct {
	tasks map[string]taskState // by key
	// live are the tasks that keep the run going.
	live map[string]bool
	// expected counts the tasks submitted so far; submitted is set once
	// the workload is exhausted.
	expected  int
	submitted bool
	ended     bool // done is closed

	counters map[string]int64
	// cpuUsed is the CPU allocated now; cpuTime integrates it (in
	// millicore-seconds of wall time) since last.
	cpuUsed int64
	cpuTime float64
	last    time.Time
}

// taskState is what the monitor keeps of a task.
type taskState struct {
	job string // "<namespace>/<name>"
	// unplaced: pending, or stopped with its abandoned job.
	unplaced bool
}

func newMonitor() *monitor {
	return &monitor{tasks: map[string]taskState{}, live: map[string]bool{}, counters: map[string]int64{}}
}

// startMonitor starts following the tasks and the counters.
func (r *run) startMonitor() error {
	tasks := clientlib.NewInformer(r.c, clientlib.Tasks, namespace+"/", nil)
	tasks.AddHandler(cache.Handler[*troupev1.Task]{
		OnAdd:    func(key string, t *troupev1.Task) { r.taskChanged(key, t) },
		OnUpdate: func(key string, _, t *troupev1.Task) { r.taskChanged(key, t) },
	})
	r.goRun(tasks.Run)
	if err := tasks.WaitForSync(r.ctx); err != nil {
		return err
	}
	// The counters as they are (those of the prefill's tasks, bound
	// before the clock starts), then their changes.
	kvs, cursor, err := r.c.List(r.ctx, clientlib.AllocPrefix)
	if err != nil {
		return fmt.Errorf("storerun: read the machines' counters: %w", err)
	}
	for _, kv := range kvs {
		if err := r.counterChanged(&storev1.Event{Type: storev1.EventType_EVENT_TYPE_PUT, Kv: kv}); err != nil {
			return fmt.Errorf("storerun: %w", err)
		}
	}
	w := r.c.Watch(r.ctx, clientlib.AllocPrefix, cursor)
	r.goRun(func(context.Context) error {
		defer w.Close()
		for {
			resp, err := w.Next()
			if err != nil {
				return fmt.Errorf("watch the machines' counters: %w", err)
			}
			for _, ev := range resp.GetEvents() {
				if err := r.counterChanged(ev); err != nil {
					return err
				}
			}
		}
	})
	return nil
}

// taskChanged follows task t at key. A task keeps the run going until it
// has finished (succeeded, failed, or stopped with its abandoned job),
// unless it is placed and has no duration: such a task runs until the
// end.
func (r *run) taskChanged(key string, t *troupev1.Task) {
	phase := t.GetStatus().GetPhase()
	finished := phase == troupev1.TaskPhase_TASK_PHASE_SUCCEEDED || phase == troupev1.TaskPhase_TASK_PHASE_FAILED ||
		phase == troupev1.TaskPhase_TASK_PHASE_STOPPED
	ns, job := t.GetMetadata().GetNamespace(), t.GetSpec().GetJob()
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ends := r.durations[clientlib.TaskRef(ns, job, t.GetSpec().GetIndex())]
	forever := t.GetBinding().GetMachine() != "" && !ends
	r.tasks[key] = taskState{job: ns + "/" + job,
		unplaced: clientlib.Pending(t) || phase == troupev1.TaskPhase_TASK_PHASE_STOPPED}
	if finished || forever {
		delete(r.live, key)
	} else {
		r.live[key] = true
	}
	r.checkDone()
}

// checkDone closes done once every job is submitted and every task has
// been seen to finish or to run for good; r.mu is held.
func (r *run) checkDone() {
	if r.submitted && !r.ended && len(r.tasks) == r.expected && len(r.live) == 0 {
		r.ended = true
		close(r.done)
	}
}

// unplacedJobs returns the jobs with tasks unplaced; r.mu is held.
func (r *run) unplacedJobs() map[string]bool {
	out := map[string]bool{}
	for _, t := range r.tasks {
		if t.unplaced {
			out[t.job] = true
		}
	}
	return out
}

// counterChanged follows a machine counter's change.
func (r *run) counterChanged(ev *storev1.Event) error {
	kv := ev.GetKv()
	key := kv.GetKey()
	if clientlib.IsClaimsKey(key) { // a claims count (coarse-claims mode), no resource
		return nil
	}
	var value int64
	if ev.GetType() != storev1.EventType_EVENT_TYPE_DELETE {
		c, err := clientlib.DecodeCounter(key, kv.GetValue(), kv.GetVersion())
		if err != nil {
			return err
		}
		value = c.GetValue()
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if limit := r.capacity[key]; value > limit {
		return fmt.Errorf("at %v of virtual time %s is %d, over the machine's capacity %d", r.virtual(now), key, value, limit)
	}
	if strings.HasSuffix(key, "/cpu") {
		r.integrate(now)
		r.cpuUsed += value - r.counters[key]
	}
	r.counters[key] = value
	return nil
}

// integrate accounts the CPU allocated until now; r.mu is held.
func (r *run) integrate(now time.Time) {
	r.cpuTime += float64(r.cpuUsed) * now.Sub(r.last).Seconds()
	r.last = now
}

// utilisation returns the mean fraction of the cell's CPU allocated from
// virtual time 0 to end; r.mu is held.
func (r *run) utilisation(end time.Time) float64 {
	r.integrate(end)
	el := end.Sub(r.t0).Seconds()
	if el <= 0 || r.cpuTotal == 0 {
		return 0
	}
	return r.cpuTime / (float64(r.cpuTotal) * el)
}

// audit checks the machine counters in store s: each within its
// machine's capacity, and equal to the requests of the tasks of namespace
// ns bound to the machine (the store holds no others).
func audit(ctx context.Context, s clientlib.Store, capacity map[string]int64, ns string) error {
	tasks, _, err := clientlib.List(ctx, s, clientlib.Tasks, ns+"/")
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	requested := map[string]int64{}
	for _, t := range tasks {
		if m := t.GetBinding().GetMachine(); m != "" {
			for res, q := range t.GetSpec().GetTemplate().GetRequests() {
				requested[clientlib.AllocKey(m, res)] += q
			}
		}
	}
	kvs, _, err := s.List(ctx, clientlib.AllocPrefix)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	var errs []error
	for _, kv := range kvs {
		c, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		key, v := kv.GetKey(), c.GetValue()
		if clientlib.IsClaimsKey(key) {
			continue
		}
		if v > capacity[key] {
			errs = append(errs, fmt.Errorf("audit: %s is %d, over the machine's capacity %d", key, v, capacity[key]))
		}
		if v != requested[key] {
			errs = append(errs, fmt.Errorf("audit: %s is %d, the tasks bound there request %d", key, v, requested[key]))
		}
		delete(requested, key)
	}
	for key, q := range requested {
		errs = append(errs, fmt.Errorf("audit: no counter %s, the tasks bound there request %d", key, q))
	}
	return errors.Join(errs...)
}
