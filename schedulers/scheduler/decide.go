package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// refreshWait bounds how long a retry waits for the caches to show what
// a conflict said the store holds.
const refreshWait = time.Second

// scheduleJob places the pending tasks of job: decide, commit, and do
// what the policy says of the outcome: retry what lost to conflicts once
// the caches show what the conflicts reported, wait for room, back off,
// or give the job up.
func (s *Scheduler) scheduleJob(ctx context.Context, job string) {
	for {
		rec, ok := s.record(job)
		if !ok {
			return // still waiting: a wait since replaced the one that queued it
		}
		tasks, bound := s.pendingTasks(job)
		switch s.cfg.Policy.Begin(&rec.st, len(tasks), len(tasks) == 0 || gangComplete(tasks, len(bound))) {
		case Done:
			s.settled(ctx, job, rec, nil)
			s.done(job)
			return
		case Hold:
			return // the gang's other members are not there yet; their creation wakes the job
		}
		a, plan, res := s.decide(ctx, job, tasks, bound, rec)
		switch a.Step {
		case Retry:
			s.awaitRefresh(ctx, res.Conflicted)
			continue
		case Done:
			s.done(job)
		case Wait:
			s.mu.Lock()
			s.waits++
			unfit := failedTasks(plan)
			rec.waiting = &Waiting{Shapes: Shapes(unfit)}
			if len(unfit) > 0 {
				rec.waiting.Task = unfit[0]
			}
			rec.since, rec.until = s.waits, s.clock.Now().Add(a.Delay)
			s.mu.Unlock()
			s.queue.AddAfter(job, a.Delay)
		case BackOff:
			s.queue.AddAfter(job, a.Delay)
		case Abandon:
			s.abandon(ctx, job, tasks, rec.st.Decisions())
			s.done(job)
		}
		return
	}
}

// record returns the instance's record of job, made if need be, to
// decide about it; false when the job waits for room until later (the
// back-off that queued it belongs to an earlier wait, and neither room
// nor a change of its tasks has woken it since).
func (s *Scheduler) record(job string) (*jobRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[job]
	if r == nil {
		r = &jobRecord{}
		s.jobs[job] = r
	}
	if r.waiting != nil && s.clock.Now().Before(r.until) {
		return r, false
	}
	r.waiting = nil // being decided about
	return r, true
}

// done forgets job's record.
func (s *Scheduler) done(job string) {
	s.mu.Lock()
	delete(s.jobs, job)
	s.mu.Unlock()
}

// decide makes one decision about job's pending tasks and commits it,
// tells the job's JobScheduling what became of them (tell), and returns
// what the policy makes of the outcome, with the plan and the commit's
// result (nil when nothing was committed). bound are the machines of the
// job's bound tasks, by key, read with tasks (pendingTasks).
func (s *Scheduler) decide(ctx context.Context, job string, tasks []*framework.Task, bound map[string]string, rec *jobRecord) (Action, *framework.Plan, *framework.Result) {
	st := &rec.st
	start := s.clock.Now()
	attempt := st.Attempt()
	if st.Decisions() == 1 {
		s.stats.waited(tasks, start)
	}
	plan := framework.Schedule(s.cfg.Profile, s.snapshot(job, bound), tasks)
	if s.cfg.Modes.Txn == framework.AllOrNothing && len(plan.Failures) > 0 {
		// A gang is placed whole or not at all.
		s.stats.decided(start, s.clock.Now(), len(tasks), 0, 0, len(tasks))
		why := plan.Failures[0].Status
		if s.tell(ctx, job, rec, s.unfit(why, len(tasks), fmt.Sprintf("gang of %d not placed: %d task(s) fit nowhere: %s",
			len(tasks), len(plan.Failures), explanation(why)))) {
			s.jobEvent(job, clientlib.EventWarning, "FailedScheduling", "gang of %d not placed: %d task(s) fit nowhere: %s",
				len(tasks), len(plan.Failures), why)
		}
		gang := &framework.Plan{Failures: make([]framework.Failure, len(tasks))}
		for i, t := range tasks {
			gang.Failures[i] = framework.Failure{Task: t, Status: plan.Failures[0].Status}
		}
		a := s.cfg.Policy.After(st, Outcome{Unfit: len(tasks)})
		s.observe(Decision{Job: job, Attempt: attempt, Plan: gang, Result: &framework.Result{}, Action: a})
		return a, gang, nil
	}
	res, err := s.committer.Commit(ctx, plan)
	s.assume(res)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("commit failed", zap.String("job", job), zap.Error(err))
		}
		return s.cfg.Policy.After(st, Outcome{Err: err}), plan, nil
	}
	s.stats.decided(start, s.clock.Now(), len(tasks), len(res.Committed), len(res.Conflicted), len(plan.Failures))
	a := s.cfg.Policy.After(st, Outcome{Placed: len(res.Committed), Conflicted: len(res.Conflicted), Stopped: len(res.Stopped), Unfit: len(plan.Failures)})
	s.recordOutcome(job, attempt, res)
	switch n := len(plan.Failures); {
	case n > 0:
		why := plan.Failures[0].Status
		s.cfg.Logger.Debug("tasks fit nowhere", zap.String("job", job), zap.Int("tasks", n), zap.String("why", why.String()))
		if s.tell(ctx, job, rec, s.unfit(why, n, explanation(why))) {
			s.jobEvent(job, clientlib.EventWarning, "FailedScheduling", "%d task(s) fit nowhere: %s", n, why)
		}
	case len(res.Committed) == len(tasks):
		s.settled(ctx, job, rec, tasks)
	}
	s.observe(Decision{Job: job, Attempt: attempt, Plan: plan, Result: res, Action: a})
	return a, plan, res
}

