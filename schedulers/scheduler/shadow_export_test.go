package scheduler

import (
	"context"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// SetShadowBeforeCommit has f run between each decision of s and its
// evaluation, the moment the plan would have committed (before Run).
func SetShadowBeforeCommit(s *Shadow, f func(job string)) { s.beforeCommit = f }

// ShadowMachine returns machine name as the cache of s shows it.
func ShadowMachine(s *Shadow, name string) *framework.Machine { return s.view.Machine(name) }

// ShadowTracking returns how many jobs and tasks s keeps records of.
func ShadowTracking(s *Shadow) (jobs, tasks int) { return s.tracking() }

// Drain decides about the jobs the shadow has queued, one at a time
// until none is left (a test drives the shadow so, instead of Run).
func (s *Shadow) Drain(ctx context.Context) {
	for s.queue.Len() > 0 {
		job, _ := s.queue.Get()
		s.decideJob(ctx, job)
		s.queue.Done(job)
	}
}
