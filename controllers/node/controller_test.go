package node_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	"github.com/troupe-cluster/troupe/controllers/node"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// A machine whose lease expires is lost and its tasks are released; a
// renewed lease brings it back.
func TestLeaseExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := clienttest.Start(ctx, t).Client()
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }

	lease := machineWithTwoTasks(ctx, t, c, start)

	events, err := clientlib.NewEventRecorder(c, clientlib.DefaultEventRecorderConfig("node-controller"))
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(ctx)
	watched := &watching{Store: c, prefixes: map[string]bool{}}
	ctl, err := node.New(watched, node.Config{Now: now, Interval: time.Hour, Logger: zap.NewNop(), Events: events})
	if err != nil {
		t.Fatal(err)
	}
	go ctl.Run(ctx) // its first check runs at once; later ones are driven below
	// The checks below read the controller's caches: they must hold the
	// cell first (a check seeing the machine but not yet its lease would
	// find it lost).
	wait.Until(ctx, t, "the controller's caches of machines, leases and tasks to sync", func() (bool, string) {
		w := watched.watched()
		return w[clientlib.Machines.Prefix] && w[clientlib.Leases.Prefix] && w[clientlib.Tasks.Prefix], fmt.Sprint("watched ", w)
	})

	phase := func() troupev1.MachinePhase {
		m, err := clientlib.Get(ctx, c, clientlib.Machines, "/machines/m1")
		if err != nil {
			t.Fatal(err)
		}
		return m.GetStatus().GetPhase()
	}
	// until waits for cond, running a check of the controller after
	// each look that finds it false (the controller's own ticker is an
	// hour).
	until := func(what string, cond func() bool) {
		t.Helper()
		wait.Until(ctx, t, what, func() bool {
			if cond() {
				return true
			}
			ctl.Check(ctx)
			return cond()
		})
	}
	// Within the lease: nothing happens.
	clock.Store(start.Add(5 * time.Second).UnixNano())
	ctl.Check(ctx)
	if phase() == troupev1.MachinePhase_MACHINE_PHASE_LOST {
		t.Fatal("machine lost within its lease")
	}
	// Past it: lost, tasks released.
	clock.Store(start.Add(11 * time.Second).UnixNano())
	until("machine lost and tasks released", func() bool {
		if phase() != troupev1.MachinePhase_MACHINE_PHASE_LOST {
			return false
		}
		ts, _, _ := clientlib.List(ctx, c, clientlib.Tasks, "")
		for _, tk := range ts {
			if tk.GetBinding() != nil || tk.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_LOST {
				return false
			}
		}
		return true
	})
	if kv, _ := c.Get(ctx, clientlib.AllocKey("m1", "cpu")); string(kv.GetValue()) != "0" {
		t.Fatalf("counter %s after release, want 0", kv.GetValue())
	}
	if kv, _ := c.Get(ctx, "/bindings/m1/ns/j/0"); kv != nil {
		t.Fatal("binding of a lost machine kept")
	}
	// The events say so; the count of tasks a check released depends on
	// how far its cache had come, so only the start of the message is
	// certain.
	event := func(reason, message string) func() bool {
		return func() bool {
			es, _, _ := clientlib.List(ctx, c, clientlib.MachineEvents, "m1/")
			for _, e := range es {
				if e.GetReason() == reason && strings.HasPrefix(e.GetMessage(), message) {
					return true
				}
			}
			return false
		}
	}
	until("MachineLost event", event("MachineLost", "Lease of agent expired 1s ago; "))
	// The agent comes back and renews: ready again.
	lease.Renewed = timestamppb.New(start.Add(20 * time.Second))
	if _, err := clientlib.Update(ctx, c, clientlib.Leases, lease); err != nil {
		t.Fatal(err)
	}
	clock.Store(start.Add(21 * time.Second).UnixNano())
	until("machine ready again", func() bool { return phase() == troupev1.MachinePhase_MACHINE_PHASE_READY })
	until("MachineReady event", event("MachineReady", "Lease renewed: the machine is READY again"))
}

// watching is a store that records the prefixes watched through it. An
// informer opens its watch once it has listed its prefix into its cache,
// so a controller whose every cache watches is in sync with the store.
type watching struct {
	clientlib.Store
	mu       sync.Mutex
	prefixes map[string]bool
}

func (w *watching) WatchStream(ctx context.Context, prefix string, cursor []byte) clientlib.Stream {
	w.mu.Lock()
	w.prefixes[prefix] = true
	w.mu.Unlock()
	return w.Store.WatchStream(ctx, prefix, cursor)
}

// watched returns the prefixes watched so far.
func (w *watching) watched() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.prefixes)
}

// machineWithTwoTasks creates machine m1 with a lease renewed at start
// (which it returns) and two tasks of job ns/j bound to it through the
// scheduler's commit path.
func machineWithTwoTasks(ctx context.Context, t *testing.T, s clientlib.Store, start time.Time) *troupev1.Lease {
	t.Helper()
	machine, err := clientlib.Create(ctx, s, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := clientlib.Create(ctx, s, clientlib.Leases, &troupev1.Lease{Metadata: &troupev1.ObjectMeta{Name: "m1"}, Holder: "agent",
		Renewed: timestamppb.New(start), Duration: durationpb.New(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// Two tasks bound to m1 through the scheduler's commit path.
	var tasks []*framework.Task
	for i := range int32(2) {
		tk, err := clientlib.Create(ctx, s, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("j", i), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: "j", Index: i, Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 1000}}}})
		if err != nil {
			t.Fatal(err)
		}
		key, _ := clientlib.Tasks.Key(tk)
		tasks = append(tasks, framework.NewTask(key, tk))
	}
	snap := &framework.Snapshot{Machines: []*framework.Machine{{Name: "m1", Object: machine, Capacity: machine.GetSpec().GetCapacity()}}}
	if res, err := framework.CommitPlan(ctx, s, framework.Schedule(framework.Profile{}, snap, tasks), framework.Modes{}, "test", start); err != nil || len(res.Committed) != 2 {
		t.Fatalf("bind: %v %v", res, err)
	}
	return lease
}
