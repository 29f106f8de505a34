package statemachine

import (
	"bytes"
	"fmt"
	"github.com/cockroachdb/pebble/v2/vfs"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// recorder is an Observer that keeps what it was told.
type recorder struct {
	revs   []uint64
	resets int
}

func (r *recorder) Applied(_ uint32, rev uint64, _ *storev1.ChangeSet) { r.revs = append(r.revs, rev) }
func (r *recorder) Reset(uint32)                                       { r.resets++ }

func open(t *testing.T, dir string, obs Observer) *StateMachine {
	t.Helper()
	m := New(Config{Dir: dir, Logger: zap.NewNop(), Observer: obs}, 0)
	if _, err := m.Open(nil); err != nil {
		t.Fatal(err)
	}
	return m
}

func putEntry(t *testing.T, index uint64, key, value string) sm.Entry {
	t.Helper()
	cmd, err := EncodeEntry(&storev1.Proposal{
		TxnId:             fmt.Sprintf("txn-%d", index),
		NowUnixNanos:      int64(index),
		DedupeWindowNanos: 1000,
		Groups:            []*storev1.Group{{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: []byte(value)}}}}}},
		GroupIndexes:      []uint32{0},
	})
	if err != nil {
		t.Fatal(err)
	}
	return sm.Entry{Index: index, Cmd: cmd}
}

