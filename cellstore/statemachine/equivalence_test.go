package statemachine

import (
	"bytes"
	"fmt"
	"github.com/cockroachdb/pebble/v2/vfs"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Property test: the state machine (Pebble, keyIndex, combined metadata
// writes, batched Update, restarts, crashes, snapshots) behaves exactly like
// engine.Apply on engine.MemStorage, one proposal at a time. A seeded
// random sequence of proposals (commits, cross-shard phases, backups'
// freezes and thaws) goes to
//
//	(a) the reference: engine.Apply on a MemStorage;
//	(b) a state machine, one entry per Update;
//	(c) a state machine, random batches of 1..50 entries per Update;
//	(d) a state machine in random batches that is restarted (Sync, Close,
//	    Open), crashed (Close without Sync, Open, replay the entries after
//	    its applied index, as Dragonboat would) and once left behind and
//	    caught up by RecoverFromSnapshot from (b).
//
// Every entry's outcome must be the same everywhere (replays included), and
// at checkpoints the user keys, revision, change log and the raw storage
// contents (all but the Raft applied index) must be the same as the
// reference's.

const (
	eqSeed       = 20260611
	eqEntries    = 2000
	eqCheckEvery = 100
	eqMaxBatch   = 50
	// A slow clock from eqBurstFrom lets remembered outcomes pile up; at
	// eqBurstTo the clock jumps past all their windows, so more than one
	// Apply's worth (256) expire together.
	eqBurstFrom, eqBurstTo = 700, 1200
	// (d) stops applying after eqSnapFrom and catches up at eqSnapAt from a
	// snapshot of (b).
	eqSnapFrom, eqSnapAt = 1040, 1090
	eqRejectedCmd        = "\xff\xff"
)

var (
	// (d) crashes at the first batch it applies at or after each of these.
	eqCrashAt = []uint64{450, 1130, 1620}
	// Log retention by 250-entry segment (0: the engine default, which lets
	// the log grow so that the next small retention trims in bounded steps).
	eqRetention = []uint64{20, 5, 0, 3, 50, 150, 0, 4}
	eqCounters  = []string{"/n/0", "/n/1", "/n/2", "/n/3", "/n/4", "/n/5"}
)

// eqKind is how a proposal uses its txn_id.
type eqKind int

const (
	kindNoTxn eqKind = iota // no txn_id
	kindFresh               // a new txn_id
	kindRetry               // an earlier proposal again, same content
	kindReuse               // an earlier txn_id with different content
)

// countingStorage is the reference storage; it counts deletes by key
// family to see what housekeeping each Apply did.
type countingStorage struct {
	*engine.MemStorage
	deletes map[byte]int
}

func (c countingStorage) Delete(key []byte) error {
	c.deletes[key[0]]++
	return c.MemStorage.Delete(key)
}

// eqStats counts what the sequence exercised.
type eqStats struct {
	kinds                            [4]int
	dupHits, retryExpired            int // retries answered from memory / applied again
	reuseRejected, reuseExpired      int
	reasons                          map[storev1.FailureReason]int
	committedGroups, noWrite         int
	rejectedEntries                  int
	largeValues, boundaryValues      int // puts of records > 64 bytes / of 60..70 bytes
	readsOfLarge                     int // adds and conditions on keys with records > 64 bytes
	expiredRecords, staleExpiryIndex int
	fullExpiryScans                  int // Applies that expired the maximum (256)
	trimmedLog, fullTrims            int // log entries trimmed / Applies that trimmed the maximum (64)
	cBatches, dBatches               int
	freezesHeld, thawsHeld           int // FREEZE and THAW outcomes saying the freeze held
	freezesRefused, thawsLapsed      int // FREEZE refused (another held, or void); THAW of a lapsed freeze
	frozenRefusals, admitted         int // APPLY and PREPARE refused while frozen; admitted PREPAREs
	snapshotFreezes                  int // snapshots carrying a freeze record
	restarts, crashes, lost          int
	replayed, snapshots              int
}

// eqGen makes the proposals. It reads the reference state so that
// conditions and deletes hit often enough to matter.
type eqGen struct {
	rng     *rand.Rand
	ref     engine.Storage
	keys    []string
	now     int64
	nextTxn int
	txns    []*storev1.Proposal // proposals with a fresh txn_id, oldest first
	// prepared are cross-shard transactions prepared and not resolved.
	prepared []*storev1.Proposal
	// freezeID names the last freeze proposed and not thawed; freezes
	// counts the freezes named.
	freezeID string
	freezes  int
	stats    *eqStats
}

func newEqGen(rng *rand.Rand, ref engine.Storage, stats *eqStats) *eqGen {
	g := &eqGen{rng: rng, ref: ref, now: 1_700_000_000 * 1e9, stats: stats}
	for _, p := range []string{"/a/", "/b/", "/c/"} {
		for i := range 8 {
			g.keys = append(g.keys, p+strconv.Itoa(i))
		}
	}
	g.keys = append(g.keys, eqCounters...)
	return g
}

func (g *eqGen) next(i int) (*storev1.Proposal, eqKind) {
	now := g.tick(i)
	burst := i >= eqBurstFrom && i < eqBurstTo
	kind := kindFresh
	if r := g.rng.IntN(100); burst {
		if r < 8 && len(g.txns) > 0 {
			kind = kindRetry
		}
	} else {
		switch {
		case r < 12:
			kind = kindNoTxn
		case r < 32 && len(g.txns) > 0:
			kind = kindRetry
		case r < 38 && len(g.txns) > 0:
			kind = kindReuse
		}
	}
	if p := g.freeze(i); p != nil {
		p.NowUnixNanos = now
		return p, kindFresh
	}
	if p := g.crossShard(burst); p != nil {
		p.NowUnixNanos = now
		p.LogRetention = eqRetention[(i-1)/250%len(eqRetention)]
		return p, kindFresh
	}
	var p *storev1.Proposal
	if kind == kindRetry {
		p = proto.Clone(g.earlierTxn()).(*storev1.Proposal)
	} else {
		p = g.request()
		p.DedupeWindowNanos = g.window(burst)
		switch kind {
		case kindFresh:
			g.nextTxn++
			p.TxnId = fmt.Sprintf("txn-%04d", g.nextTxn)
			g.txns = append(g.txns, p)
		case kindReuse:
			p.TxnId = g.earlierTxn().GetTxnId()
		}
	}
	p = proto.Clone(p).(*storev1.Proposal)
	p.NowUnixNanos = now
	p.LogRetention = eqRetention[(i-1)/250%len(eqRetention)]
	return p, kind
}

// crossShard now and then returns a cross-shard transaction's
// PREPARE (its groups leave intents and reservations), the RESOLVE of
// one prepared earlier, committing all its groups, some or none, or a
// FENCE of one prepared or not; nil otherwise.
func (g *eqGen) crossShard(burst bool) *storev1.Proposal {
	if burst {
		return nil
	}
	switch r := g.rng.IntN(100); {
	case r < 6:
		p := g.request()
		g.nextTxn++
		p.TxnId = fmt.Sprintf("x-%04d", g.nextTxn)
		p.Phase = storev1.Phase_PHASE_PREPARE
		p.DedupeWindowNanos = g.window(false)
		p.DeadlineUnixNanos = g.now + g.rng.Int64N(5e9)
		// While a freeze may hold, some prepares come admitted (their
		// transaction prepared elsewhere before the freeze there).
		p.Admit = g.rng.IntN(3) == 0
		g.prepared = append(g.prepared, p)
		return proto.Clone(p).(*storev1.Proposal)
	case r < 12 && len(g.prepared) > 0:
		i := g.rng.IntN(len(g.prepared))
		prep := g.prepared[i]
		g.prepared = slices.Delete(g.prepared, i, i+1)
		d := &storev1.Decision{}
		for _, gi := range prep.GetGroupIndexes() {
			if g.rng.IntN(3) > 0 {
				d.CommittedGroups = append(d.CommittedGroups, gi)
			}
		}
		return &storev1.Proposal{TxnId: prep.GetTxnId(), Phase: storev1.Phase_PHASE_RESOLVE, Decision: d,
			DedupeWindowNanos: prep.GetDedupeWindowNanos(), Outcome: &storev1.Outcome{}}
	case r < 14:
		// A fence of the next transaction (it will not prepare) or of
		// one prepared (it tells its prepare).
		id := fmt.Sprintf("x-%04d", g.nextTxn+1)
		if len(g.prepared) > 0 && g.rng.IntN(2) == 0 {
			id = g.prepared[g.rng.IntN(len(g.prepared))].GetTxnId()
		}
		return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_FENCE, DedupeWindowNanos: g.window(false)}
	}
	return nil
}

// freeze now and then returns a backup's FREEZE (a new freeze, now and
// then one that ends before it starts, or the current one again, or
// another while one holds) or THAW (of the current freeze, or of another);
// nil otherwise. None come near the burst, whose refusals would keep
// remembered outcomes from piling up.
func (g *eqGen) freeze(i int) *storev1.Proposal {
	if i >= eqBurstFrom-100 && i < eqBurstTo {
		return nil
	}
	switch r := g.rng.IntN(100); {
	case r < 2:
		id := g.freezeID
		if id == "" || g.rng.IntN(4) > 0 {
			g.freezes++
			id = fmt.Sprintf("backup-%d", g.freezes)
		}
		g.freezeID = id
		until := g.now + g.rng.Int64N(8e9)
		if g.rng.IntN(10) == 0 {
			until = g.now - g.rng.Int64N(1e9)
		}
		return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_FREEZE, FreezeUntilUnixNanos: until}
	case r < 4 && g.freezeID != "":
		id := g.freezeID
		if g.rng.IntN(5) == 0 {
			id = fmt.Sprintf("backup-%d", g.rng.IntN(g.freezes+1))
		}
		if id == g.freezeID {
			g.freezeID = ""
		}
		return &storev1.Proposal{TxnId: id, Phase: storev1.Phase_PHASE_THAW}
	}
	return nil
}

