// Package distinctmachines is the DistinctMachines filter: a job with
// constraints.distinct_machines runs at most one task per machine.
package distinctmachines

import (
	"fmt"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Name is the plugin's name in statuses.
const Name = "DistinctMachines"

// DistinctMachines refuses, for jobs with distinct_machines, machines
// already running one of the job's tasks (framework.Machine.JobTasks,
// placements assumed by the current plan included). It is not Static: the
// counts change as the job's tasks are placed.
type DistinctMachines struct{}

var _ framework.FilterPlugin = (*DistinctMachines)(nil)

// New returns the plugin.
func New() *DistinctMachines { return &DistinctMachines{} }

// Name returns "DistinctMachines".
func (*DistinctMachines) Name() string { return Name }

// Filter refuses m when the task's job wants distinct machines and m
// already has one of its tasks.
func (*DistinctMachines) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	if !t.Task.GetSpec().GetConstraints().GetDistinctMachines() {
		return nil
	}
	if m.JobTasks[t.Job] > 0 {
		// The reason names no machine-specific number, so that the
		// framework's summary counts these machines under one reason;
		// it is worked out only if asked for (a job's tasks refused by
		// the machines it runs on would otherwise format one each).
		job := t.Job
		return framework.Explained(framework.Unschedulable, Name, func() []string {
			return []string{fmt.Sprintf("machine already runs a task of job %s (distinct_machines)", job)}
		})
	}
	return nil
}