func update(t *testing.T, m *StateMachine, entries ...sm.Entry) []sm.Entry {
	t.Helper()
	out, err := m.Update(entries)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustGet(t *testing.T, m *StateMachine, key string) *GetResult {
	t.Helper()
	r, err := m.Lookup(GetQuery{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return r.(*GetResult)
}

func TestUpdatePersistsAppliedIndexWithData(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	m := open(t, dir, rec)
	out := update(t, m, putEntry(t, 1, "/a", "1"), putEntry(t, 2, "/b", "2"), sm.Entry{Index: 3, Cmd: []byte{0xff, 0xff}})
	if out[0].Result.Value != ResultOutcome || out[2].Result.Value != ResultRejected {
		t.Fatalf("results: %+v", out)
	}
	if o, err := DecodeResult(out[1].Result); err != nil || len(o) != 1 || o[0].GetRevision() != 2 {
		t.Fatalf("outcome of entry 2: %v %v", o, err)
	}
	if m.AppliedIndex() != 3 || m.Revision() != 2 {
		t.Fatalf("applied %d revision %d, want 3 and 2", m.AppliedIndex(), m.Revision())
	}
	if fmt.Sprint(rec.revs) != "[1 2]" {
		t.Fatalf("observer saw %v", rec.revs)
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	m = New(Config{Dir: dir, Logger: zap.NewNop()}, 0)
	applied, err := m.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if applied != 3 || m.Revision() != 2 {
		t.Fatalf("after restart: applied %d revision %d, want 3 and 2", applied, m.Revision())
	}
	if g := mustGet(t, m, "/b"); string(g.KV.GetValue()) != "2" || g.KV.GetVersion() != 2 || g.Revision != 2 {
		t.Fatalf("after restart /b = %v", g)
	}
}

func TestUpdateRefusesReappliedEntry(t *testing.T) {
	m := open(t, t.TempDir(), nil)
	defer m.Close()
	update(t, m, putEntry(t, 5, "/a", "1"))
	defer func() {
		if recover() == nil {
			t.Fatal("re-applying index 5 did not panic")
		}
	}()
	update(t, m, putEntry(t, 5, "/a", "2"))
}

func TestSnapshotSaveAndRecover(t *testing.T) {
	src := open(t, t.TempDir(), nil)
	defer src.Close()
	for i := uint64(1); i <= 50; i++ {
		update(t, src, putEntry(t, i, fmt.Sprintf("/k/%02d", i), fmt.Sprint(i)))
	}
	ctx, err := src.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Writes after PrepareSnapshot must not be in the snapshot.
	update(t, src, putEntry(t, 51, "/late", "x"))
	var buf bytes.Buffer
	if err := src.SaveSnapshot(ctx, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	rec := &recorder{}
	dst := open(t, dir, rec)
	update(t, dst, putEntry(t, 1, "/stale", "gone"))
	if err := dst.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if dst.AppliedIndex() != 50 || dst.Revision() != 50 || rec.resets != 1 || dst.SnapshotsRecovered() != 1 {
		t.Fatalf("after recovery: applied %d revision %d resets %d recovered %d", dst.AppliedIndex(), dst.Revision(), rec.resets, dst.SnapshotsRecovered())
	}
	if g := mustGet(t, dst, "/stale"); g.KV != nil {
		t.Fatalf("state from before the snapshot survived: %v", g.KV)
	}
	if g := mustGet(t, dst, "/late"); g.KV != nil {
		t.Fatalf("write after PrepareSnapshot leaked into the snapshot")
	}
	r, err := dst.Lookup(RangeQuery{Prefix: "/k/", Limit: 100})
	if err != nil || len(r.(*RangeResult).KVs) != 50 {
		t.Fatalf("range after recovery: %v %v", r, err)
	}
	log, err := dst.ReadLog(1, 100)
	if err != nil || len(log.Entries) != 50 || log.Oldest != 1 {
		t.Fatalf("change log after recovery: %d entries, oldest %d, %v", len(log.Entries), log.Oldest, err)
	}
	// The recovered replica keeps applying, and restarts into the
	// recovered database.
	update(t, dst, putEntry(t, 51, "/after", "y"))
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	again := open(t, dir, nil)
	defer again.Close()
	if again.AppliedIndex() != 51 || again.Revision() != 51 || mustGet(t, again, "/after").KV == nil {
		t.Fatalf("restart after recovery: applied %d revision %d", again.AppliedIndex(), again.Revision())
	}
}

func TestSnapshotRecoverRejectsTruncatedStream(t *testing.T) {
	src := open(t, t.TempDir(), nil)
	defer src.Close()
	update(t, src, putEntry(t, 1, "/a", "1"))
	ctx, _ := src.PrepareSnapshot()
	var buf bytes.Buffer
	if err := src.SaveSnapshot(ctx, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	dst := open(t, t.TempDir(), nil)
	defer dst.Close()
	update(t, dst, putEntry(t, 1, "/keep", "1"))
	if err := dst.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()[:buf.Len()/2]), make(chan struct{})); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
	if mustGet(t, dst, "/keep").KV == nil || dst.AppliedIndex() != 1 {
		t.Fatal("failed recovery damaged the current state")
	}
}

func TestRangePagesAndLookupErrors(t *testing.T) {
	m := open(t, t.TempDir(), nil)
	defer m.Close()
	for i := uint64(1); i <= 5; i++ {
		update(t, m, putEntry(t, i, fmt.Sprintf("/p/%d", i), "v"))
	}
	update(t, m, putEntry(t, 6, "/q", "v"))
	var got []string
	after := ""
	for range 10 {
		r, err := m.Lookup(RangeQuery{Prefix: "/p/", After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		rr := r.(*RangeResult)
		for _, kv := range rr.KVs {
			got = append(got, kv.GetKey())
		}
		if !rr.More {
			break
		}
		after = rr.KVs[len(rr.KVs)-1].GetKey()
	}
	if fmt.Sprint(got) != "[/p/1 /p/2 /p/3 /p/4 /p/5]" {
		t.Fatalf("pages gave %v", got)
	}
	if _, err := m.Lookup("nonsense"); err == nil {
		t.Fatal("unknown query accepted")
	}
}

// TestRestartWithoutSync: what was applied after the last Sync is lost in
// a crash (Dragonboat replays it from its log), and the state on disk is
// exactly the state at the applied index it records.
func TestRestartWithoutSync(t *testing.T) {
	fs := vfs.NewCrashableMem()
	cfg := Config{Dir: "/data", Logger: zap.NewNop(), FS: fs}
	m := New(cfg, 0)
	if _, err := m.Open(nil); err != nil {
		t.Fatal(err)
	}
	update(t, m, putEntry(t, 1, "/a", "1"), putEntry(t, 2, "/b", "2"))
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	update(t, m, putEntry(t, 3, "/c", "3"))
	cfg.FS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = New(cfg, 0)
	applied, err := m.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if applied != 2 || m.Revision() != 2 || mustGet(t, m, "/c").KV != nil || mustGet(t, m, "/b").KV == nil {
		t.Fatalf("after the crash: applied %d revision %d, want the synced state at 2", applied, m.Revision())
	}
	// Replaying from the recorded index continues the history.
	update(t, m, putEntry(t, 3, "/c", "3"))
	if m.Revision() != 3 || mustGet(t, m, "/c").KV == nil {
		t.Fatalf("revision %d after replay, want 3", m.Revision())
	}
}

// TestIndexKeepsVersionsOfLargeValues checks that the key index tells a
// key's version without its record when the record is too large to keep
// (engine.VersionReader), as it was written and as rebuilt on Open, and
// that it agrees with what Pebble holds.
func TestIndexKeepsVersionsOfLargeValues(t *testing.T) {
	dir := t.TempDir()
	m := open(t, dir, nil)
	large := string(bytes.Repeat([]byte("v"), 2*maxCachedValue))
	update(t, m, putEntry(t, 1, "/a", large), putEntry(t, 2, "/b", "small"), putEntry(t, 3, "/a", large+"!"))
	check := func(when string) {
		t.Helper()
		st := batchStorage{idx: &m.idx}
		for _, k := range []string{"/a", "/b", "/absent"} {
			v, exists, err := st.DataVersion(engine.DataKey(k))
			if err != nil {
				t.Fatal(err)
			}
			var want uint64
			if kv := mustGet(t, m, k).KV; kv != nil {
				want = kv.GetVersion()
			}
			if exists != (want != 0) || v != want {
				t.Errorf("%s: DataVersion(%s) = %d, %v; Pebble has version %d", when, k, v, exists, want)
			}
		}
		if e := m.idx.data[string(engine.DataKey("/a"))]; e.rec != nil {
			t.Errorf("%s: the index keeps the %d-byte record of /a", when, len(e.rec))
		}
	}
	check("after Update")
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = open(t, dir, nil)
	defer m.Close()
	check("after reopening")
	if v := mustGet(t, m, "/a").KV.GetVersion(); v != 3 {
		t.Errorf("/a has version %d, want 3", v)
	}
}

// TestUpdateReadsLargeRecordsItWrote checks that an Update reads back the
// large records it wrote itself, which neither the key index (it keeps no
// large record) nor Pebble (the data batch is not indexed) can answer:
// adds on counters written earlier in the same Update, one with a record
// over maxCachedValue (leading zeros), one deleted since.
func TestUpdateReadsLargeRecordsItWrote(t *testing.T) {
	m := open(t, t.TempDir(), nil)
	defer m.Close()
	entry := func(index uint64, ops ...*storev1.Op) sm.Entry {
		t.Helper()
		cmd, err := EncodeEntry(&storev1.Proposal{
			TxnId: fmt.Sprintf("txn-%d", index), NowUnixNanos: int64(index), DedupeWindowNanos: 1000,
			Groups: []*storev1.Group{{Ops: ops}}, GroupIndexes: []uint32{0},
		})
		if err != nil {
			t.Fatal(err)
		}
		return sm.Entry{Index: index, Cmd: cmd}
	}
	add := func(key string) *storev1.Op {
		return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: key, Delta: 1, Max: 1 << 40}}}
	}
	large := strings.Repeat("0", 2*maxCachedValue) + "5"
	out := update(t, m,
		putEntry(t, 1, "/c", large),
		putEntry(t, 2, "/d", large),
		entry(3, &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: "/d"}}}),
		entry(4, add("/c"), add("/d")),
	)
	outs, err := DecodeResult(out[3].Result)
	if err != nil {
		t.Fatal(err)
	}
	if g := outs[0].GetGroups()[0]; !g.GetCommitted() {
		t.Fatalf("adds failed: %v", g.GetFailure())
	}
	for k, want := range map[string]string{"/c": "6", "/d": "1"} {
		if kv := mustGet(t, m, k).KV; string(kv.GetValue()) != want || kv.GetVersion() != 4 {
			t.Errorf("%s = %q at version %d, want %q at 4", k, kv.GetValue(), kv.GetVersion(), want)
		}
	}
}