func (s *Scheduler) observe(d Decision) {
	if s.cfg.Observe != nil {
		s.cfg.Observe(d)
	}
}

// failedTasks returns the tasks plan could not place.
func failedTasks(plan *framework.Plan) []*framework.Task {
	out := make([]*framework.Task, len(plan.Failures))
	for i, f := range plan.Failures {
		out[i] = f.Task
	}
	return out
}

// abandon gives job up after decisions decisions: its pending tasks are
// stopped (a final phase, so no scheduler takes them again) on condition
// that they are still as this instance read them, and the job gets an
// Abandoned event. A task changed meanwhile queues the job again, and the
// policy decides about it afresh.
func (s *Scheduler) abandon(ctx context.Context, job string, tasks []*framework.Task, decisions int) {
	reason := fmt.Sprintf("abandoned by %s after %d decisions", s.cfg.Name, decisions)
	for lo := 0; lo < len(tasks); lo += abandonPerRequest {
		tx := clientlib.NewTxn(s.c)
		for _, t := range tasks[lo:min(lo+abandonPerRequest, len(tasks))] {
			u := proto.Clone(t.Task).(*troupev1.Task)
			u.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_STOPPED, Reason: reason}
			clientlib.PutObject(tx.Group(), clientlib.Tasks, u)
		}
		if _, err := tx.Commit(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("abandon failed", zap.String("job", job), zap.Error(err))
		}
	}
	s.jobEvent(job, clientlib.EventWarning, "Abandoned", "%d pending task(s) stopped: %s", len(tasks), reason)
}

// abandonPerRequest bounds the tasks one abandoning request stops.
const abandonPerRequest = 500

// commits is where placements are committed.
func (s *Scheduler) commits() clientlib.Store {
	if s.cfg.Commits != nil {
		return s.cfg.Commits
	}
	return s.c
}

// Committer is where a decision's plan goes once it is made: the seam
// between deciding and committing. A Scheduler's commits it to the store
// (storeCommitter: framework.CommitPlan); a Shadow's evaluates it against
// the cell as its cache shows it at that moment and writes nothing
// (shadowCommit), and a Shadow has no other.
type Committer interface {
	// Commit commits plan (or says what committing it would have done),
	// as framework.CommitPlan reports it.
	Commit(ctx context.Context, plan *framework.Plan) (*framework.Result, error)
}

// storeCommitter commits plans to store in modes, as scheduler name.
type storeCommitter struct {
	store clientlib.Store
	modes framework.Modes
	name  string
	clock cache.Clock
}

func (c storeCommitter) Commit(ctx context.Context, plan *framework.Plan) (*framework.Result, error) {
	return framework.CommitPlan(ctx, c.store, plan, c.modes, c.name, c.clock.Now())
}

// recordOutcome records the events of one commit of a job's plan: what
// was placed (with the attempt and the conflicts), what lost to other
// schedulers, and the tasks preempted. What fits nowhere is the job's
// JobScheduling's (tell), and its event too.
func (s *Scheduler) recordOutcome(job string, attempt int, res *framework.Result) {
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

// gangComplete reports whether a gang job, with tasks pending and bound
// placed, has at least gang_min members, so that it is placed together
// and never in part.
func gangComplete(pending []*framework.Task, bound int) bool {
	min := pending[0].Task.GetSpec().GetGangMin()
	return min <= 0 || int32(len(pending)+bound) >= min
}

// pendingTasks returns the job's unbound tasks this instance serves, in
// index order, leaving out those it placed itself and the cache does not
// show bound yet; and the machines of the job's bound tasks, by key, for
// the decision's snapshot: the cache decodes a task at each read, so the
// job's tasks are read once per decision.
func (s *Scheduler) pendingTasks(job string) ([]*framework.Task, map[string]string) {
	var out []*framework.Task
	bound := map[string]string{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks.Indexer().ByIndex(clientlib.IndexJob, job) {
		key, err := clientlib.Tasks.Key(t)
		if err != nil {
			continue
		}
		if m := t.GetBinding().GetMachine(); m != "" {
			bound[key] = m
		}
		if !clientlib.Pending(t) || !s.serves(t) {
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
	return out, bound
}

// assume remembers placements committed until the cache shows them, and
// puts the counters they wrote into the cell view, so the next decision
// neither places the same tasks again nor conflicts with this commit.
func (s *Scheduler) assume(res *framework.Result) {
	if res == nil {
		return
	}
	cs := make([]CounterValue, len(res.Counters))
	for i, w := range res.Counters {
		cs[i] = CounterValue(w)
	}
	s.view.AssumeCounters(cs)
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
// the cell view, the job's tasks per machine (bound ones, whose machines
// by key are bound, and those this instance placed that the cache does
// not show bound yet), and, for preemption, the tasks bound to a
// machine, read from the cache on demand.
func (s *Scheduler) snapshot(job string, bound map[string]string) *framework.Snapshot {
	jobTasks := map[string]int{}
	for _, m := range bound {
		jobTasks[m]++
	}
	s.mu.Lock()
	for key, a := range s.assumed[job] {
		if _, ok := bound[key]; !ok {
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
	deadline := s.clock.After(refreshWait)
	for !s.refreshed(conflicts) {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-s.changed:
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
