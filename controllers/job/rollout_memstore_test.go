package job_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// versions is a condition on job's tasks: by index, "v<version>:<phase>".
func (c *memCell) versions(job, want string) func() error {
	return func() error {
		got := ""
		for _, t := range c.tasks(job) {
			if got != "" {
				got += " "
			}
			got += fmt.Sprintf("v%d:%s", max(1, t.GetSpec().GetJobVersion()), t.GetStatus().GetPhase().String()[len("TASK_PHASE_"):])
		}
		if got != want {
			return fmt.Errorf("tasks %s, want %s", got, want)
		}
		return nil
	}
}

// A controller restarted in the middle of a rolling update finishes it:
// the update's progress is what the store holds (the job's versions and
// rollout, the tasks' versions), not what a controller remembers. The
// first controller replaces one replica; a second one, with caches of its
// own and an empty queue, replaces the others as the new ones run.
func TestUpdateFinishesAfterControllerRestart(t *testing.T) {
	ctx := t.Context()
	clock := cachetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	queue := cache.QueueConfig{BaseDelay: time.Second, MaxDelay: time.Minute, Clock: clock}
	c := newMemCell(ctx, t, clock.Now, queue)
	c.startCaches()
	if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, newJob("web", troupev1.JobType_JOB_TYPE_SERVICE, 3, 0)); err != nil {
		t.Fatal(err)
	}
	c.syncAll(0)
	c.bind("web", 0, 1, 2)
	// While a new task is not healthy, the controller looks again at its
	// progress deadline (5 min after it was submitted).
	const deadline = 5 * time.Minute
	run := func(delayed time.Duration, indexes ...int32) {
		for _, i := range indexes {
			c.report("web", i, troupev1.RunPhase_RUN_PHASE_RUNNING, 0)
		}
		c.syncAll(delayed)
	}
	run(0, 0, 1, 2)
	c.check("version 1 runs", c.versions("web", "v1:RUNNING v1:RUNNING v1:RUNNING"))

	j, err := clientlib.Get(ctx, c.s, clientlib.Jobs, "/jobs/ns/web")
	if err != nil {
		t.Fatal(err)
	}
	j.Spec.Template.Command = "/bin/v2"
	if _, err := clientlib.Update(ctx, c.s, clientlib.Jobs, j); err != nil {
		t.Fatal(err)
	}
	c.syncAll(deadline)
	c.check("one replaced", c.versions("web", "v1:RUNNING v1:RUNNING v2:PENDING"))

	// The restart: the first controller syncs no more; a new one starts
	// from the store.
	c.ctl, err = job.New(c.s, job.Config{Now: clock.Now, Logger: zap.NewNop(), Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ctl.StartCaches(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.s.WaitForWatches(ctx, 10); err != nil { // the first controller's caches still follow the store
		t.Fatal(err)
	}
	c.syncAll(deadline)
	c.check("nothing more before the new task runs", c.versions("web", "v1:RUNNING v1:RUNNING v2:PENDING"))
	c.bind("web", 2)
	run(deadline, 2)
	c.check("the next replaced", c.versions("web", "v1:RUNNING v2:PENDING v2:RUNNING"))
	c.bind("web", 1)
	run(deadline, 1)
	c.check("the last replaced", c.versions("web", "v2:PENDING v2:RUNNING v2:RUNNING"))
	c.bind("web", 0)
	run(deadline, 0) // the sync due at the last task's deadline stays queued, and finds nothing to do
	c.check("version 2 runs", c.versions("web", "v2:RUNNING v2:RUNNING v2:RUNNING"))
	j, err = clientlib.Get(ctx, c.s, clientlib.Jobs, "/jobs/ns/web")
	if r := j.GetStatus().GetRollout(); err != nil || r.GetState() != troupev1.RolloutState_ROLLOUT_STATE_COMPLETE || r.GetToVersion() != 2 ||
		j.GetStatus().GetStableVersion() != 2 {
		t.Fatalf("job status %v (%v): want the update to version 2 complete, and stable", j.GetStatus(), err)
	}
}
