package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// faultyBackend fails the proposals of the phases and shards in fail, as
// a driver that dies at that point would leave them undone.
type faultyBackend struct {
	*MemBackend
	fail sync.Map // phaseOn → bool
}

type phaseOn struct {
	phase storev1.Phase
	shard uint32
}

var errDriverDied = errors.New("the driver died")

func (b *faultyBackend) failOn(fail bool, phase storev1.Phase, shards ...uint32) {
	for _, sh := range shards {
		b.fail.Store(phaseOn{phase, sh}, fail)
	}
}

func (b *faultyBackend) Propose(ctx context.Context, shard uint32, p *storev1.Proposal) (*storev1.Outcome, error) {
	if v, ok := b.fail.Load(phaseOn{p.GetPhase(), shard}); ok && v.(bool) {
		return nil, errDriverDied
	}
	return b.MemBackend.Propose(ctx, shard, p)
}

// crossShardServer is a 4-shard server over unreplicated state machines,
// with a clock the test moves.
type crossShardServer struct {
	*Server
	backend *faultyBackend
	clock   atomic.Int64
}

func newCrossShardServer(t *testing.T) *crossShardServer {
	t.Helper()
	hub := watch.NewHub(watch.DefaultConfig(), 4)
	x := &crossShardServer{backend: &faultyBackend{MemBackend: newMemBackend(t, 4, hub)}}
	x.clock.Store(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := DefaultConfig()
	cfg.Now = func() time.Time { return time.Unix(0, x.clock.Load()) }
	s, err := New(cfg, x.backend, hub, 4)
	if err != nil {
		t.Fatal(err)
	}
	x.Server = s
	return x
}

// keyOn returns a key of the given family format ("/machines/m%d") on
// shard.
func (x *crossShardServer) keyOn(format string, shard uint32) string {
	return x.router.KeyOn(shard, format)
}

func (x *crossShardServer) commit(t *testing.T, req *storev1.CommitRequest) *storev1.CommitResponse {
	t.Helper()
	resp, err := x.Commit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (x *crossShardServer) value(t *testing.T, k string) (string, uint64) {
	t.Helper()
	resp, err := x.Get(context.Background(), &storev1.GetRequest{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	return string(resp.GetKv().GetValue()), resp.GetKv().GetVersion()
}

func addOp(k string, delta int64) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: delta, Min: 0, Max: math.MaxInt64}}}
}

func groupOf(conds []*storev1.Condition, ops ...*storev1.Op) *storev1.Group {
	return &storev1.Group{Conditions: conds, Ops: ops}
}