// tick moves the proposers' clock forward irregularly; now and then a
// proposer lags behind.
func (g *eqGen) tick(i int) int64 {
	switch {
	case i >= eqBurstFrom && i < eqBurstTo:
		g.now += g.rng.Int64N(2e6)
	case i == eqBurstTo:
		g.now += 10e9
	default:
		switch r := g.rng.IntN(100); {
		case r < 10: // same instant
		case r < 75:
			g.now += g.rng.Int64N(300e6)
		case r < 95:
			g.now += g.rng.Int64N(2e9)
		default:
			g.now += 2e9 + g.rng.Int64N(6e9)
		}
	}
	if g.rng.IntN(15) == 0 {
		return g.now - g.rng.Int64N(3e9)
	}
	return g.now
}

func (g *eqGen) window(burst bool) int64 {
	if burst {
		return 1e9 + g.rng.Int64N(2e9)
	}
	switch r := g.rng.IntN(200); {
	case r < 20:
		return 0
	case r == 20:
		return math.MaxInt64
	default:
		return 100e6 + g.rng.Int64N(4900e6)
	}
}

// earlierTxn picks an earlier proposal with a txn_id, mostly a recent one
// (likely still remembered), sometimes an older one (likely expired).
func (g *eqGen) earlierTxn() *storev1.Proposal {
	n := len(g.txns)
	switch r := g.rng.IntN(10); {
	case r < 4:
		return g.txns[n-1]
	case r < 7:
		return g.txns[n-1-g.rng.IntN(min(n, 5))]
	default:
		return g.txns[n-1-g.rng.IntN(min(n, 60))]
	}
}

