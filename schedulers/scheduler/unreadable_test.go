package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// Values under /machines/ and /tasks/ that are not valid objects at their
// keys, written by a client bypassing clientlib, are skipped with one
// logged error and one event each, however often the caches resync: the
// scheduler still places the valid tasks, those of the same job too, on
// the valid machine.
func TestSkipsUnreadableObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	admin := cell.Client()
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)

	if _, err := clientlib.Create(ctx, admin, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m0"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	task := func(job string, i int32, command string) *troupev1.Task {
		return &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, i), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: job, Index: i, Scheduler: profiles.Batch,
				Template: &troupev1.TaskTemplate{Command: command, Requests: map[string]int64{"cpu": 100}}}}
	}
	bad := map[string][]byte{
		"/machines/garbage": clienttest.Garbage,
		// No capacity.
		"/machines/invalid": clienttest.Encoded(t, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "invalid"}}),
		// m0 under another key, cordoned: it must not replace m0.
		"/machines/alias": clienttest.Encoded(t, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m0"},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}, Unschedulable: true}}),
		"/tasks/ns/web/2": clienttest.Garbage,
		"/tasks/ns/web/3": clienttest.Encoded(t, task("web", 3, "")), // no command
	}
	versions := map[string]uint64{}
	for key, value := range bad {
		versions[key] = clienttest.PutRaw(ctx, t, admin, key, value)
	}
	for _, tk := range []*troupev1.Task{task("web", 0, "x"), task("web", 1, "x"), task("other", 0, "x")} {
		if _, err := clientlib.Create(ctx, admin, clientlib.Tasks, tk); err != nil {
			t.Fatal(err)
		}
	}

	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	events, err := clientlib.NewEventRecorder(admin, clientlib.DefaultEventRecorderConfig("batch-0"))
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(ctx)
	s, err := scheduler.New(cell.ClientLogging(log), scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		Policy: scheduler.Policy{MaxAttempts: 3, Backoff: 20 * time.Millisecond, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second}, Events: events, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)

	bound := func(keys ...string) func() error {
		return func() error {
			for _, key := range keys {
				tk, err := clientlib.Get(ctx, admin, clientlib.Tasks, key)
				if err != nil {
					return err
				}
				if tk.GetBinding().GetMachine() != "m0" {
					return fmt.Errorf("%s: binding %v", key, tk.GetBinding())
				}
			}
			return nil
		}
	}
	clienttest.Until(ctx, t, bound("/tasks/ns/web/0", "/tasks/ns/web/1", "/tasks/ns/other/0"))
	keys := []string{"/machines/garbage", "/machines/invalid", "/machines/alias", "/tasks/ns/web/2", "/tasks/ns/web/3"}
	clienttest.WaitReported(ctx, t, admin, logs, "batch-0", keys...)

	// The bad values again, and more work: still reported once.
	clienttest.PutRaw(ctx, t, admin, "/tasks/ns/web/2", clienttest.Garbage)
	clienttest.PutRaw(ctx, t, admin, "/machines/garbage", clienttest.Garbage)
	if _, err := clientlib.Create(ctx, admin, clientlib.Tasks, task("other", 1, "x")); err != nil {
		t.Fatal(err)
	}
	clienttest.Until(ctx, t, bound("/tasks/ns/other/1"))
	clienttest.CheckReportedOnce(ctx, t, admin, logs, "batch-0", keys...)
	if kv, err := admin.Get(ctx, "/tasks/ns/web/3"); err != nil || kv.GetVersion() != versions["/tasks/ns/web/3"] {
		t.Errorf("the invalid task was written: %v %v", kv, err)
	}
}
