package gc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/controllers/gc"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Values under /runs/, /tasks/, /events/ and /machineevents/ that are not
// valid objects at their keys, written by a client bypassing clientlib,
// are skipped with one logged error each, however many passes run: an
// unreadable run is not collected, nor a run whose task is unreadable
// (it may still need it), and the collector still deletes the other old
// runs and events.
func TestSkipsUnreadableObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cell, c, log, logs := clienttest.Observed(ctx, t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

	if _, err := clientlib.Create(ctx, c, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: "j-0", Namespace: "ns"},
		Spec:   &troupev1.TaskSpec{Job: "j", Template: &troupev1.TaskTemplate{Command: "x"}},
		Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_SUCCEEDED}}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int32{0, 2} { // finished long ago
		if _, err := clientlib.Create(ctx, c, clientlib.Runs, &troupev1.Run{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskRef("ns", "j", i)},
			Machine: "m1", Phase: troupev1.RunPhase_RUN_PHASE_SUCCEEDED, Finished: timestamppb.New(now.Add(-2 * time.Hour))}); err != nil {
			t.Fatal(err)
		}
	}
	old := &troupev1.Event{Metadata: &troupev1.ObjectMeta{Name: "old", Namespace: "ns"}, InvolvedKind: "Job", InvolvedName: "j", Job: "j",
		Type: clientlib.EventNormal, Reason: "Note", Count: 1, LastSeen: timestamppb.New(now.Add(-2 * time.Hour))}
	if _, err := clientlib.Create(ctx, c, clientlib.Events, old); err != nil {
		t.Fatal(err)
	}
	invalid := &troupev1.Event{Metadata: &troupev1.ObjectMeta{Name: "bad"}, InvolvedKind: "Machine", InvolvedName: "m1",
		Type: clientlib.EventNormal, Reason: "Note", LastSeen: timestamppb.New(now.Add(-2 * time.Hour))} // count 0
	bad := map[string][]byte{
		"/runs/m1/ns/j/1":        clienttest.Garbage,
		"/tasks/ns/j/2":          clienttest.Garbage,
		"/events/ns/j/bad":       clienttest.Garbage,
		"/machineevents/m1/bad":  clienttest.Encoded(t, invalid),
		"/machineevents/m1/zzzz": clienttest.Garbage,
	}
	for key, value := range bad {
		clienttest.PutRaw(ctx, t, c, key, value)
	}

	col, err := gc.New(cell.ClientLogging(log), gc.Config{Now: func() time.Time { return now }, Retention: time.Hour, Interval: time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go col.Run(ctx) // its first pass runs once its caches are synced
	clienttest.Until(ctx, t, func() error {
		for _, key := range []string{"/runs/m1/ns/j/0", "/events/ns/j/old"} {
			if kv, err := c.Get(ctx, key); err != nil || kv != nil {
				return fmt.Errorf("%s not collected (%v)", key, err)
			}
		}
		return nil
	})
	keys := []string{"/runs/m1/ns/j/1", "/tasks/ns/j/2", "/events/ns/j/bad", "/machineevents/m1/bad", "/machineevents/m1/zzzz"}
	clienttest.WaitReported(ctx, t, c, logs, "", keys...)
	for range 2 {
		if _, err := col.Collect(ctx); err != nil {
			t.Fatalf("Collect: %v", err)
		}
	}
	clienttest.CheckReportedOnce(ctx, t, c, logs, "", keys...)
	for _, key := range []string{"/runs/m1/ns/j/1", "/runs/m1/ns/j/2"} {
		if kv, err := c.Get(ctx, key); err != nil || kv == nil {
			t.Errorf("%s was collected (%v)", key, err)
		}
	}
}