func (g *eqGen) request() *storev1.Proposal {
	p := &storev1.Proposal{RequestHash: g.rng.Uint64()}
	n := 1
	switch r := g.rng.IntN(100); {
	case r < 2:
		n = 0
	case r < 50:
		n = 1
	default:
		n = 2 + g.rng.IntN(3)
	}
	p.Atomic = n > 1 && g.rng.IntN(5) < 2
	ix := uint32(g.rng.IntN(3))
	for range n {
		p.Groups = append(p.Groups, g.group())
		p.GroupIndexes = append(p.GroupIndexes, ix)
		ix += 1 + uint32(g.rng.IntN(2))
	}
	return p
}

func (g *eqGen) group() *storev1.Group {
	gr := &storev1.Group{}
	nc := 0
	switch r := g.rng.IntN(10); {
	case r < 3:
		nc = 1
	case r < 5:
		nc = 2
	}
	for range nc {
		k := g.someKey()
		v, rec := g.version(k)
		if len(rec) > maxCachedValue {
			g.stats.readsOfLarge++
		}
		switch r := g.rng.IntN(100); {
		case r < 55: // the current version
		case r < 75:
			v = 0
		default:
			v += 1 + uint64(g.rng.IntN(3))
		}
		gr.Conditions = append(gr.Conditions, &storev1.Condition{Key: k, Version: v})
	}
	nops := 1 + g.rng.IntN(3)
	if g.rng.IntN(15) == 0 {
		nops = 0
	}
	for range nops {
		gr.Ops = append(gr.Ops, g.op())
	}
	return gr
}

func (g *eqGen) op() *storev1.Op {
	switch r := g.rng.IntN(100); {
	case r < 38:
		k := g.key()
		v := g.value(k)
		if n := len(v) + 2; n > maxCachedValue {
			g.stats.largeValues++
		} else if n >= 60 {
			g.stats.boundaryValues++
		}
		return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: v}}}
	case r < 58:
		return &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: g.someKey()}}}
	case r < 99:
		k := g.key()
		if g.rng.IntN(10) < 7 {
			k = eqCounters[g.rng.IntN(len(eqCounters))]
		}
		if _, rec := g.version(k); len(rec) > maxCachedValue {
			g.stats.readsOfLarge++
		}
		add := &storev1.Add{Key: k, Delta: int64(g.rng.IntN(13) - 6)}
		switch r := g.rng.IntN(100); {
		case r < 2:
			add.Delta = math.MaxInt64
		case r < 4:
			add.Delta = math.MinInt64
		}
		switch r := g.rng.IntN(4); r {
		case 0, 1:
			add.Min, add.Max = -10, 10
		case 2:
			add.Min, add.Max = 0, 50
		default:
			add.Min, add.Max = math.MinInt64, math.MaxInt64
		}
		return &storev1.Op{Op: &storev1.Op_Add{Add: add}}
	default:
		return &storev1.Op{} // no operation set: MALFORMED
	}
}

