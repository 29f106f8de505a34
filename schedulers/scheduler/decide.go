package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// refreshWait bounds how long a retry waits for the caches to show what
// a conflict said the store holds.
const refreshWait = time.Second

// scheduleJob places the pending tasks of job: decide, commit, and on
// conflicts refresh and retry only what failed, up to MaxAttempts.
func (s *Scheduler) scheduleJob(ctx context.Context, job string) {
	for attempt := 1; attempt <= s.cfg.MaxAttempts; attempt++ {
		tasks := s.pendingTasks(job)
		if len(tasks) == 0 {
			s.queue.Forget(job)
			s.mu.Lock()
			delete(s.seen, job)
			s.mu.Unlock()
			return
		}
		if !s.gangComplete(job, tasks) {
			return // the gang's other members are not there yet; their creation wakes the job
		}
		start := s.cfg.Now()
		s.firstAttempt(job, tasks, start)
		plan := framework.Schedule(s.cfg.Profile, s.snapshot(job), tasks)
		if s.cfg.Modes.Txn == framework.AllOrNothing && len(plan.Failures) > 0 {
			// A gang is placed whole or not at all.
			s.stats.decided(start, s.cfg.Now(), len(tasks), 0, 0, len(tasks))
			s.jobEvent(job, clientlib.EventWarning, "FailedScheduling", "gang of %d not placed: %d task(s) fit nowhere: %s",
				len(tasks), len(plan.Failures), plan.Failures[0].Status)
			s.queue.AddAfter(job, s.cfg.Backoff)
			return
		}
		res, err := framework.CommitPlan(ctx, s.commits(), plan, s.cfg.Modes, s.cfg.Name, s.cfg.Now())
		s.assume(res)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("commit failed", zap.String("job", job), zap.Error(err))
				s.queue.AddRateLimited(job)
			}
			return
		}
		s.stats.decided(start, s.cfg.Now(), len(tasks), len(res.Committed), len(res.Conflicted), len(plan.Failures))
		s.recordOutcome(job, attempt, plan, res)
		if s.cfg.Observe != nil {
			s.cfg.Observe(Decision{Job: job, Attempt: attempt, Plan: plan, Result: res})
		}
		if len(plan.Failures) > 0 {
			s.queue.AddAfter(job, s.cfg.Backoff)
		}
		if len(res.Conflicted) == 0 {
			s.queue.Forget(job)
			return
		}
		s.awaitRefresh(ctx, res.Conflicted)
	}
	s.queue.AddRateLimited(job) // still conflicting: back off
}

// commits is where placements are committed.
func (s *Scheduler) commits() clientlib.Store {
	if s.cfg.Commits != nil {
		return s.cfg.Commits
	}
	return s.c
}

// recordOutcome records the events of one commit of a job's plan: what
// was placed (with the attempt and the conflicts), what lost to other
// schedulers, what fits nowhere, and the tasks preempted.
func (s *Scheduler) recordOutcome(job string, attempt int, plan *framework.Plan, res *framework.Result) {
	if n := len(res.Committed); n > 0 {
		machines := map[string]bool{}
		for _, p := range res.Committed {
			machines[p.Machine.Name] = true
		}
		s.jobEvent(job, clientlib.EventNormal, "Scheduled", "%d task(s) placed on %d machine(s) by %s (attempt %d, %d conflict(s))",
			n, len(machines), s.cfg.Name, attempt, len(res.Conflicted))
	}
	if n := len(res.Conflicted); n > 0 {
		c := res.Conflicted[0].Conflict
		s.jobEvent(job, clientlib.EventWarning, "Conflict", "%d placement(s) lost to concurrent commits (first: %s on %s); retrying them",
			n, c.Reason, c.Key)
	}
	if n := len(plan.Failures); n > 0 {
		s.cfg.Logger.Debug("tasks fit nowhere", zap.String("job", job), zap.Int("tasks", n), zap.String("why", plan.Failures[0].Status.String()))
		s.jobEvent(job, clientlib.EventWarning, "FailedScheduling", "%d task(s) fit nowhere: %s", n, plan.Failures[0].Status)
	}
	if s.cfg.Events == nil {
		return
	}
	for _, p := range res.Committed {
		for _, v := range p.Victims {
			m := v.Task.GetMetadata()
			s.cfg.Events.Record(clientlib.Tasks.Name, m.GetNamespace(), v.Task.GetSpec().GetJob(), m.GetName(), clientlib.EventWarning,
				"Preempted", fmt.Sprintf("evicted from %s by %s (priority %d over %d)", p.Machine.Name, p.Task.Task.GetMetadata().GetName(),
					p.Task.Priority, v.Priority))
		}
	}
}

// jobEvent records an event of job ("<namespace>/<name>").
func (s *Scheduler) jobEvent(job, eventType, reason, format string, args ...any) {
	if s.cfg.Events == nil {
		return
	}
	ns, name, _ := strings.Cut(job, "/")
	s.cfg.Events.Record(clientlib.Jobs.Name, ns, name, name, eventType, reason, fmt.Sprintf(format, args...))
}

