package engine

import (
	"math"
	"slices"
	"strconv"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Unit tests of the engine's side of cross-shard commits: intents,
// reservations, fences, settling, idempotent resolution, recovery.

const window = int64(1e12)

func addOp(k string, delta, lo, hi int64) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: delta, Min: lo, Max: hi}}}
}

func prepareP(txn string, deadline int64, groups ...*storev1.Group) *storev1.Proposal {
	p := &storev1.Proposal{TxnId: txn, Phase: storev1.Phase_PHASE_PREPARE, Groups: groups, NowUnixNanos: 1,
		DedupeWindowNanos: window, RequestHash: 7, Participants: []uint32{0, 1}, DeadlineUnixNanos: deadline}
	for i := range groups {
		p.GroupIndexes = append(p.GroupIndexes, uint32(i))
	}
	return p
}

// resolveP resolves txn with the groups in commit committed.
func resolveP(txn string, commit ...uint32) *storev1.Proposal {
	return &storev1.Proposal{TxnId: txn, Phase: storev1.Phase_PHASE_RESOLVE, NowUnixNanos: 2, DedupeWindowNanos: window, RequestHash: 7,
		Decision: &storev1.Decision{CommittedGroups: commit}, Outcome: &storev1.Outcome{}}
}

func applyP(groups ...*storev1.Group) *storev1.Proposal {
	p := &storev1.Proposal{Groups: groups, NowUnixNanos: 1}
	for i := range groups {
		p.GroupIndexes = append(p.GroupIndexes, uint32(i))
	}
	return p
}

func counter(t *testing.T, st Storage, k string) (int64, uint64) {
	t.Helper()
	rec, err := st.Get(DataKey(k))
	if err != nil || rec == nil {
		return 0, 0
	}
	v, val, err := DecodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(string(val), 10, 64)
	return n, v
}

func reason(res *Result, i int) storev1.FailureReason {
	return res.Outcome.GetGroups()[i].GetFailure().GetReason()
}

// Two prepares adding to one counter both succeed while both fit; a third
// that could overflow the bound with them is refused; committing one and
// aborting the other applies exactly the first, at a new revision.
func TestReservationsOfConcurrentPrepares(t *testing.T) {
	st := NewMemStorage()
	mustApply(t, st, applyP(&storev1.Group{Ops: []*storev1.Op{addOp("/alloc/m/cpu", 500, 0, 1000)}}))
	for _, txn := range []string{"a", "b"} {
		res := mustApply(t, st, prepareP(txn, 100, &storev1.Group{Ops: []*storev1.Op{addOp("/alloc/m/cpu", 200, 0, 1000)}}))
		if !res.Outcome.GetGroups()[0].GetCommitted() {
			t.Fatalf("prepare %s: %v", txn, res.Outcome)
		}
		if res.Changes != nil {
			t.Fatalf("prepare %s changed data: %v", txn, res.Changes)
		}
	}
	if res := mustApply(t, st, prepareP("c", 100, &storev1.Group{Ops: []*storev1.Op{addOp("/alloc/m/cpu", 200, 0, 1000)}})); reason(res, 0) != storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED {
		t.Fatalf("third prepare: %v", res.Outcome)
	}
	// An APPLY may add too, as long as every reservation still fits.
	if res := mustApply(t, st, applyP(&storev1.Group{Ops: []*storev1.Op{addOp("/alloc/m/cpu", 150, 0, 1000)}})); reason(res, 0) != storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED {
		t.Fatalf("apply over the reservations: %v", res.Outcome)
	}
	if res := mustApply(t, st, applyP(&storev1.Group{Ops: []*storev1.Op{addOp("/alloc/m/cpu", 50, 0, 1000)}})); !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("apply within the reservations: %v", res.Outcome)
	}
	_, before := counter(t, st, "/alloc/m/cpu")
	res := mustApply(t, st, resolveP("a", 0))
	if v, ver := counter(t, st, "/alloc/m/cpu"); v != 750 || ver <= before || res.Outcome.GetRevision() != ver {
		t.Fatalf("after committing a: %d at %d (revision %d), want 750 after %d", v, ver, res.Outcome.GetRevision(), before)
	}
	mustApply(t, st, resolveP("b"))
	mustApply(t, st, resolveP("c")) // its prepare failed: aborted too
	if v, _ := counter(t, st, "/alloc/m/cpu"); v != 750 {
		t.Fatalf("after aborting b: %d, want 750", v)
	}
	if n := countPrefix(t, st, prefixIntent) + countPrefix(t, st, prefixPrepared) + countPrefix(t, st, prefixDeadline); n != 0 {
		t.Fatalf("%d intent, prepared or deadline keys left", n)
	}
}

