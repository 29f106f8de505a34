package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Policy is the scheduling loop's one policy: before each decision about
// a job, whether to decide at all; after it, what happens to the job
// next. The cell's instances (Scheduler) and the simulator (tools/sim)
// both ask it and differ only in what they plug in around it: how time
// passes (a wall clock and a work queue; virtual time and an event
// queue) and how a retry sees fresh state (waiting for caches fed by
// watch; a view the store updates as it commits). As Nomad's
// scheduler.Process against its Planner, the policy itself reads no
// clock and no store: it is a function of the job's history and the
// outcome of the last decision.
type Policy struct {
	// MaxAttempts bounds the decisions of one round: a decision whose
	// placements lost to concurrent commits is retried at once, and after
	// MaxAttempts such decisions in a row the job backs off.
	MaxAttempts int
	// Backoff is how long a job some of whose tasks fit nowhere waits
	// before it is tried again, the first time; each wait in a row
	// without a placement doubles it, up to MaxBackoff (0: Backoff, no
	// growth). A change in the cell that makes room for one of its tasks
	// (Wakes) tries it earlier. A job that fits nowhere on an idle cell
	// is so decided about a few times a minute at most, not every
	// Backoff.
	Backoff, MaxBackoff time.Duration
	// RetryBase and RetryMax shape the back-off of a job whose round ran
	// out of attempts or whose commit failed: RetryBase doubled for each
	// back-off since the job last committed without conflicts, at most
	// RetryMax.
	RetryBase, RetryMax time.Duration
	// AbandonAfter gives up a job that is still not wholly placed after
	// that many decisions about it (0: never). Google's lightweight Omega
	// simulator gives up "numSchedulingAttempts > 1000": AbandonAfter
	// 1,001.
	AbandonAfter int
	// AbandonUnplacedAfter gives up a job none of whose tasks any of its
	// decisions placed, after that many decisions about it (0: never).
	// Google's lightweight Omega simulator gives up
	// "numSchedulingAttempts > 100 && unscheduledTasks == numTasks":
	// AbandonUnplacedAfter 101.
	AbandonUnplacedAfter int
	// UnfitBacksOff makes a job some of whose tasks fit nowhere (and none
	// conflicted) back off rather than wait: After answers BackOff after
	// the same delay (Backoff, growing to MaxBackoff) instead of Wait, so
	// the job is tried again only then, at the back of the queue, never
	// woken early by a change that makes room (Wakes). Google's
	// lightweight simulator requeues every unfinished job so, after 1 s.
	UnfitBacksOff bool
}

// DefaultPolicy returns five attempts per round, the given back-off for
// tasks that fit nowhere growing to a minute (or staying at backoff if it
// is longer), retries backing off from 5 ms to 30 s, and no abandoning.
func DefaultPolicy(backoff time.Duration) Policy {
	return Policy{MaxAttempts: 5, Backoff: backoff, MaxBackoff: max(backoff, time.Minute),
		RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second}
}

// GooglePolicy returns the retry policy of Google's lightweight Omega
// simulator (google/cluster-scheduler-simulator, OmegaScheduler.handleJob):
// a job not wholly placed by an attempt, whether its placements
// conflicted or some of its tasks fit nowhere, goes to the back of its
// scheduler's queue after 1 s ("simulator.afterDelay(1) { addJob(job)
// }"), and is given up "if ((job.numSchedulingAttempts > 100 &&
// job.unscheduledTasks == job.numTasks) || job.numSchedulingAttempts >
// 1000)", attempts that placed nothing counted. In Policy's terms: one
// decision per round (MaxAttempts 1: no retry at once), back-offs and
// waits of 1 s that do not grow (RetryBase, RetryMax, Backoff and
// MaxBackoff 1 s), waits as back-offs (UnfitBacksOff), AbandonAfter
// 1,001 and AbandonUnplacedAfter 101. A commit's error (none in a
// simulator) backs off 1 s too.
func GooglePolicy() Policy {
	return Policy{MaxAttempts: 1, Backoff: time.Second, MaxBackoff: time.Second, RetryBase: time.Second, RetryMax: time.Second,
		UnfitBacksOff: true, AbandonAfter: 1001, AbandonUnplacedAfter: 101}
}