// gangComplete reports whether a gang job has at least gang_min members
// pending or placed, so that it is placed together and never in part.
func (s *Scheduler) gangComplete(job string, pending []*framework.Task) bool {
	min := pending[0].Task.GetSpec().GetGangMin()
	if min <= 0 {
		return true
	}
	members := len(pending)
	for _, t := range s.tasks.Indexer().ByIndex(clientlib.IndexJob, job) {
		if t.GetBinding().GetMachine() != "" {
			members++
		}
	}
	return int32(members) >= min
}

// firstAttempt records the wait of a job's tasks the first time the
// instance attempts them.
func (s *Scheduler) firstAttempt(job string, tasks []*framework.Task, now time.Time) {
	s.mu.Lock()
	first := !s.seen[job]
	s.seen[job] = true
	s.mu.Unlock()
	if first {
		s.stats.waited(tasks, now)
	}
}

// pendingTasks returns the job's unbound tasks this instance serves, in
// index order, leaving out those it placed itself and the cache does not
// show bound yet.
func (s *Scheduler) pendingTasks(job string) []*framework.Task {
	var out []*framework.Task
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks.Indexer().ByIndex(clientlib.IndexJob, job) {
		key, err := clientlib.Tasks.Key(t)
		if err != nil || !clientlib.Pending(t) || !s.serves(t) {
			continue
		}
		if a, ok := s.assumed[job][key]; ok {
			if t.GetMetadata().GetVersion() < a.version {
				continue // our binding is on its way
			}
			s.forget(job, key)
		}
		out = append(out, framework.NewTask(key, t))
	}
	slices.SortFunc(out, func(a, b *framework.Task) int { return int(a.Task.GetSpec().GetIndex() - b.Task.GetSpec().GetIndex()) })
	return out
}

// assume remembers placements committed until the cache shows them, and
// puts the counters they wrote into the cell view, so the next decision
// neither places the same tasks again nor conflicts with this commit.
func (s *Scheduler) assume(res *framework.Result) {
	if res == nil {
		return
	}
	for _, w := range res.Counters {
		s.view.AssumeCounter(w.Key, w.Value, w.Version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range res.Committed {
		if s.assumed[p.Task.Job] == nil {
			s.assumed[p.Task.Job] = map[string]assumed{}
		}
		s.assumed[p.Task.Job][p.Task.Key] = assumed{version: res.TaskVersions[p.Task.Key], machine: p.Machine.Name}
	}
}

// snapshot builds the decision's view of the cell: the machines from
// the cell view, the job's tasks per machine (bound ones, and those this
// instance placed that the cache does not show bound yet), and, for
// preemption, the tasks bound to a machine, read from the cache on
// demand.
func (s *Scheduler) snapshot(job string) *framework.Snapshot {
	jobTasks := map[string]int{}
	bound := map[string]bool{}
	for _, key := range s.tasks.Indexer().IndexKeys(clientlib.IndexJob, job) {
		if t, ok := s.tasks.Indexer().Get(key); ok && t.GetBinding().GetMachine() != "" {
			jobTasks[t.GetBinding().GetMachine()]++
			bound[key] = true
		}
	}
	s.mu.Lock()
	for key, a := range s.assumed[job] {
		if !bound[key] {
			jobTasks[a.machine]++
		}
	}
	s.mu.Unlock()
	snap := s.view.Snapshot(jobTasks, job)
	if s.cfg.Profile.Preempt {
		snap.Running = s.running
	}
	return snap
}

// running returns the tasks bound to machine, for preemption.
func (s *Scheduler) running(machine string) []*framework.Running {
	var out []*framework.Running
	for _, t := range s.tasks.Indexer().ByIndex(clientlib.IndexMachine, machine) {
		key, err := clientlib.Tasks.Key(t)
		if err != nil {
			continue
		}
		ft := framework.NewTask(key, t)
		out = append(out, &framework.Running{Key: key, Task: t, Job: ft.Job, Priority: ft.Priority, Requests: ft.Requests})
	}
	return out
}

// awaitRefresh waits until the caches hold the versions the conflicts
// reported (or refreshWait passes), so the retry decides on fresh state.
func (s *Scheduler) awaitRefresh(ctx context.Context, conflicts []framework.Conflicted) {
	deadline := time.NewTimer(refreshWait)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !s.refreshed(conflicts) {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

func (s *Scheduler) refreshed(conflicts []framework.Conflicted) bool {
	for _, c := range conflicts {
		k, v := c.Conflict.Key, c.Conflict.CurrentVersion
		var have uint64
		switch {
		case strings.HasPrefix(k, clientlib.AllocPrefix):
			if o, ok := s.cache.counters.Indexer().Get(k); ok {
				have = o.GetMetadata().GetVersion()
			}
		case strings.HasPrefix(k, clientlib.Tasks.Prefix):
			if o, ok := s.tasks.Indexer().Get(k); ok {
				have = o.GetMetadata().GetVersion()
			}
		default:
			continue
		}
		if have < v {
			return false
		}
	}
	return true
}
