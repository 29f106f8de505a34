package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Unit tests of freezes (freeze.go): refusal of new commits, what still
// applies while frozen, lapse, thaw, one freeze at a time.

func freezeP(id string, now, until int64) *storev1.Proposal {
	return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_FREEZE, NowUnixNanos: now, FreezeUntilUnixNanos: until}
}

func thawP(id string, now int64) *storev1.Proposal {
	return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_THAW, NowUnixNanos: now}
}

func putP(txn string, now int64, k, v string) *storev1.Proposal {
	return &storev1.Proposal{TxnId: txn, Groups: []*storev1.Group{{Ops: []*storev1.Op{putOp(k, v)}}}, GroupIndexes: []uint32{0},
		NowUnixNanos: now, DedupeWindowNanos: window, RequestHash: 1}
}

// state is every stored key but the clock and the expiry scan's
// bookkeeping, which every proposal may move.
func state(t *testing.T, st Storage) string {
	t.Helper()
	var sb strings.Builder
	err := st.Scan(nil, nil, func(k, v []byte) bool {
		switch string(k) {
		case metaClock, metaExpiryLow, metaExpiryNext:
		default:
			fmt.Fprintf(&sb, "%q=%x\n", k, v)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

func status(t *testing.T, st Storage) FreezeStatus {
	t.Helper()
	f, err := ReadFreezeStatus(st)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A frozen shard refuses APPLYs and new PREPAREs, changing nothing and
// remembering nothing, but answers remembered outcomes, applies RESOLVE
// and FENCE, and admits a PREPARE marked admit. After THAW the refused
// proposals apply as if new.
func TestFreezeRefusesNewCommits(t *testing.T) {
	st := NewMemStorage()
	mustApply(t, st, putP("before", 10, "/a", "1"))
	b := &storev1.Group{Ops: []*storev1.Op{addOp("/b", 5, 0, 100)}}
	mustApply(t, st, prepareP("x", 1000, b))
	mustApply(t, st, prepareP("y", 1000, &storev1.Group{Ops: []*storev1.Op{addOp("/b", 1, 0, 100)}}))

	res := mustApply(t, st, freezeP("backup", 20, 500))
	if !res.Outcome.GetFrozen() || res.Outcome.GetPrepared() != 2 || res.Outcome.GetRevision() != 1 {
		t.Fatalf("freeze: %v", res.Outcome)
	}
	if f := status(t, st); !f.FrozenBy("backup") || f.FrozenBy("other") || f.Prepared != 2 {
		t.Fatalf("status while frozen: %+v", f)
	}
	frozenState := state(t, st)
	for _, p := range []*storev1.Proposal{
		putP("during", 30, "/a", "2"),
		{Groups: []*storev1.Group{{Ops: []*storev1.Op{putOp("/c", "no txn id")}}}, GroupIndexes: []uint32{0}, NowUnixNanos: 31},
		prepareP("z", 1000, &storev1.Group{Ops: []*storev1.Op{putOp("/z", "1")}}),
	} {
		res := mustApply(t, st, p)
		if !res.Outcome.GetFrozen() || len(res.Outcome.GetGroups()) != 0 || res.Changes != nil || res.Outcome.GetRevision() != 1 {
			t.Fatalf("%s while frozen: %v", p.GetTxnId(), res.Outcome)
		}
	}
	if got := state(t, st); got != frozenState {
		t.Fatalf("refused proposals changed the state:\n%s\nwas:\n%s", got, frozenState)
	}
	// A retry of what applied before the freeze gets its outcome.
	if res := mustApply(t, st, putP("before", 40, "/a", "1")); !res.Outcome.GetDuplicate() || res.Outcome.GetFrozen() {
		t.Fatalf("retry while frozen: %v", res.Outcome)
	}
	// Prepared transactions finish: x resolves (at a new revision), y is
	// fenced elsewhere and aborts; an admitted PREPARE applies.
	if res := mustApply(t, st, resolveP("x", 0)); res.Changes == nil || res.Outcome.GetRevision() != 2 {
		t.Fatalf("resolve while frozen: %v", res.Outcome)
	}
	if res := mustApply(t, st, &storev1.Proposal{TxnId: "w", Phase: storev1.Phase_PHASE_FENCE, NowUnixNanos: 50, DedupeWindowNanos: window}); res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_FENCED {
		t.Fatalf("fence while frozen: %v", res.Outcome)
	}
	if res := mustApply(t, st, resolveP("y")); res.Changes != nil {
		t.Fatalf("aborting y wrote %v", res.Changes)
	}
	admitted := prepareP("v", 1000, &storev1.Group{Ops: []*storev1.Op{putOp("/v", "1")}})
	admitted.Admit = true
	if res := mustApply(t, st, admitted); res.Outcome.GetFrozen() || res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_PREPARED {
		t.Fatalf("admitted prepare: %v", res.Outcome)
	}
	mustApply(t, st, resolveP("v", 0))
	if n, _ := counter(t, st, "/b"); n != 5 {
		t.Fatalf("/b = %d after resolving x, want 5", n)
	}

	res = mustApply(t, st, thawP("backup", 60))
	if !res.Outcome.GetFrozen() || res.Outcome.GetPrepared() != 0 || res.Outcome.GetRevision() != 3 {
		t.Fatalf("thaw: %v", res.Outcome)
	}
	if f := status(t, st); f.Frozen() || f.Freeze.GetUntilUnixNanos() != 60 {
		t.Fatalf("status after thaw: %+v, want the freeze recorded lapsed at 60", f)
	}
	if res := mustApply(t, st, putP("during", 70, "/a", "2")); res.Outcome.GetFrozen() || res.Outcome.GetDuplicate() || !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("refused put after thaw: %v", res.Outcome)
	}
	if res := mustApply(t, st, prepareP("z", 1000, &storev1.Group{Ops: []*storev1.Op{putOp("/z", "1")}})); res.Outcome.GetFrozen() || res.Outcome.GetDuplicate() {
		t.Fatalf("refused prepare after thaw: %v", res.Outcome)
	}
}

// A freeze lapses once the shard's clock reaches its end: the first
// proposal from then on applies, and a THAW after that says the freeze
// did not hold to the end. A lagging proposer's clock does not bring it
// back (the shard's clock never goes back).
func TestFreezeLapses(t *testing.T) {
	st := NewMemStorage()
	mustApply(t, st, freezeP("backup", 100, 200))
	if res := mustApply(t, st, putP("a", 199, "/a", "1")); !res.Outcome.GetFrozen() {
		t.Fatalf("put before the lapse: %v", res.Outcome)
	}
	if res := mustApply(t, st, putP("a", 200, "/a", "1")); res.Outcome.GetFrozen() || !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("put at the lapse: %v", res.Outcome)
	}
	if res := mustApply(t, st, putP("b", 150, "/a", "2")); res.Outcome.GetFrozen() {
		t.Fatalf("a lagging proposer's put after the lapse: %v", res.Outcome)
	}
	if f := status(t, st); f.Frozen() || f.Freeze.GetId() != "backup" {
		t.Fatalf("status after the lapse: %+v", f)
	}
	if res := mustApply(t, st, thawP("backup", 210)); res.Outcome.GetFrozen() {
		t.Fatalf("thaw of a lapsed freeze says it held: %v", res.Outcome)
	}
	if f := status(t, st); f.Frozen() || f.Freeze.GetId() != "backup" || f.Freeze.GetUntilUnixNanos() != 200 {
		t.Fatalf("the thaw left %v, want the freeze recorded lapsed at 200", f.Freeze)
	}
	// A freeze that would lapse at once is not taken.
	if res := mustApply(t, st, freezeP("late", 220, 215)); res.Outcome.GetFrozen() || status(t, st).Freeze.GetId() != "backup" {
		t.Fatalf("freeze ending in the past: %v", res.Outcome)
	}
}

// One freeze at a time: another id is refused while one holds, and its
// THAW leaves the holder's freeze alone; the same id again holds (keeping
// its first end); once the first lapses another may freeze.
func TestOneFreezeAtATime(t *testing.T) {
	st := NewMemStorage()
	mustApply(t, st, freezeP("one", 100, 200))
	if res := mustApply(t, st, freezeP("two", 110, 400)); res.Outcome.GetFrozen() {
		t.Fatalf("a second freeze: %v", res.Outcome)
	}
	if res := mustApply(t, st, thawP("two", 120)); res.Outcome.GetFrozen() || !status(t, st).FrozenBy("one") {
		t.Fatalf("another's thaw: %v, status %+v", res.Outcome, status(t, st))
	}
	if res := mustApply(t, st, freezeP("one", 130, 900)); !res.Outcome.GetFrozen() || status(t, st).Freeze.GetUntilUnixNanos() != 200 {
		t.Fatalf("the same freeze again: %v, status %+v", res.Outcome, status(t, st))
	}
	if res := mustApply(t, st, freezeP("two", 200, 400)); !res.Outcome.GetFrozen() || !status(t, st).FrozenBy("two") {
		t.Fatalf("a freeze after the first lapsed: %v, status %+v", res.Outcome, status(t, st))
	}
	if !bytes.Equal(FreezeKey(), []byte(metaFreeze)) {
		t.Fatal("FreezeKey")
	}
}

// A copy of a FREEZE that reaches the log after its backup's THAW (a
// retried proposal) is void: the shard stays writable, and the next
// backup's freeze, under a new id, holds.
func TestFreezeAfterItsThawIsVoid(t *testing.T) {
	st := NewMemStorage()
	mustApply(t, st, freezeP("backup", 100, 500))
	if res := mustApply(t, st, thawP("backup", 150)); !res.Outcome.GetFrozen() {
		t.Fatalf("thaw: %v", res.Outcome)
	}
	if res := mustApply(t, st, freezeP("backup", 100, 500)); res.Outcome.GetFrozen() || status(t, st).Frozen() {
		t.Fatalf("the FREEZE again after its THAW: %v, status %+v", res.Outcome, status(t, st))
	}
	if res := mustApply(t, st, putP("a", 160, "/a", "1")); res.Outcome.GetFrozen() || !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("put after the late FREEZE: %v", res.Outcome)
	}
	if res := mustApply(t, st, freezeP("next", 170, 500)); !res.Outcome.GetFrozen() || !status(t, st).FrozenBy("next") {
		t.Fatalf("the next backup's freeze: %v, status %+v", res.Outcome, status(t, st))
	}
}