// Policy presets, by the names PolicyPreset takes.
const (
	// DefaultPolicyName is the production loop's (DefaultPolicy).
	DefaultPolicyName = "default"
	// GooglePolicyName is Google's lightweight simulator's (GooglePolicy).
	GooglePolicyName = "google"
)

// PolicyPresets are the names PolicyPreset takes.
func PolicyPresets() []string { return []string{DefaultPolicyName, GooglePolicyName} }

// PolicyPreset returns the policy named name: "default"
// (DefaultPolicy(backoff)) or "google" (GooglePolicy, whatever backoff).
func PolicyPreset(name string, backoff time.Duration) (Policy, error) {
	switch name {
	case DefaultPolicyName:
		return DefaultPolicy(backoff), nil
	case GooglePolicyName:
		return GooglePolicy(), nil
	}
	return Policy{}, fmt.Errorf("scheduler: unknown policy %q (%s)", name, strings.Join(PolicyPresets(), ", "))
}

// Validate checks the policy.
func (p Policy) Validate() error {
	if p.MaxAttempts <= 0 || p.Backoff <= 0 || p.RetryBase <= 0 || p.RetryMax < p.RetryBase || p.AbandonAfter < 0 ||
		p.AbandonUnplacedAfter < 0 || p.MaxBackoff != 0 && p.MaxBackoff < p.Backoff {
		return errors.New("scheduler: policy needs positive MaxAttempts, Backoff and RetryBase, MaxBackoff 0 or >= Backoff, " +
			"RetryMax >= RetryBase, and AbandonAfter and AbandonUnplacedAfter >= 0")
	}
	return nil
}

// JobState is what the policy remembers of one job between decisions.
// Its zero value is a job never decided about.
type JobState struct {
	attempt   int  // decisions in the current round
	decisions int  // decisions about the job in all
	backoffs  int  // back-offs since the job last committed without conflicts
	waits     int  // waits in a row without a placement
	placed    bool // a decision placed some of the job's tasks
}

// Decisions is how many decisions were made about the job.
func (st *JobState) Decisions() int { return st.decisions }

// Attempt is the number of the decision Begin last allowed in its round
// (from 1), until After ends the round.
func (st *JobState) Attempt() int { return st.attempt }

// Step is what to do with a job.
type Step int

const (
	// Done: nothing of the job is left pending; forget it (a new pending
	// task queues it again).
	Done Step = iota
	// Hold: a gang short of members; decide when they are created.
	Hold
	// Decide: decide about the job's pending tasks now.
	Decide
	// Retry: placements lost to conflicts; decide again at once, on a
	// view that shows what the conflicts reported.
	Retry
	// Wait: some tasks fit nowhere; try again after Delay, or when a
	// change in the cell makes room for one of them (Wakes).
	Wait
	// BackOff: conflicts persisted through a round, or the commit failed
	// (or, with UnfitBacksOff, some tasks fit nowhere); try again after
	// Delay, at the back of the queue, whatever changes meanwhile.
	BackOff
	// Abandon: give the job up (Policy.AbandonAfter).
	Abandon
)

var stepNames = [...]string{"done", "hold", "decide", "retry", "wait", "back-off", "abandon"}

func (s Step) String() string { return stepNames[s] }

// Action is a Step and, for Wait and BackOff, how long to wait.
type Action struct {
	Step  Step
	Delay time.Duration
}

// Outcome is what became of one decision about a job: its placements
// committed, lost to conflicts, refused because the job was stopped or
// deleted meanwhile, and the tasks that fit nowhere (all of a gang's
// tasks when it does not fit whole), or the commit's error.
type Outcome struct {
	Placed, Conflicted, Stopped, Unfit int
	Err                                error
}