// value is a value for key k: counters mostly get decimal numbers
// (sometimes long ones with leading zeros, which the index does not cache),
// other keys small or large values around and beyond the index's limit.
func (g *eqGen) value(k string) []byte {
	counter := strings.HasPrefix(k, "/n/")
	r := g.rng.IntN(100)
	switch {
	case counter && r < 70, !counter && r < 10:
		return strconv.AppendInt(nil, int64(g.rng.IntN(31)-15), 10)
	case counter && r < 80:
		return []byte("x" + strconv.Itoa(g.rng.IntN(100)))
	case counter && r < 90:
		return []byte(strings.Repeat("0", 60+g.rng.IntN(40)) + strconv.Itoa(g.rng.IntN(10)))
	case !counter && r < 14:
		return nil // an empty value: the record is the version alone
	case !counter && r < 55:
		return []byte("v" + strconv.Itoa(g.rng.IntN(1000)))
	}
	n := 70 + g.rng.IntN(230)
	if g.rng.IntN(2) == 0 {
		n = 58 + g.rng.IntN(12) // records of 60..71 bytes: both sides of the limit
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + g.rng.IntN(26))
	}
	return b
}

func (g *eqGen) key() string { return g.keys[g.rng.IntN(len(g.keys))] }

// someKey is an existing key half of the time (when there is one).
func (g *eqGen) someKey() string {
	if g.rng.IntN(2) == 0 {
		var existing []string
		lo, hi := engine.DataBounds("")
		_ = g.ref.Scan(lo, hi, func(k, _ []byte) bool {
			existing = append(existing, engine.UserKey(k))
			return true
		})
		if len(existing) > 0 {
			return existing[g.rng.IntN(len(existing))]
		}
	}
	return g.key()
}

func (g *eqGen) version(k string) (uint64, []byte) {
	rec, _ := g.ref.Get(engine.DataKey(k))
	if rec == nil {
		return 0, nil
	}
	v, _, _ := engine.DecodeRecord(rec)
	return v, rec
}

// eqHarness holds the sequence and the reference's outcomes.
type eqHarness struct {
	t     *testing.T
	ref   countingStorage
	cmds  [][]byte
	props []*storev1.Proposal // nil for undecodable entries
	wants []*storev1.Outcome  // nil for undecodable entries
	stats *eqStats
}

func (h *eqHarness) fatalf(i uint64, format string, args ...any) {
	h.t.Helper()
	msg := fmt.Sprintf(format, args...)
	h.t.Fatalf("seed %d, entry %d: %s\nproposal: %s", eqSeed, i, msg, prototext.Format(h.props[i]))
}

// applyRef applies entry i to the reference and records what it did.
func (h *eqHarness) applyRef(i uint64, kind eqKind) {
	p, st := h.props[i], h.stats
	if p == nil {
		st.rejectedEntries++
		return
	}
	clear(h.ref.deletes)
	res, err := engine.Apply(h.ref, p)
	if err != nil {
		h.t.Fatalf("reference apply of entry %d: %v", i, err)
	}
	h.wants[i] = res.Outcome
	out := res.Outcome
	switch p.GetPhase() {
	case storev1.Phase_PHASE_FREEZE:
		if out.GetFrozen() {
			st.freezesHeld++
		} else {
			st.freezesRefused++
		}
		return
	case storev1.Phase_PHASE_THAW:
		if out.GetFrozen() {
			st.thawsHeld++
		} else {
			st.thawsLapsed++
		}
		return
	}
	if out.GetFrozen() {
		st.frozenRefusals++
		return
	}
	if p.GetAdmit() && out.GetTxnState() == storev1.TxnState_TXN_STATE_PREPARED && !out.GetDuplicate() {
		if f, err := engine.ReadFreezeStatus(h.ref); err != nil {
			h.t.Fatal(err)
		} else if f.Frozen() {
			st.admitted++
		}
	}
	st.kinds[kind]++
	switch {
	case kind == kindRetry && out.GetDuplicate():
		st.dupHits++
	case kind == kindRetry:
		st.retryExpired++
	case kind == kindReuse && out.GetDuplicate():
		st.reuseRejected++
	case kind == kindReuse:
		st.reuseExpired++
	}
	if !out.GetDuplicate() && res.Changes == nil {
		st.noWrite++
	}
	for _, g := range out.GetGroups() {
		if g.GetCommitted() {
			st.committedGroups++
		} else {
			st.reasons[g.GetFailure().GetReason()]++
		}
	}
	d := h.ref.deletes
	st.expiredRecords += d[engine.TxnPrefix]
	st.staleExpiryIndex += d['x'] - d[engine.TxnPrefix]
	if d['x'] == 256 {
		st.fullExpiryScans++
	}
	st.trimmedLog += d['l']
	if d['l'] == 64 {
		st.fullTrims++
	}
}

