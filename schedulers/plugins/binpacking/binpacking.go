// Package binpacking is the BinPacking score: prefer the fullest machines
// that still fit the task, leaving emptier machines free for large tasks
// (kube-scheduler's MostAllocated).
package binpacking

import (
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/plugins/internal/utilization"
)

// Name is the plugin's name.
const Name = "BinPacking"

// BinPacking scores a machine by the fraction of its capacity allocated
// after placing the task, averaged over cpu, memory and every resource the
// task requests (each clamped to [0, 1]): 0 for an empty machine,
// framework.MaxScore for a full one. A machine with no capacity in any of
// those resources scores 0.
type BinPacking struct{}

var _ framework.ScorePlugin = (*BinPacking)(nil)

// New returns the plugin.
func New() *BinPacking { return &BinPacking{} }

// Name returns "BinPacking".
func (*BinPacking) Name() string { return Name }

// Score returns how full m would be with t on it, 0..framework.MaxScore.
func (*BinPacking) Score(t *framework.Task, m *framework.Machine) int64 {
	s, _ := utilization.Fullness(t, m)
	return s
}
