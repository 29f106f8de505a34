package job

import (
	"context"
	"time"

	"github.com/troupe-cluster/troupe/clientlib/cache"
)

// StartCaches starts the controller's informers and waits until they
// have synced, for a test that syncs the queued jobs itself (Drain)
// rather than with Run's workers.
func (ctl *Controller) StartCaches(ctx context.Context) error {
	return cache.Start(ctx, ctl.caches()...)
}

// Drain syncs the queued jobs (and the delayed ones due by the queue's
// clock) one at a time, as a worker does, calling settle after each,
// until none is queued.
func (ctl *Controller) Drain(ctx context.Context, settle func()) {
	for ctl.queue.AddDue(); ctl.queue.Len() > 0; ctl.queue.AddDue() {
		job, _ := ctl.queue.Get()
		ctl.process(ctx, job)
		settle()
	}
}

// NextDelayed returns when the next delayed job falls due: a retry
// back-off, or a failed sync's rate limit.
func (ctl *Controller) NextDelayed() (time.Time, bool) { return ctl.queue.NextDelayed() }
