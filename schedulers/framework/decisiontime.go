package framework

import "time"

// DecisionTime is how long a scheduler takes to decide about a job, as
// the Omega paper models it: t_decision = t_job + t_task × tasks. The
// simulator charges it in virtual time; a cell's instances take what they
// take, and their measured figures (Snapshot.DecisionPerJob, PerTask)
// can be fed back into the model.
type DecisionTime struct {
	Job, Task time.Duration
}

// DefaultDecisionTime is the Omega paper's default: t_job 0.1 s and
// t_task 5 ms.
var DefaultDecisionTime = DecisionTime{Job: 100 * time.Millisecond, Task: 5 * time.Millisecond}

// For returns the decision time of a job decision over tasks tasks.
func (d DecisionTime) For(tasks int) time.Duration { return d.Job + time.Duration(tasks)*d.Task }
