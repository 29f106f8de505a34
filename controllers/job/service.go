package job

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// defaultProgressDeadline is how long a new task of an update may take
// to become healthy when the job does not say.
const defaultProgressDeadline = 5 * time.Minute

// service plans a running service job: spec.count live tasks (pending,
// bound or running) of its current version. Its tasks' indexes are
// slots: a task that ended (or was stopped) leaves its slot free, and a
// new task takes a free slot, the lowest first after the slots of
// replicas that failed or were lost, which are replaced in place (their
// next attempt) once their back-off has passed. An update replaces the
// live tasks of older versions, bounded by the job's UpdateStrategy.
type service struct {
	job  *troupev1.Job
	spec *troupev1.JobSpec
	v    *versions
	now  time.Time
	ch   *Changes
	st   *troupev1.JobStatus

	// live tasks of the current version, and of older ones.
	fresh, old []*troupev1.Task
	// waiting: ended replicas whose back-off runs, to be replaced (as
	// many as the count has room for); ended: every task that ended but
	// was stopped.
	waiting, ended []*troupev1.Task
	// replicas: ended tasks to replace now; stopped: stopped tasks, whose
	// slots are free; both in index order.
	replicas, stopped []*troupev1.Task
	// taken: indexes with a task or unreadable; next: the lowest index
	// not yet looked at for a free one.
	taken func(int32) bool
	next  int32
	// missing: new tasks to create at free indexes.
	missing []*troupev1.Task
	// started counts the tasks of the current version this sync starts.
	started int
}

func planService(ch *Changes, s State, tasks map[int32]*troupev1.Task, v *versions, status *troupev1.JobStatus, now time.Time) []*troupev1.Task {
	p := &service{job: s.Job, spec: s.Job.GetSpec(), v: v, now: now, ch: ch, st: status,
		taken: func(i int32) bool { _, ok := tasks[i]; return ok || s.Unreadable != nil && s.Unreadable(i) }}
	for _, i := range slices.Sorted(maps.Keys(tasks)) {
		t := tasks[i]
		switch {
		case !finished(t):
			if p.current(t) {
				p.fresh = append(p.fresh, t)
			} else {
				p.old = append(p.old, t)
			}
			count(status, t.GetStatus().GetPhase())
		case t.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_STOPPED:
			p.stopped = append(p.stopped, t)
		case p.backoff(t) > 0:
			p.waiting = append(p.waiting, t)
		default:
			p.replicas = append(p.replicas, t)
		}
	}
	// The replicas waiting for their back-off come back (as the current
	// version), as many as the count has room for; they count as what
	// they ended as meanwhile.
	live := len(p.fresh) + len(p.old)
	p.ended = slices.Concat(p.waiting, p.replicas)
	p.waiting = p.waiting[:max(0, min(len(p.waiting), int(p.spec.GetCount())-live))]
	p.rollout()
	for _, t := range p.waiting {
		count(status, t.GetStatus().GetPhase())
		p.retryIn(p.backoff(t))
	}
	slices.SortStableFunc(ch.Update, func(a, b TaskUpdate) int {
		return cmp.Compare(a.From.GetSpec().GetIndex(), b.From.GetSpec().GetIndex())
	})
	return p.missing
}

// rollout moves the live tasks towards count tasks of the current
// version.
func (p *service) rollout() {
	n := int(p.spec.GetCount())
	r := p.v.rollout
	active := r != nil && r.GetToVersion() == p.v.cur.Version &&
		(r.GetState() == troupev1.RolloutState_ROLLOUT_STATE_ROLLING || r.GetState() == troupev1.RolloutState_ROLLOUT_STATE_PAUSED)
	if active {
		if why := p.failure(); why != "" {
			p.v.fail(p.job, why, p.now)
			// A revert makes every live task old; a halt leaves the
			// tasks as they are.
			p.fresh, p.old = p.split()
			r = p.v.rollout
			active = r.GetState() == troupev1.RolloutState_ROLLOUT_STATE_ROLLING
		}
	}
	healthy := 0
	for _, t := range p.fresh {
		if p.healthy(t) {
			healthy++
		}
	}
	if !active || len(p.old) == 0 && len(p.fresh) >= n {
		// Steady: scale to count, old tasks first out.
		p.scale(n)
		if active && len(p.old) == 0 && healthy == n {
			r.State, r.Message = troupev1.RolloutState_ROLLOUT_STATE_COMPLETE, ""
			p.v.events = append(p.v.events, jobEvent(p.job, clientlib.EventNormal, "UpdateComplete", "All %d task(s) run version %d", n, r.GetToVersion()))
		}
		p.markStable(healthy)
		p.progress(r, active)
		return
	}
	u := p.spec.GetUpdate()
	unavailable, surge := int(u.GetMaxUnavailable()), int(u.GetMaxSurge())
	if unavailable == 0 && surge == 0 {
		unavailable = 1
	}
	newCount := len(p.fresh) + len(p.waiting)
	total := len(p.fresh) + len(p.old) + len(p.waiting)
	if canaries := min(int(u.GetCanary()), n); canaries > 0 && !r.GetPromoted() {
		// Canaries run beside the old tasks; the update waits for troupe
		// job promote.
		p.create(canaries - newCount)
		r.State = troupev1.RolloutState_ROLLOUT_STATE_PAUSED
		r.Message = fmt.Sprintf("%d of %d canaries healthy; troupe job promote %s goes on", healthy, canaries, p.job.GetMetadata().GetName())
		p.progress(r, true)
		return
	}
	r.State, r.Message = troupev1.RolloutState_ROLLOUT_STATE_ROLLING, ""
	need := n - newCount
	grow := min(need, n+surge-total)
	p.create(grow)
	need -= max(0, grow)
	total += max(0, grow)
	// Old tasks go: those not running first (they take nothing away),
	// then the highest indexes, while enough stay available.
	down := p.available(healthy) - (n - unavailable)
	slices.SortStableFunc(p.old, func(a, b *troupev1.Task) int {
		return cmp.Or(cmp.Compare(running(a), running(b)), -cmp.Compare(a.GetSpec().GetIndex(), b.GetSpec().GetIndex()))
	})
	for _, t := range p.old {
		if running(t) == 1 {
			if down <= 0 {
				break
			}
			down--
		}
		if need > 0 && total <= n+surge {
			p.ch.Update = append(p.ch.Update, p.renew(t, Updated))
			need--
			continue
		}
		p.ch.Update = append(p.ch.Update, p.stop(t, Superseded, fmt.Sprintf("superseded by version %d", p.v.cur.Version)))
		total--
	}
	p.progress(r, true)
}

