package scheduler_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// rival is the switch that forces conflicts: while armed, before passing
// a commit on it writes every machine counter the commit conditions on
// (adding 1, then taking it back), as a rival scheduler would, so the
// commit's coarse-mode conditions fail.
type rival struct {
	clientlib.Store
	armed atomic.Int32 // commits left to spoil; negative: all
}

func (r *rival) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	if n := r.armed.Load(); n != 0 {
		if n > 0 {
			r.armed.Add(-1)
		}
		tx := clientlib.NewTxn(r.Store)
		take, giveBack := tx.Group(), tx.Group()
		for _, grp := range req.GetGroups() {
			for _, c := range grp.GetConditions() {
				if strings.HasPrefix(c.GetKey(), clientlib.AllocPrefix) {
					take.Add(c.GetKey(), 1, math.MinInt64, math.MaxInt64)
					giveBack.Add(c.GetKey(), -1, math.MinInt64, math.MaxInt64)
				}
			}
		}
		if _, err := tx.Commit(ctx); err != nil {
			return nil, fmt.Errorf("rival: %w", err)
		}
	}
	return r.Store.Commit(ctx, req)
}

// decisions hands the instance's decisions to the test one at a time:
// the instance waits after each until the test asks for the next, so the
// test can flip the rival between two commits.
type decisions struct {
	ctx     context.Context
	ch      chan scheduler.Decision
	ack     chan struct{}
	holding bool
}

func (d *decisions) observe(x scheduler.Decision) {
	select {
	case d.ch <- x:
	case <-d.ctx.Done():
		return
	}
	select {
	case <-d.ack:
	case <-d.ctx.Done():
	}
}

// next lets the instance go on and waits for its next decision.
func (d *decisions) next(t *testing.T) scheduler.Decision {
	t.Helper()
	if d.holding {
		d.ack <- struct{}{}
	}
	select {
	case x := <-d.ch:
		d.holding = true
		return x
	case <-d.ctx.Done():
		t.Fatal("no decision")
		return scheduler.Decision{}
	}
}

func taskKeys(ps []framework.Placement) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Task.Key)
	}
	return out
}

// With a rival spoiling its commits, a coarse-mode instance retries only
// the placements that failed, after refreshing, until its attempts run
// out; it then backs off, and places the job once the rival stops.
func TestConflictsRetryOnlyTheFailedUpToTheBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	admin := cell.Client()
	for i := range 4 {
		if _, err := clientlib.Create(ctx, admin, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%d", i)},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}}}); err != nil {
			t.Fatal(err)
		}
	}
	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	modes.Conflict = framework.Coarse
	cl := cell.Client()
	r := &rival{Store: cl}
	d := &decisions{ctx: ctx, ch: make(chan scheduler.Decision), ack: make(chan struct{})}
	const attempts = 3
	s, err := scheduler.New(cl, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes, Policy: scheduler.Policy{MaxAttempts: attempts, Backoff: time.Hour, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second}, Commits: r, Observe: d.observe, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	if err := s.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	submit := func(job string, n int) { // all of a job's tasks in one commit
		tx := clientlib.NewTxn(admin)
		for i := range n {
			clientlib.PutObject(tx.Group(), clientlib.Tasks, &troupev1.Task{
				Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, int32(i)), Namespace: "ns"},
				Spec: &troupev1.TaskSpec{Job: job, Index: int32(i), Scheduler: profiles.Batch,
					Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 400}}},
			})
		}
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			t.Fatalf("submit %s: %v", job, err)
		}
	}

	// One spoiled commit: the retry carries exactly what lost.
	r.armed.Store(1)
	submit("a", 1)
	first := d.next(t)
	if len(first.Result.Conflicted) != 1 || len(first.Result.Committed) != 0 || first.Attempt != 1 {
		t.Fatalf("first commit: %d committed, %d conflicted, attempt %d", len(first.Result.Committed), len(first.Result.Conflicted), first.Attempt)
	}
	second := d.next(t)
	if second.Attempt != 2 || len(second.Result.Committed) != 1 || taskKeys(second.Plan.Placements)[0] != first.Result.Conflicted[0].Placement.Task.Key {
		t.Fatalf("second commit: attempt %d, plan %v, %d committed", second.Attempt, taskKeys(second.Plan.Placements), len(second.Result.Committed))
	}

	// Every commit spoiled: MaxAttempts commits, then the job backs off
	// (rate-limited, not the hour of Backoff); disarmed, it is placed.
	// (A decision may come before the cache shows all three tasks: count
	// the conflicts each one had.)
	r.armed.Store(-1)
	submit("b", 3)
	conflicts := uint64(1)
	for i := 1; i <= attempts; i++ {
		x := d.next(t)
		if x.Attempt != i || len(x.Result.Committed) != 0 || len(x.Result.Conflicted) != len(x.Plan.Placements) {
			t.Fatalf("spoiled commit %d: attempt %d, %d committed of %d", i, x.Attempt, len(x.Result.Committed), len(x.Plan.Placements))
		}
		conflicts += uint64(len(x.Result.Conflicted))
	}
	r.armed.Store(0)
	if x := d.next(t); x.Attempt != 1 || len(x.Result.Committed) != 3 {
		t.Fatalf("after backing off: attempt %d, %d committed", x.Attempt, len(x.Result.Committed))
	}
	if st := s.Stats(); st.Placements != 4 || st.Conflicts != conflicts {
		t.Fatalf("stats %+v, want 4 placements and %d conflicts", st, conflicts)
	}
}
