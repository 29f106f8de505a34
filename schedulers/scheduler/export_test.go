package scheduler

import (
	"context"
	"time"
)

// Drain decides about the jobs queued now, and those whose delay has
// come by the instance's clock, one at a time until none is left,
// calling settle after each (a driver of virtual time waits there for
// the caches to apply what the decision committed).
func (s *Scheduler) Drain(ctx context.Context, settle func()) {
	for s.queue.AddDue(); s.queue.Len() > 0; s.queue.AddDue() {
		job, _ := s.queue.Get()
		s.scheduleJob(ctx, job)
		s.queue.Done(job)
		settle()
	}
}

// NextDelayed returns when the instance's next delayed job falls due.
func (s *Scheduler) NextDelayed() (time.Time, bool) { return s.queue.NextDelayed() }
