package sim

import (
	"time"

	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// Recorder builds the Stats of a run made outside the simulator (the
// same experiment against a real store, tools/sim/storerun) from what
// that run observed, in virtual time, so that both report the same
// measures worked out the same way. Schedulers are indexed as in the
// Config. It is not safe for concurrent use.
type Recorder struct{ st *Stats }

// NewRecorder returns a Recorder for the schedulers of a Config.
func NewRecorder(scheds []SchedulerConfig) *Recorder { return &Recorder{st: newStats(scheds)} }

// Submitted counts a job of tasks tasks submitted to scheduler i.
func (r *Recorder) Submitted(i, tasks int) { r.st.submitted(i, tasks) }

// Waited records the wait of a job of scheduler i until its first
// decision started.
func (r *Recorder) Waited(i int, d time.Duration) { r.st.waited(i, d) }

// Placed records the wait of a job of scheduler i until the commit that
// first left none of its tasks pending.
func (r *Recorder) Placed(i int, d time.Duration) { r.st.placedAll(i, d) }

// Decided records a decision of scheduler i from start to end and what
// its commit did: placements committed, conflicted and stopped (a
// transaction if any), and tasks that fit nowhere.
func (r *Recorder) Decided(i int, start, end time.Duration, o scheduler.Outcome) {
	r.st.decided(i, start, end, o)
}

// Abandoned counts a job of scheduler i given up by the policy.
func (r *Recorder) Abandoned(i int) { r.st.abandoned(i) }

// Preempted counts a task of scheduler i evicted by a higher-priority
// one.
func (r *Recorder) Preempted(i int) { r.st.preempted(i) }

// Finish returns the Stats of a run that ended at now, in which
// unscheduled[i] of scheduler i's jobs still had tasks pending (or were
// abandoned), with the cell's mean CPU allocation.
func (r *Recorder) Finish(now time.Duration, unscheduled []int, cpuUtilisation float64) *Stats {
	r.st.finish(now, nil)
	for i, n := range unscheduled {
		r.st.Schedulers[i].UnscheduledJobs = n
	}
	r.st.CPUUtilisation = cpuUtilisation
	return r.st
}