// A group spanning shards commits on all of them or none; an atomic
// request across shards fails whole; conditions on one shard guard
// writes on another; the reply names every shard's revision; a retry
// gets the outcome (without revisions), not a second commit.
func TestCrossShardGroups(t *testing.T) {
	x := newCrossShardServer(t)
	a, b := x.keyOn("/machines/a%d", 0), x.keyOn("/machines/b%d", 1)
	resp := x.commit(t, &storev1.CommitRequest{TxnId: "1", Groups: []*storev1.Group{groupOf(nil, put(a, "A"), addOp(b, 5))}})
	g := resp.GetGroups()[0]
	if !g.GetCommitted() || len(g.GetShardRevisions()) != 2 || g.GetShard() != 0 {
		t.Fatalf("cross-shard group: %v", g)
	}
	va, verA := x.value(t, a)
	vb, verB := x.value(t, b)
	if va != "A" || vb != "5" || verA != g.GetShardRevisions()[0] || verB != g.GetShardRevisions()[1] {
		t.Fatalf("after commit: %s=%q@%d %s=%q@%d, result %v", a, va, verA, b, vb, verB, g)
	}

	// The condition on b fails: nothing is written on either shard.
	resp = x.commit(t, &storev1.CommitRequest{TxnId: "2", Groups: []*storev1.Group{
		groupOf([]*storev1.Condition{{Key: b, Version: verB + 1}}, put(a, "stale"))}})
	if f := resp.GetGroups()[0].GetFailure(); f.GetReason() != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH || f.GetKey() != b {
		t.Fatalf("stale condition: %v", resp)
	}
	// Atomic across shards: the second group overflows, both abort; a
	// single-shard group of a non-atomic request commits beside a
	// failing cross-shard one.
	resp = x.commit(t, &storev1.CommitRequest{TxnId: "3", Atomic: true, Groups: []*storev1.Group{
		groupOf(nil, put(a, "atomic")), groupOf(nil, &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: b, Delta: 1, Max: 5}}})}})
	if resp.GetGroups()[0].GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_ABORTED ||
		resp.GetGroups()[1].GetFailure().GetReason() != storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED {
		t.Fatalf("atomic across shards: %v", resp)
	}
	c := x.keyOn("/machines/c%d", 2)
	resp = x.commit(t, &storev1.CommitRequest{TxnId: "4", Groups: []*storev1.Group{
		groupOf(nil, put(c, "C")), groupOf([]*storev1.Condition{{Key: c, Version: 99}}, put(a, "no"))}})
	if !resp.GetGroups()[0].GetCommitted() || resp.GetGroups()[1].GetCommitted() {
		t.Fatalf("mixed request: %v", resp)
	}
	if va, _ := x.value(t, a); va != "A" {
		t.Fatalf("%s = %q after failed groups, want A", a, va)
	}
	// Retrying a committed request gets its outcome, not a second add.
	resp = x.commit(t, &storev1.CommitRequest{TxnId: "1", Groups: []*storev1.Group{groupOf(nil, put(a, "A"), addOp(b, 5))}})
	if g := resp.GetGroups()[0]; !resp.GetDuplicate() || !g.GetCommitted() || g.GetRevision() != 0 || len(g.GetShardRevisions()) != 0 {
		t.Fatalf("retry: %v, want committed, duplicate, no revisions", resp)
	}
	if vb, ver := x.value(t, b); vb != "5" || ver != verB {
		t.Fatalf("%s = %s at %d after a retry, want 5 at %d", b, vb, ver, verB)
	}
}

// A driver that dies after preparing on some participants leaves intents
// that refuse other writers at once; once overdue, a participant's
// leader fences the others, which aborts the transaction. One that dies
// after every participant prepared has committed: recovery finishes it. Either way a retry gets the decided outcome.
func TestDeadDriverRecovery(t *testing.T) {
	x := newCrossShardServer(t)
	a, b := x.keyOn("/machines/a%d", 0), x.keyOn("/machines/b%d", 3)
	req := &storev1.CommitRequest{TxnId: "t", Groups: []*storev1.Group{groupOf(nil, put(a, "1"), put(b, "1"))}}

	x.backend.failOn(true, storev1.Phase_PHASE_PREPARE, 3)
	x.backend.failOn(true, storev1.Phase_PHASE_FENCE, 3)
	if _, err := x.Commit(context.Background(), req); !errors.Is(err, errDriverDied) {
		t.Fatalf("commit with a dying driver: %v", err)
	}
	x.backend.failOn(false, storev1.Phase_PHASE_PREPARE, 3)
	x.backend.failOn(false, storev1.Phase_PHASE_FENCE, 3)
	if va, _ := x.value(t, a); va != "" {
		t.Fatalf("a prepared write is visible: %q", va)
	}
	resp := x.commit(t, &storev1.CommitRequest{TxnId: "other", Groups: []*storev1.Group{groupOf(nil, put(a, "2"))}})
	if f := resp.GetGroups()[0].GetFailure(); f.GetReason() != storev1.FailureReason_FAILURE_REASON_INTENT || f.GetKey() != a {
		t.Fatalf("write on a held key: %v", resp)
	}
	// Before the deadline recovery leaves it alone; after, it aborts.
	for _, sh := range []uint32{0, 3} {
		if n, err := x.ResolveOverdue(context.Background(), sh); err != nil || n != 0 {
			t.Fatalf("recovery before the deadline: %d %v", n, err)
		}
	}
	x.clock.Add(int64(x.cfg.TxnTimeout) + 1)
	for _, r := range []struct {
		shard uint32
		want  int
	}{{3, 0}, {0, 1}} {
		if n, err := x.ResolveOverdue(context.Background(), r.shard); err != nil || n != r.want {
			t.Fatalf("recovery of shard %d: %d %v, want %d", r.shard, n, err, r.want)
		}
	}
	resp = x.commit(t, &storev1.CommitRequest{TxnId: "other2", Groups: []*storev1.Group{groupOf(nil, put(a, "2"))}})
	if !resp.GetGroups()[0].GetCommitted() {
		t.Fatalf("write after recovery: %v", resp)
	}
	resp = x.commit(t, req)
	if f := resp.GetGroups()[0].GetFailure(); f.GetReason() != storev1.FailureReason_FAILURE_REASON_ABORTED || !resp.GetDuplicate() {
		t.Fatalf("retry of the aborted request: %v", resp)
	}

	// Dying after every participant prepared: the transaction committed.
	c, d := x.keyOn("/machines/c%d", 1), x.keyOn("/machines/d%d", 2)
	req = &storev1.CommitRequest{TxnId: "u", Groups: []*storev1.Group{groupOf(nil, addOp(c, 3), addOp(d, 4))}}
	x.backend.failOn(true, storev1.Phase_PHASE_RESOLVE, 1, 2)
	if _, err := x.Commit(context.Background(), req); !errors.Is(err, errDriverDied) {
		t.Fatalf("commit dying before resolution: %v", err)
	}
	x.backend.failOn(false, storev1.Phase_PHASE_RESOLVE, 1, 2)
	if vc, _ := x.value(t, c); vc != "" {
		t.Fatalf("%s = %q before resolution, want nothing yet", c, vc)
	}
	x.clock.Add(int64(x.cfg.TxnTimeout) + 1)
	// Shard 1's leader settles it on both shards.
	for _, r := range []struct {
		shard uint32
		want  int
	}{{1, 1}, {2, 0}} {
		if n, err := x.ResolveOverdue(context.Background(), r.shard); err != nil || n != r.want {
			t.Fatalf("recovery of shard %d: %d %v, want %d", r.shard, n, err, r.want)
		}
	}
	if vc, _ := x.value(t, c); vc != "3" {
		t.Fatalf("%s = %q after recovery, want 3", c, vc)
	}
	if vd, _ := x.value(t, d); vd != "4" {
		t.Fatalf("%s = %q after recovery, want 4", d, vd)
	}
	if resp := x.commit(t, req); !resp.GetGroups()[0].GetCommitted() || !resp.GetDuplicate() {
		t.Fatalf("retry of the recovered request: %v", resp)
	}
	if vc, _ := x.value(t, c); vc != "3" {
		t.Fatalf("%s = %q after the retry, want 3", c, vc)
	}
}

