package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Values that are not valid objects at their keys, written by a client
// bypassing clientlib, are reported with one logged error and one event
// each: the agent skips such bindings, even when they come again, and
// still runs its valid ones; it writes over such a value at its own
// machine, lease or run, which only it writes.
func TestSkipsUnreadableObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cell, c, log, logs := clienttest.Observed(ctx, t)

	binding := func(machine string, i int32, command string) *troupev1.Binding {
		return &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskRef("ns", "j", i)}, Machine: machine,
			Task: &troupev1.TaskSpec{Job: "j", Index: i, Template: &troupev1.TaskTemplate{Command: command, SimDuration: durationpb.New(time.Hour)}}}
	}
	bad := map[string][]byte{
		"/machines/m":        clienttest.Garbage,
		"/leases/m":          clienttest.Garbage,
		"/runs/m/ns/j/0":     clienttest.Garbage,
		"/bindings/m/ns/j/1": clienttest.Garbage,
		"/bindings/m/ns/j/2": clienttest.Encoded(t, binding("m", 2, "")),      // no command
		"/bindings/m/ns/j/3": clienttest.Encoded(t, binding("other", 3, "x")), // another machine's
	}
	for key, value := range bad {
		clienttest.PutRaw(ctx, t, c, key, value)
	}
	if _, err := clientlib.Create(ctx, c, clientlib.Bindings, binding("m", 0, "x")); err != nil {
		t.Fatal(err)
	}

	events, err := clientlib.NewEventRecorder(c, clientlib.DefaultEventRecorderConfig("agent-m"))
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(ctx)
	a, err := agent.New(cell.ClientLogging(log), agent.Config{Machine: "m", Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30},
		Runtime: &runtime.Sim{}, LeaseDuration: 10 * time.Second, RenewInterval: time.Second, StopGrace: time.Second,
		Now: time.Now, Events: events, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := a.Run(ctx); ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
	}()
	running := func(keys ...string) func() error {
		return func() error {
			for _, key := range keys {
				r, err := clientlib.Get(ctx, c, clientlib.Runs, key)
				if err != nil {
					return err
				}
				if r.GetPhase() != troupev1.RunPhase_RUN_PHASE_RUNNING {
					return fmt.Errorf("%s: %v", key, r)
				}
			}
			return nil
		}
	}
	clienttest.Until(ctx, t, running("/runs/m/ns/j/0"))
	keys := []string{"/machines/m", "/leases/m", "/runs/m/ns/j/0", "/bindings/m/ns/j/1", "/bindings/m/ns/j/2", "/bindings/m/ns/j/3"}
	clienttest.WaitReported(ctx, t, c, logs, "agent-m", keys...)
	if _, err := clientlib.Get(ctx, c, clientlib.Machines, "/machines/m"); err != nil {
		t.Errorf("machine not written over: %v", err)
	}
	if _, err := clientlib.Get(ctx, c, clientlib.Leases, "/leases/m"); err != nil {
		t.Errorf("lease not written over: %v", err)
	}

	// The bad binding again, and another valid one: still reported once.
	clienttest.PutRaw(ctx, t, c, "/bindings/m/ns/j/1", clienttest.Garbage)
	if _, err := clientlib.Create(ctx, c, clientlib.Bindings, binding("m", 4, "x")); err != nil {
		t.Fatal(err)
	}
	clienttest.Until(ctx, t, running("/runs/m/ns/j/4"))
	clienttest.CheckReportedOnce(ctx, t, c, logs, "agent-m", keys...)
	for _, key := range []string{"/runs/m/ns/j/1", "/runs/m/ns/j/2", "/runs/m/ns/j/3", "/runs/other/ns/j/3"} {
		if kv, err := c.Get(ctx, key); err != nil || kv != nil {
			t.Errorf("%s: %v %v: a bad binding was run", key, kv, err)
		}
	}
}
