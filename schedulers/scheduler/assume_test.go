package scheduler

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
)

// lateAssume passes an instance's commits on to the store; while armed,
// a rival first takes rivalCPU of the machine's CPU (as another
// scheduler committing between the decision's snapshot and its commit
// would), and the commit returns only once the instance's view shows the
// commit's version of the counter: the watch delivers the store's value
// before the instance assumes its own.
type lateAssume struct {
	clientlib.Store
	view     *MachineView
	machine  string
	rivalCPU int64
	armed    atomic.Bool
}

func (l *lateAssume) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	if !l.armed.Load() {
		return l.Store.Commit(ctx, req)
	}
	tx := clientlib.NewTxn(l.Store)
	tx.Group().Add(clientlib.AllocKey(l.machine, "cpu"), l.rivalCPU, math.MinInt64, math.MaxInt64)
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("rival: %w", err)
	}
	resp, err := l.Store.Commit(ctx, req)
	if err != nil {
		return resp, err
	}
	var rev uint64
	for _, g := range resp.GetGroups() {
		rev = max(rev, g.GetRevision())
	}
	if err := wait.Poll(ctx, "the view to show the commit", func() bool {
		m := l.view.Machine(l.machine)
		return m != nil && m.AllocVersions["cpu"] >= rev
	}); err != nil {
		return nil, err
	}
	return resp, nil
}

// An instance's assumption of what its fine-grained commit wrote to a
// counter (the snapshot's value plus its requests: a lower bound) never
// replaces the store's value at the same version that the watch brought
// first: the view shows what the machine really holds, and the next
// decision does not plan on room a rival took (which conflicted with the
// counter's bound on every decision until the counter next changed).
func TestAssumedCounterDoesNotHideRivals(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	admin := cell.Client()
	if _, err := clientlib.Create(ctx, admin, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m0"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	modes.Conflict = framework.Fine
	cl := cell.Client()
	commits := &lateAssume{Store: cl, machine: "m0", rivalCPU: 500}
	decided := make(chan Decision)
	s, err := New(cl, Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes, Policy: Policy{MaxAttempts: 1, Backoff: time.Hour, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second},
		Commits: commits, Logger: zap.NewNop(), Observe: func(d Decision) {
			select {
			case decided <- d:
			case <-ctx.Done():
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	commits.view = s.view
	go s.Run(ctx)
	if err := s.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	submit := func(job string) {
		if _, err := clientlib.Create(ctx, admin, clientlib.Tasks, &troupev1.Task{
			Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, 0), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: job, Scheduler: profiles.Batch,
				Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 300}}},
		}); err != nil {
			t.Fatalf("submit %s: %v", job, err)
		}
	}
	next := func() Decision {
		t.Helper()
		select {
		case d := <-decided:
			return d
		case <-ctx.Done():
			t.Fatal("no decision")
			return Decision{}
		}
	}

	// The rival takes 500 while job a's decision is under way: a's 300
	// still fit, and the machine holds 800.
	commits.armed.Store(true)
	submit("a")
	if d := next(); len(d.Result.Committed) != 1 {
		t.Fatalf("job a: %d committed, %d conflicted, %d fit nowhere", len(d.Result.Committed), len(d.Result.Conflicted), len(d.Plan.Failures))
	}
	commits.armed.Store(false)
	if got := s.view.Machine("m0").Allocated["cpu"]; got != 800 {
		t.Errorf("view of m0 after job a: %d of CPU allocated, the store holds 800", got)
	}

	// Job b's 300 do not fit in the 200 left: no machine, no conflict.
	submit("b")
	if d := next(); len(d.Result.Conflicted) != 0 || len(d.Plan.Failures) != 1 {
		t.Fatalf("job b: %d committed, %d conflicted, %d fit nowhere; want it to fit nowhere",
			len(d.Result.Committed), len(d.Result.Conflicted), len(d.Plan.Failures))
	}
}
