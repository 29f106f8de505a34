package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/cellstore/memstore/memstoretest"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/controllers/node"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// The node lifecycle controller over the in-memory store, no server, on
// a manual clock: each Check runs from caches that hold every commit
// before it (memstore Quiesce) and has committed when it returns, so
// every outcome is exact. Past its lease the machine is LOST and its
// tasks are released (unbound, counters given back, LOST); renewed, it
// is READY again.
func TestCheckOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := cachetest.NewClock(start)
	s := memstore.New(clock.Now, time.Minute)
	commits := memstoretest.WatchCommits(s)
	lease := machineWithTwoTasks(ctx, t, s, start)
	cfg := clientlib.DefaultEventRecorderConfig("node-controller")
	cfg.Now = clock.Now
	events, err := clientlib.NewEventRecorder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := node.New(s, node.Config{Now: clock.Now, Interval: time.Hour, Logger: zap.NewNop(), Events: events})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // its first check runs at once; the test runs the others
		defer close(done)
		ctl.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	if err := s.WaitForWatches(ctx, 3); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if err := s.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
		ctl.Check(ctx)
	}
	phase := func() troupev1.MachinePhase {
		m, err := clientlib.Get(ctx, s, clientlib.Machines, "/machines/m1")
		if err != nil {
			t.Fatal(err)
		}
		return m.GetStatus().GetPhase()
	}

	clock.Set(start.Add(10*time.Second - time.Nanosecond))
	check()
	if p := phase(); p != troupev1.MachinePhase_MACHINE_PHASE_READY {
		t.Fatalf("within its lease: %v", p)
	}
	clock.Set(start.Add(11 * time.Second))
	check()
	if p := phase(); p != troupev1.MachinePhase_MACHINE_PHASE_LOST {
		t.Fatalf("past its lease: %v", p)
	}
	ts, _, err := clientlib.List(ctx, s, clientlib.Tasks, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		if st := tk.GetStatus(); tk.GetBinding() != nil || st.GetPhase() != troupev1.TaskPhase_TASK_PHASE_LOST || st.GetReason() != "machine m1 lost" ||
			!st.GetFinished().AsTime().Equal(clock.Now()) {
			t.Fatalf("task of a lost machine: %v", tk)
		}
	}
	if kv, err := s.Get(ctx, clientlib.AllocKey("m1", "cpu")); err != nil || string(kv.GetValue()) != "0" {
		t.Fatalf("m1's counter: %v %v", kv, err)
	}
	if kvs, _, err := s.List(ctx, "/bindings/"); err != nil || len(kvs) != 0 {
		t.Fatalf("bindings of a lost machine: %v %v", kvs, err)
	}

	clock.Advance(time.Second)
	lease.Renewed = timestamppb.New(clock.Now())
	if _, err := clientlib.Update(ctx, s, clientlib.Leases, lease); err != nil {
		t.Fatal(err)
	}
	check()
	if p := phase(); p != troupev1.MachinePhase_MACHINE_PHASE_READY {
		t.Fatalf("renewed: %v", p)
	}
	// Both changes are recorded (in the background), with every task
	// released.
	go events.Run(ctx)
	want := "MachineLost: Lease of agent expired 1s ago; 2 task(s) released\nMachineReady: Lease renewed: the machine is READY again"
	commits.Until(ctx, t, "the machine's events", func() error {
		es, _, err := clientlib.List(ctx, s, clientlib.MachineEvents, "m1/")
		if err != nil {
			return err
		}
		var got []string
		for _, e := range es {
			got = append(got, e.GetReason()+": "+e.GetMessage())
		}
		if g := strings.Join(got, "\n"); g != want {
			return fmt.Errorf("events %q", g)
		}
		return nil
	})
}