// update applies entries [from, to] to m in one Update and checks each
// outcome against the reference. It returns the outcomes (nil for
// undecodable entries).
func (h *eqHarness) update(who string, m *StateMachine, from, to uint64) []*storev1.Outcome {
	h.t.Helper()
	entries := make([]sm.Entry, 0, to-from+1)
	for i := from; i <= to; i++ {
		entries = append(entries, sm.Entry{Index: i, Cmd: h.cmds[i]})
	}
	res, err := m.Update(entries)
	if err != nil {
		h.t.Fatalf("%s: update [%d, %d]: %v", who, from, to, err)
	}
	if len(res) != len(entries) {
		h.t.Fatalf("%s: update [%d, %d] returned %d entries", who, from, to, len(res))
	}
	outs := make([]*storev1.Outcome, len(res))
	for j, e := range res {
		want := h.wants[e.Index]
		if want == nil {
			if e.Result.Value != ResultRejected {
				h.fatalf(e.Index, "%s: undecodable entry gave result %d", who, e.Result.Value)
			}
			continue
		}
		decoded, err := DecodeResult(e.Result)
		if err != nil || len(decoded) != 1 {
			h.fatalf(e.Index, "%s: %d outcomes (%v)", who, len(decoded), err)
		}
		got := decoded[0]
		if !proto.Equal(got, want) {
			h.fatalf(e.Index, "%s (batch [%d, %d]): outcome differs from the engine's\n got: %s\nwant: %s",
				who, from, to, prototext.Format(got), prototext.Format(want))
		}
		outs[j] = got
	}
	if m.AppliedIndex() != to {
		h.t.Fatalf("%s: applied index %d after update [%d, %d]", who, m.AppliedIndex(), from, to)
	}
	return outs
}

type rawKV struct{ k, v []byte }

