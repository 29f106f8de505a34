package engine

import (
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Freezes make consistent backups. A backup's driver proposes FREEZE on
// every shard; while a shard is frozen it refuses new commits: an APPLY,
// or a PREPARE that is not admitted, gets an outcome with Frozen set and
// changes nothing (not even the dedupe table), so that the proposer sends
// it again after the thaw. Remembered outcomes are still answered, and
// RESOLVE and FENCE still apply, so that transactions prepared before the
// freeze finish during it. A PREPARE marked admit (its transaction
// prepared on another participant before that one froze) is admitted
// too: otherwise that transaction would hold its intents, and the backup,
// until recovery fenced it. Once no shard holds a prepared transaction
// and none moves, the shards' states are together one consistent cut of
// the cell: the driver reads them, then proposes THAW (server/backup.go).
//
// The freeze is a metadata record (mfreeze), part of the shard's state
// like any other, with the time it lapses: once the shard's clock (the
// largest proposal time seen) reaches it, the shard is no longer frozen,
// so a driver that dies never leaves it frozen. One freeze at a time: a
// FREEZE naming another while one holds is refused. THAW leaves the
// record lapsed rather than deleting it, and a FREEZE naming the freeze
// recorded lapsed is void: a copy of a FREEZE that reaches the log after
// its backup's THAW (a proposal retried after a timeout) cannot freeze
// the shard again. Every backup attempt names a new freeze.

// FreezeKey is where the shard's freeze record is kept.
func FreezeKey() []byte { return []byte(metaFreeze) }

// FreezeStatus is what a shard's state says about freezes.
type FreezeStatus struct {
	// Freeze is the recorded freeze, nil when there is none (a lapsed one
	// may still be recorded).
	Freeze *storev1.Freeze
	// Clock is the shard's clock, Revision its revision.
	Clock    int64
	Revision uint64
	// Prepared counts the cross-shard transactions prepared on the shard
	// and not resolved.
	Prepared uint64
}

// Frozen reports whether a freeze holds: recorded and not lapsed.
func (f FreezeStatus) Frozen() bool { return holds(f.Freeze, f.Clock) }

// FrozenBy reports whether the freeze named id holds.
func (f FreezeStatus) FrozenBy(id string) bool { return f.Frozen() && f.Freeze.GetId() == id }

func holds(fr *storev1.Freeze, now int64) bool { return fr != nil && now < fr.GetUntilUnixNanos() }

// ReadFreezeStatus reads a shard's freeze status from st.
func ReadFreezeStatus(st Storage) (FreezeStatus, error) {
	var f FreezeStatus
	fr, err := readFreeze(st)
	if err != nil {
		return f, err
	}
	clock, err := readMeta(st, clockKey)
	if err != nil {
		return f, err
	}
	if f.Revision, err = readMeta(st, revisionKey); err != nil {
		return f, err
	}
	if f.Prepared, err = readMeta(st, preparedCountKey); err != nil {
		return f, err
	}
	f.Freeze, f.Clock = fr, int64(clock)
	return f, nil
}

func readFreeze(st Storage) (*storev1.Freeze, error) {
	b, err := st.Get(freezeKey)
	if err != nil || b == nil {
		return nil, err
	}
	fr := &storev1.Freeze{}
	return fr, fr.UnmarshalVT(b)
}

// frozen reports whether the shard refuses new commits at now.
func frozen(st Storage, now int64) (bool, error) {
	fr, err := readFreeze(st)
	return holds(fr, now), err
}

// refused is the outcome of a proposal a frozen shard refuses.
func refused(p *storev1.Proposal, rev uint64) *Result {
	return &Result{Outcome: &storev1.Outcome{GroupIndexes: p.GetGroupIndexes(), Revision: rev, Frozen: true}}
}

// freezeStatusOutcome is the outcome of a FREEZE or THAW: whether the
// freeze named id held, and the shard's revision and prepared count.
func freezeStatusOutcome(st Storage, held bool) (*Result, error) {
	f, err := ReadFreezeStatus(st)
	if err != nil {
		return nil, err
	}
	return &Result{Outcome: &storev1.Outcome{Frozen: held, Revision: f.Revision, Prepared: f.Prepared}}, nil
}

// freeze records the freeze p names, lapsing at p's freeze_until, unless
// another freeze holds. A repeated FREEZE of the same id keeps the first
// one's lapse time. Outcome.Frozen says whether p's freeze holds.
func freeze(st Storage, p *storev1.Proposal, now int64) (*Result, error) {
	cur, err := readFreeze(st)
	if err != nil {
		return nil, err
	}
	switch {
	case holds(cur, now) && cur.GetId() == p.GetTxnId():
		return freezeStatusOutcome(st, true)
	case holds(cur, now) || p.GetTxnId() == "" || cur.GetId() == p.GetTxnId() ||
		!holds(&storev1.Freeze{UntilUnixNanos: p.GetFreezeUntilUnixNanos()}, now):
		// Another backup holds the shard, this one was thawed or lapsed
		// already, or this freeze is void or would have lapsed already.
		return freezeStatusOutcome(st, false)
	}
	b, err := (&storev1.Freeze{Id: p.GetTxnId(), UntilUnixNanos: p.GetFreezeUntilUnixNanos()}).MarshalVT()
	if err != nil {
		return nil, err
	}
	if err := st.Set(freezeKey, b); err != nil {
		return nil, err
	}
	return freezeStatusOutcome(st, true)
}

// thaw lifts the freeze p names (held or lapsed), recording it lapsed at
// now; a freeze of another id stays. Outcome.Frozen says whether p's
// freeze still held until now: if it did, no commit applied on the shard
// since the FREEZE.
func thaw(st Storage, p *storev1.Proposal, now int64) (*Result, error) {
	cur, err := readFreeze(st)
	if err != nil {
		return nil, err
	}
	if cur == nil || cur.GetId() != p.GetTxnId() {
		return freezeStatusOutcome(st, false)
	}
	b, err := (&storev1.Freeze{Id: cur.GetId(), UntilUnixNanos: min(cur.GetUntilUnixNanos(), now)}).MarshalVT()
	if err != nil {
		return nil, err
	}
	if err := st.Set(freezeKey, b); err != nil {
		return nil, err
	}
	res, err := freezeStatusOutcome(st, false)
	if res != nil {
		res.Outcome.Frozen = holds(cur, now)
	}
	return res, err
}
