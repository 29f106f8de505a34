package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/controllers/node"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Values under /machines/ and /leases/ that are not valid objects at their
// keys, written by a client bypassing clientlib, are skipped with one
// logged error and one event each, however many checks run: a machine
// whose lease is unreadable is left as it is (not taken for lost), and the
// controller still marks the machine whose lease expired lost.
func TestSkipsUnreadableObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cell, c, log, logs := clienttest.Observed(ctx, t)
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Minute) }

	for _, m := range []string{"m1", "m2"} {
		if _, err := clientlib.Create(ctx, c, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: m},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}}); err != nil {
			t.Fatal(err)
		}
	}
	expired := func(m string) *troupev1.Lease {
		return &troupev1.Lease{Metadata: &troupev1.ObjectMeta{Name: m}, Holder: "agent", Renewed: timestamppb.New(start),
			Duration: durationpb.New(10 * time.Second)}
	}
	for _, m := range []string{"m1", "invalid"} {
		if _, err := clientlib.Create(ctx, c, clientlib.Leases, expired(m)); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"/leases/m2", "/machines/garbage", "/machines/invalid", "/leases/alias"}
	clienttest.PutRaw(ctx, t, c, "/leases/m2", clienttest.Garbage)
	clienttest.PutRaw(ctx, t, c, "/machines/garbage", clienttest.Garbage)
	invalidVersion := clienttest.PutRaw(ctx, t, c, "/machines/invalid", clienttest.Encoded(t, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "invalid"}}))
	// A renewed lease of m1 under another key: it must not keep m1 alive.
	renewed := expired("m1")
	renewed.Renewed = timestamppb.New(now())
	clienttest.PutRaw(ctx, t, c, "/leases/alias", clienttest.Encoded(t, renewed))

	events, err := clientlib.NewEventRecorder(c, clientlib.DefaultEventRecorderConfig("node-controller"))
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(ctx)
	ctl, err := node.New(cell.ClientLogging(log), node.Config{Now: now, Interval: time.Hour, Logger: log, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	go ctl.Run(ctx)
	phase := func(m string) troupev1.MachinePhase {
		obj, err := clientlib.Get(ctx, c, clientlib.Machines, "/machines/"+m)
		if err != nil {
			t.Fatal(err)
		}
		return obj.GetStatus().GetPhase()
	}
	clienttest.Until(ctx, t, func() error {
		if p := phase("m1"); p != troupev1.MachinePhase_MACHINE_PHASE_LOST {
			ctl.Check(ctx)
			return fmt.Errorf("m1 is %v", p)
		}
		return nil
	})
	clienttest.WaitReported(ctx, t, c, logs, "node-controller", keys...)
	// The bad value again, then m1 renewed, which the lease cache applies
	// after it: m1 is ready again, and the bad values are still reported
	// once.
	clienttest.PutRaw(ctx, t, c, "/leases/m2", clienttest.Garbage)
	lease, err := clientlib.Get(ctx, c, clientlib.Leases, "/leases/m1")
	if err != nil {
		t.Fatal(err)
	}
	lease.Renewed = timestamppb.New(now())
	if _, err := clientlib.Update(ctx, c, clientlib.Leases, lease); err != nil {
		t.Fatal(err)
	}
	clienttest.Until(ctx, t, func() error {
		if p := phase("m1"); p != troupev1.MachinePhase_MACHINE_PHASE_READY {
			ctl.Check(ctx)
			return fmt.Errorf("m1 is %v", p)
		}
		return nil
	})
	clienttest.CheckReportedOnce(ctx, t, c, logs, "node-controller", keys...)
	if p := phase("m2"); p != troupev1.MachinePhase_MACHINE_PHASE_READY {
		t.Errorf("m2, whose lease is unreadable, is %v", p)
	}
	if kv, err := c.Get(ctx, "/machines/invalid"); err != nil || kv.GetVersion() != invalidVersion {
		t.Errorf("the invalid machine was written: %v %v", kv, err)
	}
}