// rawContents is every key of m's database (the applied index included).
func rawContents(t *testing.T, m *StateMachine) []rawKV {
	t.Helper()
	m.mu.RLock()
	defer m.mu.RUnlock()
	it, err := m.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []rawKV
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, rawKV{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (h *eqHarness) refRaw() []rawKV {
	var out []rawKV
	_ = h.ref.Scan(nil, nil, func(k, v []byte) bool {
		out = append(out, rawKV{bytes.Clone(k), bytes.Clone(v)})
		return true
	})
	return out
}

func (h *eqHarness) refMeta(key []byte) uint64 {
	b, _ := h.ref.Get(key)
	v, err := engine.DecodeUint64(b)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

func (h *eqHarness) refKVs() []*storev1.KeyValue {
	var kvs []*storev1.KeyValue
	lo, hi := engine.DataBounds("")
	_ = h.ref.Scan(lo, hi, func(k, rec []byte) bool {
		ver, val, err := engine.DecodeRecord(rec)
		if err != nil {
			h.t.Fatal(err)
		}
		kvs = append(kvs, &storev1.KeyValue{Key: engine.UserKey(k), Value: bytes.Clone(val), Version: ver})
		return true
	})
	return kvs
}

func (h *eqHarness) refLog() []LogEntry {
	var log []LogEntry
	_ = h.ref.Scan([]byte{'l'}, []byte{'m'}, func(k, v []byte) bool {
		cs := &storev1.ChangeSet{}
		if err := proto.Unmarshal(v, cs); err != nil {
			h.t.Fatal(err)
		}
		rev, _ := engine.DecodeUint64(k[1:])
		log = append(log, LogEntry{Revision: rev, Changes: cs})
		return true
	})
	return log
}

// compare checks that m, having applied entries up to i, shows the
// reference's state.
func (h *eqHarness) compare(who string, m *StateMachine, i uint64) {
	h.t.Helper()
	rev := h.refMeta(engine.RevisionKey())
	if m.AppliedIndex() != i || m.Revision() != rev {
		h.t.Fatalf("seed %d, %s at entry %d: applied %d revision %d, want %d and %d", eqSeed, who, i, m.AppliedIndex(), m.Revision(), i, rev)
	}

	r, err := m.Lookup(RangeQuery{Prefix: "", Limit: 1 << 20})
	if err != nil {
		h.t.Fatal(err)
	}
	rr := r.(*RangeResult)
	want := h.refKVs()
	same := len(rr.KVs) == len(want) && !rr.More && rr.Revision == rev
	for j := 0; same && j < len(want); j++ {
		same = proto.Equal(rr.KVs[j], want[j])
	}
	if !same {
		h.t.Fatalf("seed %d, %s at entry %d: user state differs\n got (rev %d, more %v): %v\nwant (rev %d): %v", eqSeed, who, i, rr.Revision, rr.More, rr.KVs, rev, want)
	}

	log, err := m.ReadLog(1, 1<<20)
	if err != nil {
		h.t.Fatal(err)
	}
	wantLog := h.refLog()
	oldest := h.refMeta(engine.LogStartKey())
	same = log.Oldest == oldest && log.Current == rev && len(log.Entries) == len(wantLog)
	for j := 0; same && j < len(wantLog); j++ {
		same = log.Entries[j].Revision == wantLog[j].Revision && proto.Equal(log.Entries[j].Changes, wantLog[j].Changes)
	}
	if !same {
		h.t.Fatalf("seed %d, %s at entry %d: change log differs: got %d entries oldest %d current %d, want %d entries oldest %d current %d",
			eqSeed, who, i, len(log.Entries), log.Oldest, log.Current, len(wantLog), oldest, rev)
	}

	raw := rawContents(h.t, m)
	applied := engine.AppliedIndexKey()
	var got []rawKV
	for _, kv := range raw {
		if bytes.Equal(kv.k, applied) {
			if !bytes.Equal(kv.v, engine.EncodeUint64(i)) {
				h.t.Fatalf("seed %d, %s at entry %d: stored applied index %x", eqSeed, who, i, kv.v)
			}
			continue
		}
		got = append(got, kv)
	}
	if d := diffRaw(h.refRaw(), got); d != "" {
		h.t.Fatalf("seed %d, %s at entry %d: raw storage differs from the engine's:%s", eqSeed, who, i, d)
	}
}

func diffRaw(want, got []rawKV) string {
	var sb strings.Builder
	n := 0
	for i, j := 0, 0; (i < len(want) || j < len(got)) && n < 10; {
		switch {
		case j == len(got) || (i < len(want) && bytes.Compare(want[i].k, got[j].k) < 0):
			fmt.Fprintf(&sb, "\n  missing %q = %x", want[i].k, want[i].v)
			i, n = i+1, n+1
		case i == len(want) || bytes.Compare(want[i].k, got[j].k) > 0:
			fmt.Fprintf(&sb, "\n  extra %q = %x", got[j].k, got[j].v)
			j, n = j+1, n+1
		default:
			if !bytes.Equal(want[i].v, got[j].v) {
				fmt.Fprintf(&sb, "\n  %q = %x, want %x", got[j].k, got[j].v, want[i].v)
				n++
			}
			i, j = i+1, j+1
		}
	}
	return sb.String()
}

func openEq(t *testing.T, dir string) *StateMachine {
	t.Helper()
	m := New(Config{Dir: dir, Logger: zap.NewNop()}, 0)
	if _, err := m.Open(nil); err != nil {
		t.Fatal(err)
	}
	return m
}

// eqTroubled is replica (d).
type eqTroubled struct {
	h       *eqHarness
	rng     *rand.Rand
	dir     string
	fs      *vfs.MemFS // crashable: a crash keeps only what was synced
	m       *StateMachine
	next    uint64 // first entry not yet handed to Update
	target  int    // size of the next batch
	durable uint64 // applied index as of the last Sync, Open or recovery
	crashes int    // eqCrashAt points done
	first   map[uint64]*storev1.Outcome
}

// apply applies entries [from, to] in random batches, checking that
// entries applied before (and lost in a crash) give the same outcome again.
func (d *eqTroubled) apply(from, to uint64) {
	d.h.t.Helper()
	for from <= to {
		end := min(to, from+uint64(d.rng.IntN(eqMaxBatch)))
		outs := d.h.update("(d)", d.m, from, end)
		d.h.stats.dBatches++
		for j, o := range outs {
			i := from + uint64(j)
			if prev, ok := d.first[i]; ok {
				d.h.stats.replayed++
				if !proto.Equal(prev, o) {
					d.h.fatalf(i, "(d): replay gave\n%s\nthe first time:\n%s", prototext.Format(o), prototext.Format(prev))
				}
			} else {
				d.first[i] = o
			}
		}
		from = end + 1
	}
}

func (d *eqTroubled) reopen() uint64 {
	d.h.t.Helper()
	d.m = New(Config{Dir: d.dir, Logger: zap.NewNop(), FS: d.fs}, 0)
	applied, err := d.m.Open(nil)
	if err != nil {
		d.h.t.Fatal(err)
	}
	if applied != d.m.AppliedIndex() {
		d.h.t.Fatalf("(d): Open returned %d, AppliedIndex %d", applied, d.m.AppliedIndex())
	}
	return applied
}

// step is called after entry i went to the reference and to (b).
func (d *eqTroubled) step(i uint64, b *StateMachine, checkpoint bool) {
	t, st := d.h.t, d.h.stats
	t.Helper()
	switch {
	case i > eqSnapFrom && i < eqSnapAt:
		return // left behind
	case i == eqSnapAt:
		ctx, err := b.PrepareSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := b.SaveSnapshot(ctx, &buf, make(chan struct{})); err != nil {
			t.Fatal(err)
		}
		if err := d.m.RecoverFromSnapshot(&buf, make(chan struct{})); err != nil {
			t.Fatal(err)
		}
		st.snapshots++
		if f, err := engine.ReadFreezeStatus(d.h.ref); err == nil && f.Freeze != nil {
			st.snapshotFreezes++
		}
		d.next, d.durable = i+1, i
		d.h.compare("(d) after snapshot recovery", d.m, i)
		return
	}
	if int(i-d.next+1) < d.target && !checkpoint && i != eqSnapFrom {
		return
	}
	d.apply(d.next, i)
	d.next, d.target = i+1, 1+d.rng.IntN(eqMaxBatch)

	if d.crashes < len(eqCrashAt) && i >= eqCrashAt[d.crashes] {
		// Crash: whatever was not synced is gone; Dragonboat replays the
		// entries after the applied index the database kept.
		d.crashes++
		st.crashes++
		crashed := d.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		if err := d.m.Close(); err != nil {
			t.Fatal(err)
		}
		d.fs = crashed
		applied := d.reopen()
		if applied < d.durable || applied > i {
			t.Fatalf("seed %d, (d): after a crash at entry %d the applied index is %d, last made durable at %d", eqSeed, i, applied, d.durable)
		}
		st.lost += int(i - applied)
		d.durable = applied
		d.apply(applied+1, i)
		d.h.compare("(d) after crash and replay", d.m, i)
		return
	}
	switch r := d.rng.IntN(100); {
	case r < 10:
		if err := d.m.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := d.m.Close(); err != nil {
			t.Fatal(err)
		}
		st.restarts++
		if applied := d.reopen(); applied != i {
			t.Fatalf("seed %d, (d): synced at entry %d, reopened at %d", eqSeed, i, applied)
		}
		d.durable = i
		d.h.compare("(d) after restart", d.m, i)
	case r < 20:
		if err := d.m.Sync(); err != nil {
			t.Fatal(err)
		}
		d.durable = i
	}
}

func TestEquivalenceWithEngine(t *testing.T) {
	stats := &eqStats{reasons: map[storev1.FailureReason]int{}}
	h := &eqHarness{
		t:     t,
		ref:   countingStorage{engine.NewMemStorage(), map[byte]int{}},
		cmds:  make([][]byte, eqEntries+1),
		props: make([]*storev1.Proposal, eqEntries+1),
		wants: make([]*storev1.Outcome, eqEntries+1),
		stats: stats,
	}
	gen := newEqGen(rand.New(rand.NewPCG(eqSeed, 1)), h.ref, stats)
	hrng := rand.New(rand.NewPCG(eqSeed, 2)) // batch sizes, restarts

	b := openEq(t, t.TempDir())
	defer func() { b.Close() }()
	c := openEq(t, t.TempDir())
	defer func() { c.Close() }()
	d := &eqTroubled{h: h, rng: hrng, dir: "/d", fs: vfs.NewCrashableMem(), next: 1, target: 1, first: map[uint64]*storev1.Outcome{}}
	d.reopen()
	defer func() { d.m.Close() }()

	cNext, cTarget := uint64(1), 1+hrng.IntN(eqMaxBatch)
	for n := 1; n <= eqEntries; n++ {
		i := uint64(n)
		p, kind := gen.next(n)
		if gen.rng.IntN(150) == 0 {
			h.cmds[i] = []byte(eqRejectedCmd)
		} else {
			h.props[i] = p
			var err error
			if h.cmds[i], err = EncodeEntry(p); err != nil {
				t.Fatal(err)
			}
		}
		h.applyRef(i, kind)

		h.update("(b)", b, i, i)

		checkpoint := n%eqCheckEvery == 0 || n == eqEntries
		if int(i-cNext+1) >= cTarget || checkpoint {
			h.update("(c)", c, cNext, i)
			stats.cBatches++
			cNext, cTarget = i+1, 1+hrng.IntN(eqMaxBatch)
		}

		d.step(i, b, checkpoint)

		if checkpoint {
			h.compare("(b)", b, i)
			h.compare("(c)", c, i)
			h.compare("(d)", d.m, i)
		}
	}

	t.Logf("kinds (none/fresh/retry/reuse) %v; duplicates %d, retries after expiry %d, reuse rejected %d, reuse after expiry %d",
		stats.kinds, stats.dupHits, stats.retryExpired, stats.reuseRejected, stats.reuseExpired)
	t.Logf("committed groups %d, failures %v, no-write proposals %d, undecodable entries %d",
		stats.committedGroups, stats.reasons, stats.noWrite, stats.rejectedEntries)
	t.Logf("large puts %d, boundary puts %d, reads of large records %d", stats.largeValues, stats.boundaryValues, stats.readsOfLarge)
	t.Logf("expired records %d (stale index entries %d, full scans %d), trimmed log entries %d (full trims %d)",
		stats.expiredRecords, stats.staleExpiryIndex, stats.fullExpiryScans, stats.trimmedLog, stats.fullTrims)
	t.Logf("(c) %d batches; (d) %d batches, %d restarts, %d crashes losing %d entries, %d replayed, %d snapshots",
		stats.cBatches, stats.dBatches, stats.restarts, stats.crashes, stats.lost, stats.replayed, stats.snapshots)
	t.Logf("freezes held %d, refused %d; thaws held %d, lapsed %d; commits refused while frozen %d, prepares admitted %d",
		stats.freezesHeld, stats.freezesRefused, stats.thawsHeld, stats.thawsLapsed, stats.frozenRefusals, stats.admitted)

	// The sequence must have exercised what it is meant to.
	for _, c := range []struct {
		what string
		got  int
		min  int
	}{
		{"duplicate retries", stats.dupHits, 50},
		{"retries after expiry", stats.retryExpired, 10},
		{"txn_id reuse rejected", stats.reuseRejected, 5},
		{"txn_id reuse after expiry", stats.reuseExpired, 5},
		{"committed groups", stats.committedGroups, 500},
		{"VERSION_MISMATCH", stats.reasons[storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH], 20},
		{"BOUND_EXCEEDED", stats.reasons[storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED], 20},
		{"NOT_A_COUNTER", stats.reasons[storev1.FailureReason_FAILURE_REASON_NOT_A_COUNTER], 20},
		{"ABORTED", stats.reasons[storev1.FailureReason_FAILURE_REASON_ABORTED], 20},
		{"TXN_ID_REUSED", stats.reasons[storev1.FailureReason_FAILURE_REASON_TXN_ID_REUSED], 5},
		{"MALFORMED", stats.reasons[storev1.FailureReason_FAILURE_REASON_MALFORMED], 3},
		{"proposals that wrote nothing", stats.noWrite, 20},
		{"undecodable entries", stats.rejectedEntries, 3},
		{"large puts", stats.largeValues, 100},
		{"puts at the cache limit", stats.boundaryValues, 20},
		{"reads of large records", stats.readsOfLarge, 20},
		{"expired records", stats.expiredRecords, 200},
		{"stale expiry index entries", stats.staleExpiryIndex, 1},
		{"expiry scans at the limit", stats.fullExpiryScans, 1},
		{"trimmed log entries", stats.trimmedLog, 200},
		{"log trims at the limit", stats.fullTrims, 1},
		{"(c) batches", stats.cBatches, 40},
		{"(d) restarts", stats.restarts, 1},
		{"(d) crashes", stats.crashes, len(eqCrashAt)},
		{"(d) entries lost in crashes", stats.lost, 1},
		{"(d) replayed entries", stats.replayed, 1},
		{"(d) snapshots", stats.snapshots, 1},
		{"freezes held", stats.freezesHeld, 10},
		{"freezes refused", stats.freezesRefused, 3},
		{"thaws while the freeze held", stats.thawsHeld, 3},
		{"thaws of lapsed or other freezes", stats.thawsLapsed, 3},
		{"commits refused while frozen", stats.frozenRefusals, 50},
		{"prepares admitted while frozen", stats.admitted, 1},
		{"snapshots carrying a freeze", stats.snapshotFreezes, 1},
	} {
		if c.got < c.min {
			t.Errorf("the sequence exercised %s %d times, want at least %d", c.what, c.got, c.min)
		}
	}
}
