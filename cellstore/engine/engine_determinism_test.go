package engine

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	"google.golang.org/protobuf/proto"
)

// Property tests: the engine is deterministic, and for the user-visible
// state it agrees with a naive map-based model.

const (
	propSeed1, propSeed2 = 20260101, 7
	propProposals        = 1500
)

var (
	propKeys   = []string{"/a", "/b", "/c", "/d", "/e/1", "/e/2"}
	propValues = []string{"", "0", "1", "-3", "7", "x", "1.5", "+2", "9223372036854775807", "-9223372036854775808"}
	propDeltas = []int64{-3, -2, -1, 0, 1, 2, 3, 5, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
)

// proposalGen makes random proposals. versionOf gives the version a key
// has now, so that conditions hold often enough to be interesting.
type proposalGen struct {
	r    *rand.Rand
	now  int64
	sent []*storev1.Proposal
	// withTxns turns on txn ids, dedupe windows and retries.
	withTxns bool
}

func (g *proposalGen) next(versionOf func(string) uint64) *storev1.Proposal {
	r := g.r
	// The proposer's clock mostly moves forward, sometimes lags.
	if r.IntN(8) == 0 {
		g.now -= int64(r.IntN(30))
	} else {
		g.now += int64(r.IntN(20))
	}
	if g.withTxns && len(g.sent) > 0 && r.IntN(6) == 0 {
		// A retry of an earlier request, maybe with another window.
		p := proto.Clone(g.sent[r.IntN(len(g.sent))]).(*storev1.Proposal)
		p.NowUnixNanos = g.now
		return p
	}
	p := &storev1.Proposal{
		Atomic:       r.IntN(5) == 0,
		NowUnixNanos: g.now,
		LogRetention: []uint64{0, 1, 3, 10}[r.IntN(4)],
	}
	for i := range r.IntN(5) {
		p.Groups = append(p.Groups, g.group(versionOf))
		p.GroupIndexes = append(p.GroupIndexes, uint32(i))
	}
	if g.withTxns {
		if r.IntN(4) != 0 {
			p.TxnId = fmt.Sprintf("t%d", r.IntN(40))
		}
		p.DedupeWindowNanos = []int64{0, 5, 50, 200}[r.IntN(4)]
		h := fnv.New64a()
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&storev1.Proposal{Groups: p.Groups, Atomic: p.Atomic})
		if err != nil {
			panic(err)
		}
		h.Write(b)
		p.RequestHash = h.Sum64()
	}
	g.sent = append(g.sent, p)
	return p
}

func (g *proposalGen) group(versionOf func(string) uint64) *storev1.Group {
	r := g.r
	key := func() string { return propKeys[r.IntN(len(propKeys))] }
	grp := &storev1.Group{}
	for range []int{0, 0, 1, 1, 2}[r.IntN(5)] {
		k := key()
		var v uint64
		switch r.IntN(6) {
		case 0, 1, 2, 3:
			v = versionOf(k)
		case 4:
			v = 0
		default:
			v = uint64(r.IntN(20))
		}
		grp.Conditions = append(grp.Conditions, &storev1.Condition{Key: k, Version: v})
	}
	for range r.IntN(5) {
		switch r.IntN(5) {
		case 0:
			grp.Ops = append(grp.Ops, &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{
				Key: key(), Value: []byte(propValues[r.IntN(len(propValues))])}}})
		case 1:
			grp.Ops = append(grp.Ops, &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: key()}}})
		default:
			a := &storev1.Add{Key: key(), Delta: propDeltas[r.IntN(len(propDeltas))]}
			switch r.IntN(10) {
			case 0, 1, 2:
				a.Min, a.Max = math.MinInt64, math.MaxInt64
			case 3:
				a.Min, a.Max = int64(r.IntN(5)), -int64(r.IntN(5)) // max < min, mostly
			default:
				a.Min, a.Max = -int64(r.IntN(20)), int64(r.IntN(20))
			}
			grp.Ops = append(grp.Ops, &storev1.Op{Op: &storev1.Op_Add{Add: a}})
		}
	}
	return grp
}

