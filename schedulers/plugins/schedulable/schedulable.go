// Package schedulable is the Schedulable filter: machines that are
// cordoned (spec.unschedulable) or lost get no new tasks.
package schedulable

import "github.com/troupe-cluster/troupe/schedulers/framework"

// Name is the plugin's name in statuses.
const Name = "Schedulable"

// Reason is the status reason for an unschedulable machine.
const Reason = "machine is unschedulable (cordoned or lost)"

// Schedulable refuses machines whose framework.Machine.Unschedulable is
// set. It is Static: the flag is a fixed attribute of the machine within a
// decision.
type Schedulable struct{}

var (
	_ framework.FilterPlugin = (*Schedulable)(nil)
	_ framework.Static       = (*Schedulable)(nil)
)

// New returns the plugin.
func New() *Schedulable { return &Schedulable{} }

// Name returns "Schedulable".
func (*Schedulable) Name() string { return Name }

// Static marks the verdict as independent of allocations.
func (*Schedulable) Static() {}

// Filter refuses unschedulable machines.
func (*Schedulable) Filter(_ *framework.Task, m *framework.Machine) *framework.Status {
	if m.Unschedulable {
		return framework.NewStatus(framework.Unschedulable, Name, Reason)
	}
	return nil
}
