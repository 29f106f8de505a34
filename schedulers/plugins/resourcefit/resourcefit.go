// Package resourcefit is the ResourceFit filter: a task fits a machine
// when every resource it requests is at most what the machine has free
// (capacity minus what is allocated, including the placements the current
// plan has assumed).
package resourcefit

import (
	"fmt"
	"maps"
	"slices"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Name is the plugin's name in statuses.
const Name = "ResourceFit"

// ResourceFit refuses machines without enough free capacity for one of the
// task's requests, or without the requested resource at all
// (framework.Machine.Fits). Requests of zero or less ask for nothing. Its
// verdict depends on allocations, so it is not Static; it is a
// FitFilter, so a decision passes over the machines without room for a
// task's CPU and memory without asking it. Cordoned machines are refused
// by schedulable.Schedulable, not here.
type ResourceFit struct{}

var _ framework.FitFilter = (*ResourceFit)(nil)

// New returns the plugin.
func New() *ResourceFit { return &ResourceFit{} }

// Name returns "ResourceFit".
func (*ResourceFit) Name() string { return Name }

// FitFilter marks ResourceFit as refusing exactly the machines without
// room (framework.FitFilter).
func (*ResourceFit) FitFilter() {}

// Filter reports Unschedulable with one reason per resource that does not
// fit, in resource-name order, amounts written as the CLI writes them
// (clientlib.FormatQuantity: "insufficient cpu: requested 500m, free 200m").
func (*ResourceFit) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	// The common case, everything fits, allocates nothing.
	fits := true
	for r, req := range t.Requests {
		if !m.Fits(r, req) {
			fits = false
			break
		}
	}
	if fits {
		return nil
	}
	return framework.Explained(framework.Unschedulable, Name, func() []string {
		var reasons []string
		for _, r := range slices.Sorted(maps.Keys(t.Requests)) {
			req := t.Requests[r]
			if m.Fits(r, req) {
				continue
			}
			if _, ok := m.Capacity[r]; !ok {
				reasons = append(reasons, fmt.Sprintf("machine has no %s: requested %s", r, clientlib.FormatQuantity(r, req)))
				continue
			}
			reasons = append(reasons, fmt.Sprintf("insufficient %s: requested %s, free %s", r,
				clientlib.FormatQuantity(r, req), clientlib.FormatQuantity(r, m.Free(r))))
		}
		return reasons
	})
}