func TestReservationsFit(t *testing.T) {
	add := func(d, lo, hi int64) *storev1.Add { return &storev1.Add{Delta: d, Min: lo, Max: hi} }
	for _, tc := range []struct {
		cur  int64
		adds []*storev1.Add
		want bool
	}{
		{0, []*storev1.Add{add(5, 0, 10), add(5, 0, 10)}, true},
		{0, []*storev1.Add{add(5, 0, 10), add(6, 0, 10)}, false},
		{10, []*storev1.Add{add(-5, 0, 100), add(-5, 0, 100)}, true},
		{10, []*storev1.Add{add(-5, 0, 100), add(-6, 0, 100)}, false},
		// A release and a take: the take must fit even if the release
		// does not commit, the release must stay above 0 if the take does.
		{8, []*storev1.Add{add(-8, 0, 10), add(2, 0, 10)}, true},
		{8, []*storev1.Add{add(-8, 0, 10), add(3, 0, 10)}, false},
		{0, []*storev1.Add{add(math.MaxInt64, math.MinInt64, math.MaxInt64)}, true},
	} {
		if got := reservationsFit(tc.cur, tc.adds); got != tc.want {
			t.Errorf("reservationsFit(%d, %v) = %v, want %v", tc.cur, tc.adds, got, tc.want)
		}
	}
}

// Intents are invisible to reads, and an access that meets an
// incompatible one fails at once naming the key; reads pass reads.
func TestIntentsBlockWithoutWaiting(t *testing.T) {
	st := NewMemStorage()
	mustApply(t, st, applyP(&storev1.Group{Ops: []*storev1.Op{putOp("/k", "old"), putOp("/r", "x")}}))
	_, rver := counter(t, st, "/r")
	res := mustApply(t, st, prepareP("w", 100, &storev1.Group{
		Conditions: []*storev1.Condition{{Key: "/r", Version: rver}}, Ops: []*storev1.Op{putOp("/k", "new")}}))
	if !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("prepare: %v", res.Outcome)
	}
	if rec, _ := st.Get(DataKey("/k")); rec == nil || string(rec[1:]) != "old" {
		t.Fatalf("a prepared write is visible: %q", rec)
	}
	for name, g := range map[string]*storev1.Group{
		"put on a written key":       {Ops: []*storev1.Op{putOp("/k", "other")}},
		"condition on a written key": {Conditions: []*storev1.Condition{{Key: "/k", Version: 1}}},
		"put on a read key":          {Ops: []*storev1.Op{putOp("/r", "y")}},
		"add on a written key":       {Ops: []*storev1.Op{addOp("/k", 1, 0, 10)}},
	} {
		res := mustApply(t, st, applyP(g))
		if f := res.Outcome.GetGroups()[0].GetFailure(); f.GetReason() != storev1.FailureReason_FAILURE_REASON_INTENT || f.GetKey() == "" {
			t.Errorf("%s: %v", name, res.Outcome)
		}
	}
	if res := mustApply(t, st, applyP(&storev1.Group{Conditions: []*storev1.Condition{{Key: "/r", Version: rver}}, Ops: []*storev1.Op{putOp("/z", "1")}})); !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("a read of a read key: %v", res.Outcome)
	}
	// Another transaction preparing against the written key fails too.
	if res := mustApply(t, st, prepareP("other", 100, &storev1.Group{Ops: []*storev1.Op{putOp("/k", "x")}})); reason(res, 0) != storev1.FailureReason_FAILURE_REASON_INTENT {
		t.Fatalf("second prepare: %v", res.Outcome)
	}
	mustApply(t, st, resolveP("other"))
	res = mustApply(t, st, resolveP("w", 0))
	if rec, _ := st.Get(DataKey("/k")); rec == nil || string(rec[len(rec)-3:]) != "new" || len(res.Changes.GetEvents()) != 1 {
		t.Fatalf("after commit: %q, changes %v", rec, res.Changes)
	}
}

// A fence stops a transaction that has not prepared from ever preparing
// and tells what a shard knows of one that has; resolution is idempotent;
// a PREPARE repeated after resolution (a retry of the request) is not
// applied again, and returns the decision.
func TestFencesAndRetries(t *testing.T) {
	st := NewMemStorage()
	fenceP := func(txn string, hash uint64) *storev1.Proposal {
		return &storev1.Proposal{TxnId: txn, Phase: storev1.Phase_PHASE_FENCE, NowUnixNanos: 2, DedupeWindowNanos: window, RequestHash: hash}
	}
	group := &storev1.Group{Ops: []*storev1.Op{addOp("/c", 1, 0, 10)}}
	if res := mustApply(t, st, fenceP("late", 7)); res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_FENCED {
		t.Fatalf("fence of an unknown transaction: %v", res.Outcome)
	}
	if res := mustApply(t, st, prepareP("late", 100, group)); res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_FENCED || res.Changes != nil {
		t.Fatalf("prepare after a fence: %v", res.Outcome)
	}
	if n := countPrefix(t, st, prefixIntent); n != 0 {
		t.Fatalf("a fenced prepare left %d intents", n)
	}
	mustApply(t, st, prepareP("t", 100, group))
	res := mustApply(t, st, fenceP("t", 7))
	if res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_PREPARED || !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("fence of a prepared transaction: %v", res.Outcome)
	}
	if res := mustApply(t, st, fenceP("t", 8)); res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_FENCED {
		t.Fatalf("fence of another request's transaction: %v", res.Outcome)
	}
	decided := Settle([]*storev1.Outcome{res.Outcome}, false)
	for range 2 {
		p := resolveP("t", 0)
		p.Outcome = decided
		mustApply(t, st, p)
	}
	if v, _ := counter(t, st, "/c"); v != 1 {
		t.Fatalf("counter %d after resolving twice, want 1", v)
	}
	res = mustApply(t, st, prepareP("t", 100, group))
	if !res.Outcome.GetDuplicate() || res.Outcome.GetTxnState() != storev1.TxnState_TXN_STATE_DECIDED || !res.Outcome.GetGroups()[0].GetCommitted() {
		t.Fatalf("a retried prepare was not answered with the decision: %v", res.Outcome)
	}
	if v, _ := counter(t, st, "/c"); v != 1 {
		t.Fatalf("counter %d after a retry, want 1", v)
	}
}

