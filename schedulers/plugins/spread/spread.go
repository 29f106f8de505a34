// Package spread is the LeastAllocated score: prefer the emptiest
// machines, spreading load (kube-scheduler's LeastAllocated), the inverse
// of binpacking.BinPacking.
package spread

import (
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/plugins/internal/utilization"
)

// Name is the plugin's name.
const Name = "LeastAllocated"

// LeastAllocated scores a machine by the fraction of its capacity left
// free after placing the task, averaged over cpu, memory and every
// resource the task requests: framework.MaxScore for an empty machine, 0
// for a full one. It is framework.MaxScore minus BinPacking's score, except
// that a machine with no capacity in any of those resources scores 0 too.
type LeastAllocated struct{}

var _ framework.ScorePlugin = (*LeastAllocated)(nil)

// New returns the plugin.
func New() *LeastAllocated { return &LeastAllocated{} }

// Name returns "LeastAllocated".
func (*LeastAllocated) Name() string { return Name }

// Score returns how empty m would be with t on it, 0..framework.MaxScore.
func (*LeastAllocated) Score(t *framework.Task, m *framework.Machine) int64 {
	s, ok := utilization.Fullness(t, m)
	if !ok {
		return 0
	}
	return framework.MaxScore - s
}
