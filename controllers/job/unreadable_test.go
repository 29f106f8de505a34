package job_test

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Values under /jobs/, /tasks/ and /runs/ that are not valid objects at
// their keys, written by a client bypassing clientlib, are skipped with one
// logged error and one event each: an unreadable job gets no tasks, an
// unreadable task is neither recreated nor counted, and the controller
// still creates and counts the tasks of the other jobs, and the other
// tasks of the same job.
func TestSkipsUnreadableObjects(t *testing.T) {
	c := startStore(t)
	c.addMachinesAndSchedulers()
	invalid := newJob("invalid", troupev1.JobType_JOB_TYPE_BATCH, 2, 0)
	invalid.Spec.Template.Command = ""
	bad := map[string][]byte{
		"/jobs/ns/garbage":   clienttest.Garbage,
		"/jobs/ns/invalid":   clienttest.Encoded(t, invalid),
		"/jobs/ns/alias":     clienttest.Encoded(t, newJob("victim", troupev1.JobType_JOB_TYPE_BATCH, 2, 0)),
		"/tasks/ns/web/1":    clienttest.Garbage,
		"/runs/m0/ns/web/0":  clienttest.Garbage,
		"/runs/m1/ns/web/0":  clienttest.Garbage,
		"/tasks/ns/web/9":    clienttest.Encoded(t, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: "web-9", Namespace: "ns"}}),
		"/tasks/ns/absent/0": clienttest.Garbage, // of no job
	}
	for key, value := range bad {
		clienttest.PutRaw(c.ctx, t, c.c, key, value)
	}
	for _, j := range []*troupev1.Job{newJob("web", troupev1.JobType_JOB_TYPE_BATCH, 3, 0), newJob("other", troupev1.JobType_JOB_TYPE_BATCH, 2, 0)} {
		if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, j); err != nil {
			t.Fatal(err)
		}
	}
	core, logs := observer.New(zap.InfoLevel)
	c.runControllerLogging(2, zap.New(core))

	exist := func(keys ...string) func() error {
		return func() error {
			for _, key := range keys {
				if _, err := clientlib.Get(c.ctx, c.c, clientlib.Tasks, key); err != nil {
					return err
				}
			}
			return nil
		}
	}
	clienttest.Until(c.ctx, t, exist("/tasks/ns/web/0", "/tasks/ns/web/2", "/tasks/ns/other/0", "/tasks/ns/other/1"))
	// web's status counts the two tasks it can read.
	clienttest.Until(c.ctx, t, func() error {
		if st := c.job("web").GetStatus(); st.GetPending()+st.GetRunning() != 2 {
			return fmt.Errorf("web's status: %v", st)
		}
		return nil
	})
	keys := []string{"/jobs/ns/garbage", "/jobs/ns/invalid", "/jobs/ns/alias", "/tasks/ns/web/1", "/tasks/ns/web/9",
		"/tasks/ns/absent/0", "/runs/m0/ns/web/0", "/runs/m1/ns/web/0"}
	clienttest.WaitReported(c.ctx, t, c.c, logs, "job-controller", keys...)

	// The bad values again, and more work: still reported once.
	clienttest.PutRaw(c.ctx, t, c.c, "/jobs/ns/garbage", clienttest.Garbage)
	clienttest.PutRaw(c.ctx, t, c.c, "/tasks/ns/web/1", clienttest.Garbage)
	other := c.job("other")
	other.Spec.Count = 3
	if _, err := clientlib.Update(c.ctx, c.c, clientlib.Jobs, other); err != nil {
		t.Fatal(err)
	}
	clienttest.Until(c.ctx, t, exist("/tasks/ns/other/2"))
	clienttest.CheckReportedOnce(c.ctx, t, c.c, logs, "job-controller", keys...)
	for _, prefix := range []string{"/tasks/ns/garbage/", "/tasks/ns/invalid/", "/tasks/ns/alias/", "/tasks/ns/victim/"} {
		if kvs, _, err := c.c.List(c.ctx, prefix); err != nil || len(kvs) > 0 {
			t.Errorf("tasks of an unreadable job: %s: %v %v", prefix, kvs, err)
		}
	}
}
