package agent

import (
	"time"

	"github.com/troupe-cluster/troupe/agents/runtime"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// restarter decides the in-place restarts of one attempt of a task, as
// kubelet does a container's: which exits are restarted (the task's
// restart policy), how many times (a batch task: max_retries - attempt; a
// service: without bound), and after which back-off (the task's
// retry_backoff, or the agent's default, doubling up to a cap, back to
// the first after a run that lasted long enough).
type restarter struct {
	policy troupev1.RestartPolicy
	// limit is the number of restarts allowed; negative: no bound.
	limit int32
	// first and max back-offs; a run lasting reset starts again from first.
	first, max, reset time.Duration
	next              time.Duration
	restarts          int32
}

func newRestarter(t *troupev1.TaskSpec, cfg Config) *restarter {
	r := &restarter{policy: t.GetRestartPolicy(), limit: -1, first: t.GetRetryBackoff().AsDuration(),
		max: cfg.MaxRestartBackoff, reset: cfg.RestartBackoffReset}
	if r.first <= 0 {
		r.first = cfg.RestartBackoff
	}
	r.first = min(r.first, r.max)
	r.next = r.first
	if t.GetType() != troupev1.JobType_JOB_TYPE_SERVICE {
		r.limit = max(t.GetMaxRetries()-t.GetAttempt(), 0)
	}
	return r
}

// restart is asked when a run that lasted ran ended with exit: it says
// whether to start the process again, and after how long. A process the
// agent stopped, or refused to start, is never restarted.
func (r *restarter) restart(exit runtime.Exit, ran time.Duration) (time.Duration, bool) {
	switch {
	case exit.Killed || exit.Refused:
		return 0, false
	case r.policy == troupev1.RestartPolicy_RESTART_POLICY_ALWAYS:
	case r.policy == troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE && exit.Code != 0:
	default:
		return 0, false
	}
	if r.limit >= 0 && r.restarts >= r.limit {
		return 0, false
	}
	if ran >= r.reset {
		r.next = r.first
	}
	d := r.next
	r.next = min(2*r.next, r.max)
	r.restarts++
	return d, true
}