// available counts the live tasks that serve: old ones running (those
// of a failed version too: a revert takes them down no faster than an
// update would), new ones healthy.
func (p *service) available(healthy int) int {
	n := healthy
	for _, t := range p.old {
		n += running(t)
	}
	return n
}

// current reports whether t runs the job's current version: it is of
// it, or runs the same (a revert's tasks are those of the stable
// version, whose tasks stay).
func (p *service) current(t *troupev1.Task) bool {
	s := t.GetSpec()
	return taskVersion(t) == p.v.cur.Version ||
		sameContent(&troupev1.JobVersion{Template: s.GetTemplate(), Constraints: s.GetConstraints(), Tolerations: s.GetTolerations()}, p.v.cur)
}

// scale brings the live tasks (and waiting replicas) to n: it stops
// the extra ones, old versions first, then the highest indexes (the
// tasks above the count, when the slots are the first n); or starts new
// ones.
func (p *service) scale(n int) {
	live := append(slices.Clone(p.old), p.fresh...)
	extra := len(live) - n
	if extra <= 0 {
		p.create(n - len(live) - len(p.waiting))
		return
	}
	current := func(t *troupev1.Task) int {
		if p.current(t) {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(live, func(a, b *troupev1.Task) int {
		return cmp.Or(cmp.Compare(current(a), current(b)), -cmp.Compare(a.GetSpec().GetIndex(), b.GetSpec().GetIndex()))
	})
	for _, t := range live[:extra] {
		p.ch.Update = append(p.ch.Update, p.stop(t, ScaledDown, "job stopped or scaled down"))
	}
}

// create starts k new tasks of the current version: replicas that
// ended are replaced first, then the free slots are taken, lowest first
// (a stopped task's next attempt, or a new task).
func (p *service) create(k int) {
	for ; k > 0; k-- {
		p.st.Pending++
		p.started++
		if len(p.replicas) > 0 {
			p.ch.Update = append(p.ch.Update, p.renew(p.replicas[0], Replaced))
			p.replicas = p.replicas[1:]
			continue
		}
		for p.taken(p.next) && (len(p.stopped) == 0 || p.next < p.stopped[0].GetSpec().GetIndex()) {
			p.next++
		}
		if len(p.stopped) > 0 && p.stopped[0].GetSpec().GetIndex() <= p.next {
			p.ch.Update = append(p.ch.Update, p.renew(p.stopped[0], Replaced))
			p.stopped = p.stopped[1:]
			continue
		}
		p.missing = append(p.missing, newTask(p.job, p.v.cur, p.next, p.now))
		p.next++
	}
}

// renew turns t into its next attempt of the current version, pending
// (unbound from its machine, whose agent stops it).
func (p *service) renew(t *troupev1.Task, action Action) TaskUpdate {
	u := replace(p.job, p.v.cur, t, p.now)
	u.Action = action
	if action == Updated {
		u.To.Status.Reason = fmt.Sprintf("updated to version %d", p.v.cur.Version)
		u.Events = []Event{taskEvent(t, clientlib.EventNormal, "Updated", "Attempt %d of version %d replaces attempt %d of version %d",
			u.To.Spec.Attempt, p.v.cur.Version, t.GetSpec().GetAttempt(), taskVersion(t))}
		p.st.Running -= int32(running(t))
		p.st.Pending += 1 - pendingOf(t)
		p.started++
	}
	if t.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_STOPPED && action == Replaced {
		// A free slot taken again: nothing was replaced.
		u.Events, u.To.Status.Reason = nil, ""
	}
	return u
}

// stop stops live task t.
func (p *service) stop(t *troupev1.Task, action Action, reason string) TaskUpdate {
	p.st.Pending, p.st.Running = p.st.Pending-pendingOf(t), p.st.Running-int32(running(t))
	return TaskUpdate{Action: action, From: t, To: finish(t, &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_STOPPED, Reason: reason,
		Finished: timestamppb.New(p.now)})}
}

// failure says why the rollout to the current version fails, if it
// does: a task of the version failed or was lost since it began, or was
// restarted by its agent, or is still not healthy its progress deadline
// after it was submitted.
func (p *service) failure() string {
	started := p.v.rollout.GetStarted().AsTime()
	for _, t := range p.ended {
		st := t.GetStatus()
		if p.current(t) && st.GetPhase() != troupev1.TaskPhase_TASK_PHASE_STOPPED && st.GetPhase() != troupev1.TaskPhase_TASK_PHASE_SUCCEEDED &&
			!st.GetFinished().AsTime().Before(started) {
			why := fmt.Sprintf("task %s %s", t.GetMetadata().GetName(), lowerPhase(st.GetPhase()))
			if st.GetPhase() == troupev1.TaskPhase_TASK_PHASE_FAILED {
				why += fmt.Sprintf(" with exit code %d", st.GetExitCode())
			}
			return why
		}
	}
	for _, t := range p.fresh {
		// Restarted in place by its agent (restart policy ALWAYS or
		// ON_FAILURE): it crashed.
		if st := t.GetStatus(); st.GetRestarts() > 0 {
			return fmt.Sprintf("task %s restarted %d time(s), last with exit code %d", t.GetMetadata().GetName(), st.GetRestarts(), st.GetExitCode())
		}
	}
	deadline := p.spec.GetUpdate().GetProgressDeadline().AsDuration()
	if deadline <= 0 {
		deadline = defaultProgressDeadline
	}
	for _, t := range p.fresh {
		if p.healthy(t) {
			continue
		}
		left := deadline - p.now.Sub(t.GetSpec().GetSubmitted().AsTime())
		if left <= 0 {
			return fmt.Sprintf("task %s not healthy %v after it was submitted", t.GetMetadata().GetName(), deadline)
		}
		p.retryIn(left)
	}
	return ""
}

// healthy reports whether live task t serves: running for min_healthy,
// and passing its health check if it has one. If it will be healthy by
// time alone, the sync looks again then.
func (p *service) healthy(t *troupev1.Task) bool {
	st := t.GetStatus()
	if st.GetPhase() != troupev1.TaskPhase_TASK_PHASE_RUNNING || t.GetSpec().GetTemplate().GetHealthCheck() != nil && !st.GetHealthy() {
		return false
	}
	wait := p.spec.GetUpdate().GetMinHealthy().AsDuration()
	if st.GetStarted() != nil {
		wait -= p.now.Sub(st.GetStarted().AsTime())
	}
	if wait > 0 {
		p.retryIn(wait)
		return false
	}
	return true
}

// markStable records the current version as stable once count of its
// tasks are healthy and no update of it failed.
func (p *service) markStable(healthy int) {
	if healthy >= int(p.spec.GetCount()) && len(p.old) == 0 && !p.v.cur.GetFailed() {
		p.v.stable = p.v.cur.Version
	}
}

// progress fills the rollout's counts: the live tasks of the current
// version once this sync's writes are in, and those healthy.
func (p *service) progress(r *troupev1.Rollout, active bool) {
	if r == nil || !active {
		return
	}
	r.Updated = int32(len(p.fresh) + p.started)
	r.Healthy = 0
	for _, t := range p.fresh {
		if p.healthy(t) {
			r.Healthy++
		}
	}
}

func (p *service) split() (fresh, old []*troupev1.Task) {
	for _, t := range append(p.fresh, p.old...) {
		if p.current(t) {
			fresh = append(fresh, t)
		} else {
			old = append(old, t)
		}
	}
	return fresh, old
}

// backoff is how long ended replica t still waits before it is
// replaced (0: not at all).
func (p *service) backoff(t *troupev1.Task) time.Duration {
	if t.GetStatus().GetFinished() == nil {
		return 0
	}
	return max(0, p.spec.GetRetryBackoff().AsDuration()-p.now.Sub(t.GetStatus().GetFinished().AsTime()))
}

func (p *service) retryIn(d time.Duration) {
	if d > 0 && (p.ch.RetryIn == 0 || d < p.ch.RetryIn) {
		p.ch.RetryIn = d
	}
}

func running(t *troupev1.Task) int {
	if t.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_RUNNING {
		return 1
	}
	return 0
}

func pendingOf(t *troupev1.Task) int32 {
	if finished(t) || running(t) == 1 {
		return 0
	}
	return 1
}