// storedVersion is the version of user key k in st (0: absent).
func storedVersion(t *testing.T, st Storage, k string) uint64 {
	t.Helper()
	rec, err := st.Get(DataKey(k))
	if err != nil {
		t.Fatal(err)
	}
	if rec == nil {
		return 0
	}
	v, _, err := DecodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type kvPair struct{ k, v []byte }

func dumpStorage(t *testing.T, st Storage) []kvPair {
	t.Helper()
	var out []kvPair
	if err := st.Scan(nil, nil, func(k, v []byte) bool {
		out = append(out, kvPair{bytes.Clone(k), bytes.Clone(v)})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApplyDeterministic(t *testing.T) {
	gen := &proposalGen{r: rand.New(rand.NewPCG(propSeed1, propSeed2)), withTxns: true}
	st1, st2 := NewMemStorage(), NewMemStorage()
	var duplicates, reused, writes int
	for i := range propProposals {
		p := gen.next(func(k string) uint64 { return storedVersion(t, st1, k) })
		before := proto.Clone(p)
		r1, err1 := Apply(st1, p)
		r2, err2 := Apply(st2, proto.Clone(p).(*storev1.Proposal))
		if err1 != nil || err2 != nil {
			t.Fatalf("proposal %d: errors %v, %v", i, err1, err2)
		}
		if !proto.Equal(before, p) {
			t.Fatalf("proposal %d: Apply modified the proposal", i)
		}
		if !proto.Equal(r1.Outcome, r2.Outcome) || !proto.Equal(r1.Changes, r2.Changes) {
			t.Fatalf("proposal %d: results differ:\n%v %v\n%v %v", i, r1.Outcome, r1.Changes, r2.Outcome, r2.Changes)
		}
		b1, _ := proto.Marshal(r1.Outcome)
		b2, _ := proto.Marshal(r2.Outcome)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("proposal %d: encoded outcomes differ", i)
		}
		if r1.Outcome.GetDuplicate() {
			duplicates++
			for _, g := range r1.Outcome.GetGroups() {
				if g.GetFailure().GetReason() == storev1.FailureReason_FAILURE_REASON_TXN_ID_REUSED {
					reused++
					break
				}
			}
		}
		if r1.Changes != nil {
			writes++
		}
		if i%10 == 9 || i == propProposals-1 {
			d1, d2 := dumpStorage(t, st1), dumpStorage(t, st2)
			if !slices.EqualFunc(d1, d2, func(a, b kvPair) bool { return bytes.Equal(a.k, b.k) && bytes.Equal(a.v, b.v) }) {
				t.Fatalf("proposal %d: storage contents differ (%d vs %d keys)", i, len(d1), len(d2))
			}
		}
	}
	// The generator must reach the interesting paths.
	if duplicates == 0 || reused == 0 || writes < propProposals/4 {
		t.Errorf("weak generator: %d duplicates, %d reused, %d writes", duplicates, reused, writes)
	}
	t.Logf("%d proposals: %d writes, %d duplicates (%d reused ids), %d keys stored", propProposals, writes, duplicates, reused, st1.Len())
}

// modelKV is a user key in the model.
type modelKV struct {
	value   []byte
	version uint64
}

// model is a naive reference for the user-visible effect of proposals
// without txn ids: copy the whole state for every group, apply, keep the
// copy if the group holds.
type model struct {
	data map[string]modelKV
	rev  uint64
}

// modelResult is what the model predicts for one group.
type modelResult struct {
	committed bool
	reason    storev1.FailureReason
	key       string
	current   uint64
}

func (m *model) apply(p *storev1.Proposal) (results []modelResult, rev uint64, changed map[string]*modelKV) {
	next := m.rev + 1
	state := maps.Clone(m.data)
	written := map[string]bool{}
	failed := false
	for _, g := range p.GetGroups() {
		work := maps.Clone(state)
		res, wrote := modelGroup(work, g, next)
		results = append(results, res)
		if !res.committed {
			failed = true
			continue
		}
		state = work
		for _, k := range wrote {
			written[k] = true
		}
	}
	if p.GetAtomic() && failed {
		for i := range results {
			if results[i].committed {
				results[i] = modelResult{reason: storev1.FailureReason_FAILURE_REASON_ABORTED}
			}
		}
		written = nil
	}
	changed = map[string]*modelKV{}
	for k := range written {
		if kv, ok := state[k]; ok {
			changed[k] = &kv
		} else if _, existed := m.data[k]; existed {
			changed[k] = nil
		} // deleting an absent key changes nothing
	}
	if len(changed) == 0 {
		return results, m.rev, nil
	}
	m.rev = next
	m.data = state
	return results, m.rev, changed
}

// modelGroup applies one group to work (which it may change even when the
// group fails) and returns the result and the keys the group wrote.
func modelGroup(work map[string]modelKV, g *storev1.Group, next uint64) (modelResult, []string) {
	for _, c := range g.GetConditions() {
		if v := work[c.GetKey()].version; v != c.GetVersion() {
			return modelResult{reason: storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH, key: c.GetKey(), current: v}, nil
		}
	}
	var wrote []string
	for _, op := range g.GetOps() {
		switch o := op.GetOp().(type) {
		case *storev1.Op_Put:
			work[o.Put.GetKey()] = modelKV{value: o.Put.GetValue(), version: next}
			wrote = append(wrote, o.Put.GetKey())
		case *storev1.Op_Delete:
			delete(work, o.Delete.GetKey())
			wrote = append(wrote, o.Delete.GetKey())
		case *storev1.Op_Add:
			k := o.Add.GetKey()
			kv, exists := work[k]
			cur := new(big.Int)
			if exists {
				if _, ok := cur.SetString(string(kv.value), 10); !ok || !cur.IsInt64() {
					return modelResult{reason: storev1.FailureReason_FAILURE_REASON_NOT_A_COUNTER, key: k, current: kv.version}, nil
				}
			}
			sum := new(big.Int).Add(cur, big.NewInt(o.Add.GetDelta()))
			if sum.Cmp(big.NewInt(o.Add.GetMin())) < 0 || sum.Cmp(big.NewInt(o.Add.GetMax())) > 0 || !sum.IsInt64() {
				return modelResult{reason: storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED, key: k, current: kv.version}, nil
			}
			if o.Add.GetDelta() != 0 { // an add of 0 only checks the bounds
				work[k] = modelKV{value: []byte(sum.String()), version: next}
				wrote = append(wrote, k)
			}
		}
	}
	return modelResult{committed: true}, wrote
}

func TestApplyMatchesModel(t *testing.T) {
	gen := &proposalGen{r: rand.New(rand.NewPCG(propSeed2, propSeed1))}
	st := NewMemStorage()
	m := &model{data: map[string]modelKV{}}
	committed, failedBy := 0, map[storev1.FailureReason]int{}
	for i := range propProposals {
		p := gen.next(func(k string) uint64 { return m.data[k].version })
		want, wantRev, wantChanged := m.apply(p)
		res, err := Apply(st, p)
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
		out := res.Outcome
		if out.GetRevision() != wantRev || out.GetDuplicate() {
			t.Fatalf("proposal %d: revision %d duplicate %v, model says %d", i, out.GetRevision(), out.GetDuplicate(), wantRev)
		}
		if len(out.GetGroups()) != len(want) {
			t.Fatalf("proposal %d: %d group results, want %d", i, len(out.GetGroups()), len(want))
		}
		for j, g := range out.GetGroups() {
			w := want[j]
			f := g.GetFailure()
			if g.GetCommitted() != w.committed || f.GetReason() != w.reason || f.GetKey() != w.key || f.GetCurrentVersion() != w.current {
				t.Fatalf("proposal %d group %d: got %v, model says %+v\nproposal: %v", i, j, g, w, p)
			}
			if g.GetCommitted() {
				committed++
				if g.GetRevision() != wantRev {
					t.Fatalf("proposal %d group %d: committed at %d, want %d", i, j, g.GetRevision(), wantRev)
				}
			} else {
				failedBy[f.GetReason()]++
			}
		}
		checkChanges(t, i, res.Changes, wantRev, wantChanged)
		checkUserState(t, i, st, m)
	}
	for _, r := range []storev1.FailureReason{
		storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH,
		storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED,
		storev1.FailureReason_FAILURE_REASON_NOT_A_COUNTER,
		storev1.FailureReason_FAILURE_REASON_ABORTED,
	} {
		if failedBy[r] == 0 {
			t.Errorf("weak generator: no %v failures", r)
		}
	}
	if committed < propProposals/2 || m.rev < propProposals/4 {
		t.Errorf("weak generator: %d committed groups, revision %d", committed, m.rev)
	}
	t.Logf("%d proposals: revision %d, %d committed groups, failures %v", propProposals, m.rev, committed, failedBy)
}

// checkChanges compares a change set with the keys the model says changed.
func checkChanges(t *testing.T, i int, cs *storev1.ChangeSet, rev uint64, want map[string]*modelKV) {
	t.Helper()
	if (cs == nil) != (want == nil) {
		t.Fatalf("proposal %d: changes %v, model says %v", i, cs, want)
	}
	seen := map[string]bool{}
	for _, ev := range cs.GetEvents() {
		k := ev.GetKv().GetKey()
		w, ok := want[k]
		if !ok || seen[k] {
			t.Fatalf("proposal %d: unexpected or repeated event %v", i, ev)
		}
		seen[k] = true
		if ev.GetKv().GetVersion() != rev {
			t.Fatalf("proposal %d: event %v at version %d, want %d", i, ev, ev.GetKv().GetVersion(), rev)
		}
		switch {
		case w == nil && ev.GetType() != storev1.EventType_EVENT_TYPE_DELETE,
			w != nil && (ev.GetType() != storev1.EventType_EVENT_TYPE_PUT || !bytes.Equal(ev.GetKv().GetValue(), w.value)):
			t.Fatalf("proposal %d: event %v, model says %+v", i, ev, w)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("proposal %d: %d events, model says %d keys changed", i, len(seen), len(want))
	}
}

// checkUserState compares every user key in st with the model.
func checkUserState(t *testing.T, i int, st Storage, m *model) {
	t.Helper()
	got := map[string]modelKV{}
	lower, upper := DataBounds("")
	if err := st.Scan(lower, upper, func(k, rec []byte) bool {
		v, value, err := DecodeRecord(rec)
		if err != nil {
			t.Fatalf("proposal %d: key %q: %v", i, k, err)
		}
		got[UserKey(k)] = modelKV{bytes.Clone(value), v}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, m.data, func(a, b modelKV) bool { return a.version == b.version && bytes.Equal(a.value, b.value) }) {
		t.Fatalf("proposal %d: state\n%s\nmodel\n%s", i, formatModel(got), formatModel(m.data))
	}
	rev, err := readMeta(st, revisionKey)
	if err != nil || rev != m.rev {
		t.Fatalf("proposal %d: stored revision %d (%v), model %d", i, rev, err, m.rev)
	}
}

func formatModel(d map[string]modelKV) string {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(d)) {
		b.WriteString("  " + k + " = " + strconv.Quote(string(d[k].value)) + " v" + strconv.FormatUint(d[k].version, 10) + "\n")
	}
	return b.String()
}