// TestExpiryGroupsOverOldFormat: a replica whose directory holds the
// expiry index as binaries before groups wrote it (one x<expiry><id> per
// outcome, as entries of one proposal still write it) opens, applies
// entries of many proposals (one index entry each), and forgets every
// outcome of both forms once their windows end; its storage stays the
// same as engine.ApplyEntry's on memory.
func TestExpiryGroupsOverOldFormat(t *testing.T) {
	dir := t.TempDir()
	ref := engine.NewMemStorage()
	m := open(t, dir, nil)
	index := uint64(0)
	// apply applies one entry of proposals at time now, with txn ids
	// name-0, name-1, ..., to m and to ref.
	apply := func(name string, n int, now int64) {
		t.Helper()
		var ps []*storev1.Proposal
		for i := range n {
			ps = append(ps, &storev1.Proposal{
				TxnId:             fmt.Sprintf("%s-%d", name, i),
				NowUnixNanos:      now,
				DedupeWindowNanos: 10e9,
				Groups:            []*storev1.Group{{Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/k", Value: []byte(name)}}}}}},
				GroupIndexes:      []uint32{0},
			})
		}
		if n == 0 {
			ps = append(ps, &storev1.Proposal{NowUnixNanos: now})
		}
		if _, err := engine.ApplyEntry(ref, ps); err != nil {
			t.Fatal(err)
		}
		cmd, err := EncodeEntry(ps...)
		if err != nil {
			t.Fatal(err)
		}
		index++
		update(t, m, sm.Entry{Index: index, Cmd: cmd})
	}
	count := func(prefix byte) int {
		n := 0
		for _, kv := range rawContents(t, m) {
			if kv.k[0] == prefix {
				n++
			}
		}
		return n
	}
	for i := range 5 {
		apply(fmt.Sprintf("old%d", i), 1, 1e9)
	}
	if got := count('x'); got != 5 {
		t.Fatalf("%d expiry index entries after 5 entries of one proposal, want 5", got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = open(t, dir, nil)
	defer func() { m.Close() }()
	apply("new", 40, 2e9)
	apply("new2", 3, 3e9)
	if got := count('x'); got != 5+2 {
		t.Fatalf("%d expiry index entries, want 5 old and 2 groups", got)
	}
	if got := count('t'); got != 5+43 {
		t.Fatalf("%d remembered outcomes, want 48", got)
	}
	check := func(when string) {
		t.Helper()
		want := []rawKV{}
		_ = ref.Scan(nil, nil, func(k, v []byte) bool {
			want = append(want, rawKV{bytes.Clone(k), bytes.Clone(v)})
			return true
		})
		var got []rawKV
		for _, kv := range rawContents(t, m) {
			if !bytes.Equal(kv.k, engine.AppliedIndexKey()) {
				got = append(got, kv)
			}
		}
		if d := diffRaw(want, got); d != "" {
			t.Fatalf("%s: storage differs from engine.ApplyEntry's:%s", when, d)
		}
	}
	check("before expiry")
	apply("", 0, 20e9)
	if a, b := count('t'), count('x'); a != 0 || b != 0 {
		t.Fatalf("after every window: %d remembered outcomes, %d expiry index entries", a, b)
	}
	check("after expiry")
}
