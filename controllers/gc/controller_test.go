package gc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	"github.com/troupe-cluster/troupe/controllers/gc"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// startStore starts a one-node store and returns a client of it.
func startStore(t *testing.T) (context.Context, *clientlib.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, clienttest.Start(ctx, t).Client()
}

func TestCollectsFinishedRunsAfterRetention(t *testing.T) {
	ctx, c := startStore(t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	task := func(i int32, phase troupev1.TaskPhase, attempt int32) {
		if _, err := clientlib.Create(ctx, c, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("j", i), Namespace: "ns"},
			Spec:   &troupev1.TaskSpec{Job: "j", Index: i, Attempt: attempt, Template: &troupev1.TaskTemplate{Command: "x"}},
			Status: &troupev1.TaskStatus{Phase: phase}}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(i int32, finishedAgo time.Duration, attempt int32) {
		r := &troupev1.Run{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskRef("ns", "j", i)}, Machine: "m1",
			Phase: troupev1.RunPhase_RUN_PHASE_SUCCEEDED, Attempt: attempt}
		if finishedAgo > 0 {
			r.Finished = timestamppb.New(now.Add(-finishedAgo))
		} else {
			r.Phase = troupev1.RunPhase_RUN_PHASE_RUNNING
		}
		if _, err := clientlib.Create(ctx, c, clientlib.Runs, r); err != nil {
			t.Fatal(err)
		}
	}
	task(0, troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, 0) // finished long ago: collected
	run(0, 2*time.Hour, 0)
	task(1, troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, 0) // finished recently: kept
	run(1, time.Minute, 0)
	task(2, troupev1.TaskPhase_TASK_PHASE_RUNNING, 0) // still running: kept
	run(2, 0, 0)
	task(3, troupev1.TaskPhase_TASK_PHASE_PENDING, 1) // run of an earlier attempt: collected
	run(3, 2*time.Hour, 0)
	run(4, 2*time.Hour, 0) // task gone: collected

	col, err := gc.New(c, gc.Config{Now: func() time.Time { return now }, Retention: time.Hour, Interval: time.Hour, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go col.Run(ctx)
	// Run collects once its caches are filled, then hourly; the test
	// collects too after each look until two runs are left.
	var runs []*troupev1.Run
	wait.Until(ctx, t, "2 runs left", func() (bool, string) {
		var err error
		runs, _, err = clientlib.List(ctx, c, clientlib.Runs, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 2 {
			return true, ""
		}
		if _, err := col.Collect(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Log(err)
		}
		return false, fmt.Sprintf("%d runs left", len(runs))
	})
	if runs[0].GetMetadata().GetName() != "ns/j/1" || runs[1].GetMetadata().GetName() != "ns/j/2" {
		t.Fatalf("kept %v", runs)
	}
}

// Events last seen more than the retention ago go, of jobs and tasks as
// of machines; newer ones stay.
func TestCollectsOldEvents(t *testing.T) {
	ctx, c := startStore(t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	event := func(kind, ns, job, name string, lastSeen time.Duration) {
		e := &troupev1.Event{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("%020d-x", now.Add(-lastSeen).UnixNano()), Namespace: ns},
			InvolvedKind: kind, InvolvedName: name, Job: job, Type: clientlib.EventNormal, Reason: "Note", Count: 1,
			FirstSeen: timestamppb.New(now.Add(-2 * time.Hour)), LastSeen: timestamppb.New(now.Add(-lastSeen))}
		if _, err := clientlib.Create(ctx, c, clientlib.EventsOf(e), e); err != nil {
			t.Fatal(err)
		}
	}
	event("Job", "ns", "j", "j", 2*time.Hour)       // old: collected
	event("Task", "ns", "j", "j-0", 30*time.Minute) // seen recently (aggregated): kept
	event("Machine", "", "", "m1", 61*time.Minute)  // old: collected
	event("Machine", "", "", "m1", time.Minute)     // recent: kept
	col, err := gc.New(c, gc.Config{Now: func() time.Time { return now }, Retention: time.Hour, Interval: time.Hour, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := col.Collect(ctx); n != 2 || err != nil {
		t.Fatalf("Collect: %d deleted, %v; want 2", n, err)
	}
	jobs, _, err := clientlib.List(ctx, c, clientlib.Events, "")
	if err != nil || len(jobs) != 1 || jobs[0].GetInvolvedName() != "j-0" {
		t.Fatalf("job events left: %v %v", jobs, err)
	}
	machines, _, err := clientlib.List(ctx, c, clientlib.MachineEvents, "")
	if err != nil || len(machines) != 1 || !machines[0].GetLastSeen().AsTime().Equal(now.Add(-time.Minute)) {
		t.Fatalf("machine events left: %v %v", machines, err)
	}
}

// A deleted job's stop key is collected once its tasks are gone, not
// before; a stopped job's is kept, and so is the key of a job created
// again under the name.
func TestCollectsStopKeysOfDeletedJobs(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(time.Now, time.Minute)
	job := func(name string, stopped bool) *troupev1.Job {
		j, err := clientlib.Create(ctx, s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: &troupev1.JobSpec{Count: 1, Stopped: stopped, Template: &troupev1.TaskTemplate{Command: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	gone, stopped := job("gone", false), job("stopped", true)
	task, err := clientlib.Create(ctx, s, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("gone", 0), Namespace: "ns"},
		Spec: &troupev1.TaskSpec{Job: "gone", Template: &troupev1.TaskTemplate{Command: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := clientlib.Delete(ctx, s, clientlib.Jobs, gone); err != nil {
		t.Fatal(err)
	}
	col, err := gc.New(s, gc.Config{Now: time.Now, Retention: time.Hour, Interval: time.Hour, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	stopKey := func(name string) string {
		kv, err := s.Get(ctx, clientlib.JobStopKey("ns", name))
		if err != nil {
			t.Fatal(err)
		}
		if kv == nil {
			return "absent"
		}
		return string(kv.GetValue())
	}
	collect := func() {
		t.Helper()
		if _, err := col.Collect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	collect()
	if got := stopKey("gone"); got != "1" {
		t.Fatalf("stop key of the deleted job with a task left: %s, want 1", got)
	}
	if err := clientlib.Delete(ctx, s, clientlib.Tasks, task); err != nil {
		t.Fatal(err)
	}
	collect()
	if got, kept := stopKey("gone"), stopKey("stopped"); got != "absent" || kept != "1" || stopped.GetSpec().GetStopped() != true {
		t.Fatalf("stop keys: deleted job's %s (want absent), stopped job's %s (want 1)", got, kept)
	}
	job("gone", false)
	collect()
	if got := stopKey("gone"); got != "0" {
		t.Fatalf("stop key of the job created again: %s, want 0", got)
	}
}

// A deleted job's JobScheduling is collected once its tasks are gone,
// not before, and so is that of tasks without a job object once they
// are gone; a live job's is kept, and so is that of a job created again
// under the name.
func TestCollectsSchedulingsOfDeletedJobs(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(time.Now, time.Minute)
	job := func(name string) *troupev1.Job {
		j, err := clientlib.Create(ctx, s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: &troupev1.JobSpec{Count: 1, Template: &troupev1.TaskTemplate{Command: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	task := func(job string) *troupev1.Task {
		tk, err := clientlib.Create(ctx, s, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, 0), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: job, Template: &troupev1.TaskTemplate{Command: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	say := func(job string) {
		if _, err := clientlib.Create(ctx, s, clientlib.JobSchedulings, &troupev1.JobScheduling{
			Metadata: &troupev1.ObjectMeta{Name: job, Namespace: "ns"},
			Status:   &troupev1.SchedulingStatus{Scheduler: "batch-0", Reason: "Unschedulable", Unplaced: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	gone := job("gone")
	goneTask, looseTask := task("gone"), task("loose") // loose has no job object
	job("live")
	for _, j := range []string{"gone", "loose", "live"} {
		say(j)
	}
	if err := clientlib.Delete(ctx, s, clientlib.Jobs, gone); err != nil {
		t.Fatal(err)
	}
	col, err := gc.New(s, gc.Config{Now: time.Now, Retention: time.Hour, Interval: time.Hour, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		t.Helper()
		if _, err := col.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		list, _, err := clientlib.List(ctx, s, clientlib.JobSchedulings, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, js := range list {
			out = append(out, js.GetMetadata().GetName())
		}
		return out
	}
	if got := left(); !slices.Equal(got, []string{"gone", "live", "loose"}) {
		t.Fatalf("with the tasks left: JobSchedulings of %v, want all three", got)
	}
	for _, tk := range []*troupev1.Task{goneTask, looseTask} {
		if err := clientlib.Delete(ctx, s, clientlib.Tasks, tk); err != nil {
			t.Fatal(err)
		}
	}
	if got := left(); !slices.Equal(got, []string{"live"}) {
		t.Fatalf("with the tasks gone: JobSchedulings of %v, want the live job's", got)
	}
	job("gone")
	say("gone")
	if got := left(); !slices.Equal(got, []string{"gone", "live"}) {
		t.Fatalf("JobSchedulings of %v, want the job created again's kept", got)
	}
}