// Begin is asked before a decision about a job with pending tasks, of
// which the gang (if the job is one) is complete or not. It returns
// Decide, Done or Hold.
func (p Policy) Begin(st *JobState, pending int, gangComplete bool) Step {
	switch {
	case pending == 0:
		*st = JobState{}
		return Done
	case !gangComplete:
		return Hold
	}
	st.attempt++
	st.decisions++
	return Decide
}

// After is asked with the outcome of the decision Begin allowed.
func (p Policy) After(st *JobState, o Outcome) Action {
	if o.Err != nil {
		return p.backOff(st)
	}
	if o.Conflicted == 0 {
		st.backoffs = 0
	}
	if o.Placed > 0 {
		st.waits = 0
		st.placed = true
	}
	switch {
	case o.Stopped > 0 || o.Conflicted+o.Unfit == 0: // a stopped job has nothing left to place
		st.attempt = 0
		return Action{Step: Done}
	case p.AbandonAfter > 0 && st.decisions >= p.AbandonAfter,
		p.AbandonUnplacedAfter > 0 && !st.placed && st.decisions >= p.AbandonUnplacedAfter:
		return Action{Step: Abandon}
	case o.Conflicted > 0 && st.attempt < p.MaxAttempts:
		return Action{Step: Retry}
	case o.Conflicted > 0:
		return p.backOff(st)
	}
	st.attempt = 0
	if p.UnfitBacksOff {
		return Action{Step: BackOff, Delay: p.wait(st)}
	}
	return Action{Step: Wait, Delay: p.wait(st)}
}

// wait is the delay of the job's next wait: Backoff doubled for each
// wait in a row, at most MaxBackoff.
func (p Policy) wait(st *JobState) time.Duration {
	d, limit := p.Backoff, max(p.MaxBackoff, p.Backoff)
	for i := 0; i < st.waits && d < limit; i++ {
		d *= 2
	}
	st.waits++
	return min(d, limit)
}

// backOff ends the round with an exponential back-off.
func (p Policy) backOff(st *JobState) Action {
	st.attempt = 0
	d := p.RetryBase
	for i := 0; i < st.backoffs && d < p.RetryMax; i++ {
		d *= 2
	}
	st.backoffs++
	return Action{Step: BackOff, Delay: min(d, p.RetryMax)}
}

// Shapes returns the distinct CPU and memory requests of tasks: what a
// waiting job needs one of to make progress.
func Shapes(tasks []*framework.Task) []framework.Room {
	var out []framework.Room
	for _, t := range tasks {
		r := framework.Room{CPU: t.Requests[framework.CPU], Memory: t.Requests[framework.Memory]}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// Waiting is what a waiting job needs of a machine to make progress: one
// of the shapes of its unfit tasks (Shapes) fitting its free room, and,
// for a task like them (Task, the first unfit one), the profile's static
// filters (labels, taints, constraints) passing.
type Waiting struct {
	Shapes []framework.Room
	Task   *framework.Task
}

// Wakes reports whether a change to machine m (tasks ending on it, or
// the machine added, repaired or changed) should try waiting job w now
// rather than after its back-off: m takes new tasks, one of w's shapes
// fits its free room, and w's task passes the static filters of p on m.
// A change that could not make room for the job (a machine it may not
// use, room too small) leaves it waiting.
func Wakes(p framework.Profile, w Waiting, m *framework.Machine) bool {
	if m == nil || m.Unschedulable {
		return false
	}
	free := framework.RoomOf(m)
	fits := false
	for _, r := range w.Shapes {
		fits = fits || free.Fits(r.CPU, r.Memory)
	}
	if !fits || w.Task == nil {
		return fits
	}
	for _, f := range p.Filters {
		if _, static := f.(framework.Static); static && !f.Filter(w.Task, m).IsSuccess() {
			return false
		}
	}
	return true
}
