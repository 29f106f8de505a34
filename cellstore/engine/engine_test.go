package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Unit tests for what the scripts cannot reach easily: bounded expiry of
// remembered outcomes, storage errors and corrupt state.

func putOp(k, v string) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte(v)}}}
}

func mustApply(t *testing.T, st Storage, p *storev1.Proposal) *Result {
	t.Helper()
	res, err := Apply(st, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func countPrefix(t *testing.T, st Storage, prefix byte) int {
	t.Helper()
	n := 0
	if err := st.Scan([]byte{prefix}, []byte{prefix + 1}, func(_, _ []byte) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestExpireTxnsBounded: one Apply forgets at most maxExpiredPerApply
// outcomes; an id whose window ended is not remembered even while its
// index entry waits, and when it is applied again the leftover index entry
// does not take the new record with it.
func TestExpireTxnsBounded(t *testing.T) {
	st := NewMemStorage()
	// Times are in units of the expiry scan interval, so that every
	// proposal below may scan.
	const u = expiryScanInterval
	const n = maxExpiredPerApply + 44
	for i := range n {
		mustApply(t, st, &storev1.Proposal{
			TxnId:             fmt.Sprintf("t%03d", i),
			Groups:            []*storev1.Group{{Ops: []*storev1.Op{putOp("/k", "v")}}},
			NowUnixNanos:      1 * u,
			DedupeWindowNanos: 10 * u,
			RequestHash:       1,
		})
	}
	if got := countPrefix(t, st, prefixTxn); got != n {
		t.Fatalf("%d remembered txns, want %d", got, n)
	}

	// now=100: every window ended, but only maxExpiredPerApply go.
	mustApply(t, st, &storev1.Proposal{NowUnixNanos: 100 * u})
	if got, want := countPrefix(t, st, prefixTxn), n-maxExpiredPerApply; got != want {
		t.Fatalf("after one expiry pass: %d remembered txns, want %d", got, want)
	}
	if got, want := countPrefix(t, st, prefixExpiry), n-maxExpiredPerApply; got != want {
		t.Fatalf("after one expiry pass: %d expiry entries, want %d", got, want)
	}

	// The last id still has a record and an index entry, both expired: a
	// retry applies again instead of getting the old outcome.
	last := fmt.Sprintf("t%03d", n-1)
	retry := &storev1.Proposal{
		TxnId:             last,
		Groups:            []*storev1.Group{{Ops: []*storev1.Op{putOp("/k", "v")}}},
		NowUnixNanos:      100 * u,
		DedupeWindowNanos: 10 * u,
		RequestHash:       1,
	}
	res := mustApply(t, st, retry)
	if res.Outcome.GetDuplicate() || res.Changes == nil {
		t.Fatalf("retry of an expired txn: %v, want a fresh application", res.Outcome)
	}
	rev := res.Outcome.GetRevision()

	// now=101: the rest of the old index entries go, including last's old
	// one (expiry 11); last's new record (expiry 110) stays.
	mustApply(t, st, &storev1.Proposal{NowUnixNanos: 101 * u})
	if got := countPrefix(t, st, prefixTxn); got != 1 {
		t.Fatalf("after the second pass: %d remembered txns, want 1", got)
	}
	if got := countPrefix(t, st, prefixExpiry); got != 1 {
		t.Fatalf("after the second pass: %d expiry entries, want 1", got)
	}
	// Expiry entries have empty values, so look for the key with Scan.
	found := false
	if err := st.Scan(expiryKey(110*u, last), nil, func(k, _ []byte) bool {
		found = bytes.Equal(k, expiryKey(110*u, last))
		return false
	}); err != nil || !found {
		t.Fatalf("expiry entry of the new record is gone (%v)", err)
	}
	retry.NowUnixNanos = 105 * u
	res = mustApply(t, st, retry)
	if !res.Outcome.GetDuplicate() || res.Outcome.GetRevision() != rev {
		t.Fatalf("second retry: %v, want the remembered outcome at %d", res.Outcome, rev)
	}

	// At 110 the new window ends too and everything is forgotten.
	mustApply(t, st, &storev1.Proposal{NowUnixNanos: 110 * u})
	if a, b := countPrefix(t, st, prefixTxn), countPrefix(t, st, prefixExpiry); a != 0 || b != 0 {
		t.Fatalf("at 110: %d txns, %d expiry entries left", a, b)
	}
}

// TestExpiryGroups: the outcomes remembered by the proposals of one entry
// (ApplyEntry) share one expiry index entry, found and forgotten by the
// expiry scan like the per-outcome entries of Apply and of older
// binaries, which a shard keeps until they expire; a scan bounded by
// maxExpiredPerApply finishes the group it is in and resumes after it.
func TestExpiryGroups(t *testing.T) {
	st := NewMemStorage()
	const u = expiryScanInterval
	proposal := func(id string, now int64) *storev1.Proposal {
		return &storev1.Proposal{
			TxnId:             id,
			Groups:            []*storev1.Group{{Ops: []*storev1.Op{putOp("/k", id)}}},
			NowUnixNanos:      now,
			DedupeWindowNanos: 10 * u,
			RequestHash:       1,
		}
	}
	// An old-format shard: what Apply writes is what a binary before
	// groups wrote, one x<expiry><id> per outcome.
	for i := range 3 {
		mustApply(t, st, proposal(fmt.Sprintf("old%d", i), 1*u))
	}
	// Entries of many proposals, each one group; a group of one keeps the
	// old form. In the first entry a later proposal moves the clock, and
	// its expiry scan the scans' start, past the first's window: the
	// group's key goes at the clock's next nanosecond, where scans still
	// look.
	lag := proposal("lag", 1*u)
	lag.DedupeWindowNanos = 1
	entries := [][]*storev1.Proposal{{lag, {NowUnixNanos: 5 * u}}}
	for e := range 2 * maxExpiredPerApply / 100 {
		var ps []*storev1.Proposal
		for i := range 100 {
			ps = append(ps, proposal(fmt.Sprintf("g%d-%03d", e, i), 5*u))
		}
		entries = append(entries, ps)
	}
	entries = append(entries, []*storev1.Proposal{proposal("single", 5*u)})
	for _, ps := range entries {
		res, err := ApplyEntry(st, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if len(ps[i].GetGroups()) > 0 && !r.Outcome.GetGroups()[0].GetCommitted() {
				t.Fatalf("proposal %s: %v", ps[i].GetTxnId(), r.Outcome)
			}
		}
	}
	ids := 3 + 1 + len(entries[1:len(entries)-1])*100 + 1
	if got := countPrefix(t, st, prefixTxn); got != ids {
		t.Fatalf("%d remembered txns, want %d", got, ids)
	}
	// 3 old entries, one per entry.
	if got, want := countPrefix(t, st, prefixExpiry), 3+len(entries); got != want {
		t.Fatalf("%d expiry index entries, want %d", got, want)
	}
	// A retry in an entry of its own gets the first outcome.
	res := mustApply(t, st, proposal("g1-050", 6*u))
	if !res.Outcome.GetDuplicate() {
		t.Fatalf("retry of g1-050: %v, want the remembered outcome", res.Outcome)
	}

	// All windows end by 15; each pass forgets at least
	// maxExpiredPerApply outcomes, and at most the rest of a group more.
	left := ids
	for pass := 0; left > 0; pass++ {
		if pass > 2 {
			t.Fatalf("%d outcomes left after %d passes", left, pass)
		}
		mustApply(t, st, &storev1.Proposal{NowUnixNanos: 20 * u})
		n := countPrefix(t, st, prefixTxn)
		if forgot := left - n; forgot < min(left, maxExpiredPerApply) || forgot >= maxExpiredPerApply+100 {
			t.Fatalf("pass %d forgot %d of %d outcomes", pass, forgot, left)
		}
		left = n
	}
	if n := countPrefix(t, st, prefixExpiry); n != 0 {
		t.Fatalf("%d expiry index entries left", n)
	}
}

var errInjected = errors.New("injected storage failure")

// failingStorage fails the failAt'th storage call (counting from 0).
type failingStorage struct {
	Storage
	calls, failAt int
	failed        bool
}

func (f *failingStorage) fail() bool {
	n := f.calls
	f.calls++
	if n == f.failAt {
		f.failed = true
		return true
	}
	return false
}

func (f *failingStorage) Get(k []byte) ([]byte, error) {
	if f.fail() {
		return nil, errInjected
	}
	return f.Storage.Get(k)
}

func (f *failingStorage) Set(k, v []byte) error {
	if f.fail() {
		return errInjected
	}
	return f.Storage.Set(k, v)
}

func (f *failingStorage) Delete(k []byte) error {
	if f.fail() {
		return errInjected
	}
	return f.Storage.Delete(k)
}

func (f *failingStorage) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	if f.fail() {
		return errInjected
	}
	return f.Storage.Scan(lower, upper, fn)
}

func cloneStorage(t *testing.T, st *MemStorage) *MemStorage {
	t.Helper()
	c := NewMemStorage()
	for _, kv := range dumpStorage(t, st) {
		if err := c.Set(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestApplyStorageErrors: whichever storage call fails, Apply reports it.
func TestApplyStorageErrors(t *testing.T) {
	base := NewMemStorage()
	// State that makes the next proposal touch every path: a counter, a
	// key to delete, a full change log, and an expiring txn.
	mustApply(t, base, &storev1.Proposal{
		TxnId:             "old",
		Groups:            []*storev1.Group{{Ops: []*storev1.Op{putOp("/c", "1"), putOp("/d", "x")}}},
		NowUnixNanos:      1,
		DedupeWindowNanos: 5,
		LogRetention:      1,
	})
	p := &storev1.Proposal{
		TxnId:             "new",
		NowUnixNanos:      10,
		DedupeWindowNanos: 5,
		LogRetention:      1,
		Groups: []*storev1.Group{
			{
				Conditions: []*storev1.Condition{{Key: "/c", Version: 1}},
				Ops: []*storev1.Op{
					putOp("/p", "v"),
					{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: "/d"}}},
					{Op: &storev1.Op_Add{Add: &storev1.Add{Key: "/c", Delta: 1, Min: 0, Max: 10}}},
				},
			},
			{Conditions: []*storev1.Condition{{Key: "/none", Version: 3}}},
		},
	}
	for failAt := 0; ; failAt++ {
		fs := &failingStorage{Storage: cloneStorage(t, base), failAt: failAt}
		_, err := Apply(fs, p)
		if !fs.failed {
			if err != nil {
				t.Fatalf("no failure injected, Apply: %v", err)
			}
			if failAt < 10 {
				t.Fatalf("Apply made only %d storage calls", failAt)
			}
			break
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("storage call %d failed, Apply returned %v", failAt, err)
		}
	}
}

// TestApplyCorruptState: undecodable stored state is an error, not an
// outcome.
func TestApplyCorruptState(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		val  []byte
		p    *storev1.Proposal
	}{
		{"record header", DataKey("/a"), []byte{}, &storev1.Proposal{Groups: []*storev1.Group{{Conditions: []*storev1.Condition{{Key: "/a"}}}}}},
		{"record header add", DataKey("/a"), []byte{0x80}, &storev1.Proposal{Groups: []*storev1.Group{{Ops: []*storev1.Op{{Op: &storev1.Op_Add{Add: &storev1.Add{Key: "/a", Delta: 1, Max: 5}}}}}}}},
		{"revision", []byte(metaRevision), []byte{1, 2, 3}, &storev1.Proposal{Groups: []*storev1.Group{{Ops: []*storev1.Op{putOp("/a", "x")}}}}},
		{"clock", []byte(metaClock), []byte{1}, &storev1.Proposal{}},
		{"log start", []byte(metaLogStart), []byte{1}, &storev1.Proposal{Groups: []*storev1.Group{{Ops: []*storev1.Op{putOp("/a", "x")}}}}},
		{"txn record", txnKey("t"), []byte{0xff}, &storev1.Proposal{TxnId: "t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewMemStorage()
			if err := st.Set(tc.key, tc.val); err != nil {
				t.Fatal(err)
			}
			if res, err := Apply(st, tc.p); err == nil {
				t.Fatalf("Apply on corrupt %s: %v, want an error", tc.name, res.Outcome)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	for _, k := range []string{"", "/a", "/machines/m1", "\xff"} {
		if got := UserKey(DataKey(k)); got != k {
			t.Errorf("UserKey(DataKey(%q)) = %q", k, got)
		}
	}
	for _, tc := range []struct{ prefix, lower, upper string }{
		{"", "d", "e"},
		{"/a/", "d/a/", "d/a0"},
		{"a\xff", "da\xff", "db"},
		{"\xff\xff", "d\xff\xff", "e"},
	} {
		lo, up := DataBounds(tc.prefix)
		if string(lo) != tc.lower || string(up) != tc.upper {
			t.Errorf("DataBounds(%q) = %q, %q; want %q, %q", tc.prefix, lo, up, tc.lower, tc.upper)
		}
	}
	if got := prefixEnd([]byte{0xff, 0xff}); got != nil {
		t.Errorf("prefixEnd(ff ff) = %q, want nil", got)
	}
	// Log and expiry keys sort numerically.
	for _, pair := range [][2]uint64{{1, 2}, {255, 256}, {1 << 32, 1<<32 + 1}} {
		if bytes.Compare(LogKey(pair[0]), LogKey(pair[1])) >= 0 {
			t.Errorf("LogKey(%d) does not sort before LogKey(%d)", pair[0], pair[1])
		}
		if bytes.Compare(expiryKey(int64(pair[0]), "z"), expiryKey(int64(pair[1]), "a")) >= 0 {
			t.Errorf("expiryKey(%d) does not sort before expiryKey(%d)", pair[0], pair[1])
		}
	}
	for _, v := range []uint64{0, 1, 1 << 40} {
		for _, val := range []string{"", "x", "\x00\x01"} {
			gotV, gotVal, err := DecodeRecord(EncodeRecord(v, []byte(val)))
			if err != nil || gotV != v || string(gotVal) != val {
				t.Errorf("record %d %q round trip: %d %q %v", v, val, gotV, gotVal, err)
			}
		}
		if got, err := DecodeUint64(EncodeUint64(v)); err != nil || got != v {
			t.Errorf("uint64 %d round trip: %d %v", v, got, err)
		}
	}
	if _, _, err := DecodeRecord(nil); err == nil {
		t.Error("DecodeRecord(nil): no error")
	}
	if v, err := DecodeUint64(nil); err != nil || v != 0 {
		t.Errorf("DecodeUint64(nil) = %d, %v; want 0", v, err)
	}
	if _, err := DecodeUint64([]byte{1, 2}); err == nil {
		t.Error("DecodeUint64 of 2 bytes: no error")
	}
}

// A proposal of a phase this binary does not know (a newer binary's) is
// an error, not a plain commit: the replica stops rather than let its
// state differ from its peers'.
func TestUnknownPhaseIsAnError(t *testing.T) {
	_, err := Apply(NewMemStorage(), &storev1.Proposal{TxnId: "t", Phase: storev1.Phase(99), NowUnixNanos: 1,
		Groups: []*storev1.Group{{Ops: []*storev1.Op{putOp("/a", "1")}}}, GroupIndexes: []uint32{0}})
	if err == nil || !strings.Contains(err.Error(), "phase 99 is unknown") {
		t.Fatalf("Apply of phase 99: %v", err)
	}
}

// An overlay finds the last write of each key, before and after it grows
// past overlayIndexed and indexes its keys, and keeps the order in which
// keys were first written.
func TestOverlayGetSet(t *testing.T) {
	var ov overlay
	want := map[string]string{}
	var order []string
	for i := range 3 * overlayIndexed {
		k := fmt.Sprintf("k%d", i%(2*overlayIndexed)) // the last third writes keys again
		v := fmt.Sprintf("v%d", i)
		if _, ok := want[k]; !ok {
			order = append(order, k)
		}
		ov.set(k, pending{value: []byte(v)})
		want[k] = v
		for k, v := range want {
			if p, ok := ov.get(k); !ok || string(p.value) != v {
				t.Fatalf("after %d writes: get(%s) = %q, %v; want %q", i+1, k, p.value, ok, v)
			}
		}
		if _, ok := ov.get("absent"); ok {
			t.Fatalf("after %d writes: an absent key is found", i+1)
		}
	}
	if ov.index == nil {
		t.Fatalf("%d keys and no index", len(ov.writes))
	}
	for i, w := range ov.writes {
		if w.key != order[i] {
			t.Fatalf("write %d is %s, want %s (first-written order)", i, w.key, order[i])
		}
	}
}

// TestLaterGroupReadsLargeGroup: a group reads the writes of an earlier
// committed group of the proposal by key, also when that group wrote more
// keys than an overlay holds unindexed, in an order merge sorts.
func TestLaterGroupReadsLargeGroup(t *testing.T) {
	st := NewMemStorage()
	var first []*storev1.Op
	for i := 2 * overlayIndexed; i >= 0; i-- {
		first = append(first, putOp(fmt.Sprintf("/k%02d", i), fmt.Sprint(100*i)))
	}
	add := &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: "/k03", Delta: 1, Min: math.MinInt64, Max: math.MaxInt64}}}
	res := mustApply(t, st, &storev1.Proposal{Groups: []*storev1.Group{{Ops: first}, {Ops: []*storev1.Op{add}}}})
	for i, g := range res.Outcome.GetGroups() {
		if !g.GetCommitted() {
			t.Fatalf("group %d: %v", i, g.GetFailure())
		}
	}
	if rec, _ := st.Get(DataKey("/k03")); rec == nil {
		t.Fatal("/k03 missing")
	} else if _, v, _ := DecodeRecord(rec); string(v) != "301" {
		t.Fatalf("/k03 = %q, want 301", v)
	}
}