// An atomic prepare with a failing group leaves no intents; Overdue lists
// the transactions whose deadline passed, for recovery.
func TestAtomicPrepareAndOverdue(t *testing.T) {
	st := NewMemStorage()
	p := prepareP("atomic", 50, &storev1.Group{Ops: []*storev1.Op{putOp("/a", "1")}},
		&storev1.Group{Ops: []*storev1.Op{addOp("/c", 5, 0, 1)}})
	p.Atomic = true
	res := mustApply(t, st, p)
	if reason(res, 0) != storev1.FailureReason_FAILURE_REASON_ABORTED || reason(res, 1) != storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED {
		t.Fatalf("atomic prepare: %v", res.Outcome)
	}
	if n := countPrefix(t, st, prefixIntent); n != 0 {
		t.Fatalf("%d intents left by a failed atomic prepare", n)
	}
	mustApply(t, st, prepareP("late", 200, &storev1.Group{Ops: []*storev1.Op{putOp("/b", "1")}}))
	ids, recs, err := Overdue(st, 100, 10)
	if err != nil || len(ids) != 1 || ids[0] != "atomic" || recs[0].GetDeadlineUnixNanos() != 50 {
		t.Fatalf("overdue at 100: %v %v", ids, err)
	}
	if ids, _, _ := Overdue(st, 300, 10); len(ids) != 2 {
		t.Fatalf("overdue at 300: %v", ids)
	}
}

// Settle: undecided while a participant knows nothing; a recorded
// decision wins; a group commits when all its parts prepared; atomic, one
// failure aborts all; one fence aborts all.
func TestSettle(t *testing.T) {
	prepared := func(groups ...*storev1.GroupResult) *storev1.Outcome {
		o := &storev1.Outcome{TxnState: storev1.TxnState_TXN_STATE_PREPARED, Groups: groups}
		for i := range groups {
			o.GroupIndexes = append(o.GroupIndexes, uint32(i))
		}
		return o
	}
	ok := &storev1.GroupResult{Committed: true}
	bad := &storev1.GroupResult{Failure: &storev1.Failure{Reason: storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH}}
	committed := func(d *storev1.Outcome) []bool {
		var out []bool
		for _, g := range d.GetGroups() {
			out = append(out, g.GetCommitted())
		}
		return out
	}
	fenced := &storev1.Outcome{TxnState: storev1.TxnState_TXN_STATE_FENCED}
	decided := &storev1.Outcome{TxnState: storev1.TxnState_TXN_STATE_DECIDED, Duplicate: true, GroupIndexes: []uint32{0}, Groups: []*storev1.GroupResult{ok}}
	for _, tc := range []struct {
		name   string
		states []*storev1.Outcome
		atomic bool
		want   []bool // nil: undecided
	}{
		{"one knows nothing", []*storev1.Outcome{prepared(ok, ok), nil}, false, nil},
		{"all prepared", []*storev1.Outcome{prepared(ok, ok), prepared(ok, bad)}, false, []bool{true, false}},
		{"atomic with a failure", []*storev1.Outcome{prepared(ok, ok), prepared(ok, bad)}, true, []bool{false, false}},
		{"a fence", []*storev1.Outcome{prepared(ok, ok), fenced}, false, []bool{false, false}},
		{"a decision", []*storev1.Outcome{nil, decided, fenced}, false, []bool{true}},
	} {
		d := Settle(tc.states, tc.atomic)
		if (d == nil) != (tc.want == nil) || !slices.Equal(committed(d), tc.want) {
			t.Errorf("%s: decided %v, want committed %v", tc.name, d, tc.want)
			continue
		}
		if d != nil && (d.GetTxnState() != storev1.TxnState_TXN_STATE_DECIDED || d.GetDuplicate()) {
			t.Errorf("%s: decision %v", tc.name, d)
		}
	}
}
