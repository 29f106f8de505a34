// Package distinctmachines is the DistinctMachines filter: a job with
// constraints.distinct_machines runs at most one task per machine.
package distinctmachines

import (
	"fmt"
	"sync/atomic"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Name is the plugin's name in statuses.
const Name = "DistinctMachines"

// DistinctMachines refuses, for jobs with distinct_machines, machines
// already running one of the job's tasks (framework.Machine.JobTasks,
// placements assumed by the current plan included). It is not Static: the
// counts change as the job's tasks are placed.
type DistinctMachines struct {
	// last is the refusal of the last job refused: a decision's
	// searches, and preemption's trials, meet hundreds of the machines
	// of one job in a row, and each refusal was an allocation.
	last atomic.Pointer[refusal]
}

// refusal is the status refusing the tasks of job. It is never changed
// (its reason is made with it), so concurrent decisions share it.
type refusal struct {
	job    string
	status *framework.Status
}

var _ framework.FilterPlugin = (*DistinctMachines)(nil)

// New returns the plugin.
func New() *DistinctMachines { return &DistinctMachines{} }

// Name returns "DistinctMachines".
func (*DistinctMachines) Name() string { return Name }

// Filter refuses m when the task's job wants distinct machines and m
// already has one of its tasks.
func (p *DistinctMachines) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	if !t.Task.GetSpec().GetConstraints().GetDistinctMachines() {
		return nil
	}
	if m.JobTasks[t.Job] > 0 {
		if r := p.last.Load(); r != nil && r.job == t.Job {
			return r.status
		}
		// The reason names no machine-specific number, so that the
		// framework's summary counts these machines under one reason.
		r := &refusal{job: t.Job, status: framework.NewStatus(framework.Unschedulable, Name,
			fmt.Sprintf("machine already runs a task of job %s (distinct_machines)", t.Job))}
		p.last.Store(r)
		return r.status
	}
	return nil
}