// Concurrent transfers between accounts on different shards: every
// transfer applies on both sides or neither, and the total never changes.
func TestConcurrentCrossShardTransfers(t *testing.T) {
	x := newCrossShardServer(t)
	const accounts, start = 8, 100
	keys := make([]string, accounts)
	for i := range keys {
		keys[i] = x.keyOn("/bank/acct"+strconv.Itoa(i)+"-%d", uint32(i%4))
		x.commit(t, &storev1.CommitRequest{TxnId: "open" + strconv.Itoa(i), Groups: []*storev1.Group{groupOf(nil, addOp(keys[i], start))}})
	}
	var wg sync.WaitGroup
	var committed, refused atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 50 {
				from, to := rng.IntN(accounts), rng.IntN(accounts)
				if from == to {
					continue
				}
				amount := int64(1 + rng.IntN(60))
				resp, err := x.Commit(context.Background(), &storev1.CommitRequest{TxnId: fmt.Sprintf("w%d-%d", w, i),
					Groups: []*storev1.Group{groupOf(nil, addOp(keys[from], -amount), addOp(keys[to], amount))}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetGroups()[0].GetCommitted() {
					committed.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, k := range keys {
		v, _ := x.value(t, k)
		n, _ := strconv.Atoi(v)
		if n < 0 {
			t.Fatalf("%s went negative: %d", k, n)
		}
		total += n
	}
	if total != accounts*start || committed.Load() == 0 {
		t.Fatalf("total %d after %d transfers (%d refused), want %d", total, committed.Load(), refused.Load(), accounts*start)
	}
	for sh := range uint32(4) {
		res, err := x.backend.Read(context.Background(), sh, statemachine.OverdueQuery{Now: math.MaxInt64, Limit: 10}, true)
		if err != nil || len(res.(*statemachine.OverdueResult).IDs) != 0 {
			t.Fatalf("shard %d holds prepared transactions after all transfers: %v %v", sh, res, err)
		}
	}
	t.Logf("%d transfers committed, %d refused", committed.Load(), refused.Load())
}
