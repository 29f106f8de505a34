package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Cross-shard transactions commit in two rounds, driven by the store node
// that received the request (see the server package):
//
//  1. PREPARE on every participant shard, in parallel: each group part is
//     checked as an APPLY would (conditions, bounds) against committed
//     state, and on success leaves intents on the keys it reads and
//     writes; nothing becomes visible and the revision does not move. A
//     Prepared record remembers the transaction, its participants, its
//     keys, its prepare outcome and a deadline. The transaction is
//     decided the moment the last participant has prepared: a group
//     commits when every part of it prepared (in an atomic request, when
//     every group did). Settle computes that decision from what the
//     participants know, so the driver and a recovering leader reach the
//     same one; no participant is special (there is no coordinator).
//  2. RESOLVE on every participant, in parallel, before the reply: the
//     intents of the committed groups are applied at a new revision, the
//     others dropped, and the decision is remembered as the txn_id's
//     outcome (which makes retries of the request exactly-once).
//
// FENCE is how a decision is reached without the driver: on a
// participant that has not prepared it records that the transaction is
// fenced there (a later PREPARE fails), so the transaction aborts; on one
// that has, it returns what the shard knows, like a status read.
//
// Intents never block: an access that meets an incompatible intent fails
// at once with FAILURE_REASON_INTENT, naming the key. Reads of a key are
// compatible with each other, and so are counter adds, which reserve
// their delta: an add prepares only if its counter stays within the
// bounds of every add reserved on it whichever of them commit, so two
// concurrent prepares that both fit both succeed, and committing any
// subset of them never leaves a bound.

// intentKey is the storage key of the intents on user key k.
func intentKey(k string) []byte {
	b := make([]byte, 0, len(k)+1)
	b = append(b, prefixIntent)
	return append(b, k...)
}

func preparedKey(id string) []byte {
	b := make([]byte, 0, len(id)+1)
	b = append(b, prefixPrepared)
	return append(b, id...)
}

// deadlineKey indexes prepared transactions by deadline, for recovery.
func deadlineKey(deadline int64, id string) []byte {
	b := make([]byte, 9, 9+len(id))
	b[0] = prefixDeadline
	binary.BigEndian.PutUint64(b[1:], uint64(deadline))
	return append(b, id...)
}

// intents returns the intents on key k.
func intents(st Storage, k string) (*storev1.IntentSet, error) {
	set := &storev1.IntentSet{}
	b, err := st.Get(intentKey(k))
	if err != nil || b == nil {
		return set, err
	}
	return set, set.UnmarshalVT(b)
}

func putIntents(st Storage, k string, set *storev1.IntentSet) error {
	if len(set.GetIntents()) == 0 {
		return st.Delete(intentKey(k))
	}
	b, err := set.MarshalVT()
	if err != nil {
		return err
	}
	return st.Set(intentKey(k), b)
}

// access is how a group touches a key: read (a condition), write (put or
// delete) or add.
type access int

const (
	accessRead access = iota
	accessWrite
	accessAdd
)

func accessOf(in *storev1.Intent) access {
	switch in.GetOp().GetOp().(type) {
	case nil:
		return accessRead
	case *storev1.Op_Add:
		return accessAdd
	default:
		return accessWrite
	}
}

// blocking returns the first intent on k, of another transaction than
// txn (empty: an APPLY, which has no intents of its own), that an access
// of kind a may not pass: reads pass reads, adds pass adds (their bounds
// are checked apart), nothing passes a write.
func blocking(set *storev1.IntentSet, a access) *storev1.Intent {
	for _, in := range set.GetIntents() {
		ia := accessOf(in)
		if ia == a && a != accessWrite {
			continue
		}
		return in
	}
	return nil
}

func intentFailure(k string, in *storev1.Intent) *storev1.Failure {
	return &storev1.Failure{
		Reason:  storev1.FailureReason_FAILURE_REASON_INTENT,
		Key:     k,
		Message: fmt.Sprintf("%q is held by cross-shard transaction %q in progress", k, in.GetTxnId()),
	}
}

// checkIntents fails a group of an APPLY or a PREPARE that accesses a key
// held by an incompatible intent, and checks that adds keep every counter
// within the bounds of the adds reserved on it. pending tells what the
// proposal has written so far, for the counters' current values.
func (a *applier) checkIntents(ov *overlay, g *storev1.Group) (*storev1.Failure, error) {
	for _, c := range g.GetConditions() {
		if f, err := a.checkKey(ov, c.GetKey(), accessRead, nil); f != nil || err != nil {
			return f, err
		}
	}
	for _, op := range g.GetOps() {
		k, acc := opKey(op)
		var add *storev1.Add
		if acc == accessAdd {
			add = op.GetAdd()
		}
		if f, err := a.checkKey(ov, k, acc, add); f != nil || err != nil {
			return f, err
		}
	}
	return nil, nil
}

// checkKey checks one access to k against the intents on it.
func (a *applier) checkKey(ov *overlay, k string, acc access, add *storev1.Add) (*storev1.Failure, error) {
	set, err := a.intentsOf(k)
	if err != nil || len(set.GetIntents()) == 0 {
		return nil, err
	}
	if in := blocking(set, acc); in != nil {
		return intentFailure(k, in), nil
	}
	if add == nil {
		return nil, nil
	}
	cur, version, ok, err := a.counter(ov, k)
	if err != nil || !ok {
		return nil, err // not a counter: the add itself reports NOT_A_COUNTER
	}
	if !reservationsFit(cur, append(reservedAdds(set), add)) {
		return &storev1.Failure{
			Reason:         storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED,
			Key:            k,
			CurrentVersion: version,
			Message:        fmt.Sprintf("counter %q is %d with adds reserved by cross-shard transactions in progress; adding %d could leave a bound", k, cur, add.GetDelta()),
		}, nil
	}
	return nil, nil
}

// intentsOf returns the intents on k, read once per proposal.
func (a *applier) intentsOf(k string) (*storev1.IntentSet, error) {
	if set, ok := a.intents[k]; ok {
		return set, nil
	}
	set, err := intents(a.st, k)
	if err != nil {
		return nil, err
	}
	if a.intents == nil {
		a.intents = map[string]*storev1.IntentSet{}
	}
	a.intents[k] = set
	return set, nil
}

func reservedAdds(set *storev1.IntentSet) []*storev1.Add {
	var out []*storev1.Add
	for _, in := range set.GetIntents() {
		if add := in.GetOp().GetAdd(); add != nil {
			out = append(out, add)
		}
	}
	return out
}

// reservationsFit reports whether, from value cur, every add stays within
// its own bounds whichever of the others have been applied before it: at
// worst all the others that raise the counter, or all that lower it.
func reservationsFit(cur int64, adds []*storev1.Add) bool {
	var up, down int64
	for _, x := range adds {
		if d := x.GetDelta(); d > 0 {
			up += d
		} else {
			down += d
		}
	}
	for _, x := range adds {
		d := x.GetDelta()
		hi, lo := cur+up, cur+down // with x and every other raise (or lowering)
		if d <= 0 {
			hi += d // x lowers: the highest result has x and all raises
		} else {
			lo += d
		}
		if hi > x.GetMax() || lo < x.GetMin() {
			return false
		}
	}
	return true
}

func opKey(op *storev1.Op) (string, access) {
	switch o := op.GetOp().(type) {
	case *storev1.Op_Put:
		return o.Put.GetKey(), accessWrite
	case *storev1.Op_Delete:
		return o.Delete.GetKey(), accessWrite
	case *storev1.Op_Add:
		return o.Add.GetKey(), accessAdd
	}
	return "", accessWrite
}

// prepare evaluates each group part of p and leaves intents for those
// that pass; it writes no user data. A repeated PREPARE of the same
// transaction returns the first one's outcome. A frozen shard refuses a
// new PREPARE unless it is admitted (freeze.go).
func prepare(st Storage, p *storev1.Proposal, now int64) (*Result, error) {
	if rec, err := lookupPrepared(st, p.GetTxnId()); err != nil {
		return nil, err
	} else if rec != nil {
		if rec.GetRequestHash() != p.GetRequestHash() {
			return &Result{Outcome: reused(rec.GetRequestHash(), p)}, nil
		}
		out := proto.Clone(rec.GetOutcome()).(*storev1.Outcome)
		out.Duplicate = true
		return &Result{Outcome: out}, nil
	}
	if rec, err := lookupTxn(st, p.GetTxnId(), now); err != nil {
		return nil, err
	} else if rec != nil && rec.GetRequestHash() != p.GetRequestHash() {
		return &Result{Outcome: reused(rec.GetRequestHash(), p)}, nil
	} else if rec != nil { // resolved or fenced here already
		return &Result{Outcome: remembered(rec, p)}, nil
	}
	rev, err := readMeta(st, revisionKey)
	if err != nil {
		return nil, err
	}
	if frozen, err := frozen(st, now); err != nil || (frozen && !p.GetAdmit()) {
		return refused(p, rev), err
	}
	a := &applier{st: st, rev: rev + 1}
	out := &storev1.Outcome{GroupIndexes: p.GetGroupIndexes(), Revision: rev, Groups: make([]*storev1.GroupResult, len(p.GetGroups())),
		TxnState: storev1.TxnState_TXN_STATE_PREPARED}
	var keys []string
	for i, g := range p.GetGroups() {
		_, f, err := a.try(g, true)
		if err != nil {
			return nil, err
		}
		if f != nil {
			out.Groups[i] = &storev1.GroupResult{Failure: f}
			continue
		}
		out.Groups[i] = &storev1.GroupResult{Committed: true}
		keys = append(keys, a.addIntents(p.GetTxnId(), p.GetGroupIndexes()[i], g)...)
	}
	if p.GetAtomic() && slices.ContainsFunc(out.Groups, func(g *storev1.GroupResult) bool { return !g.Committed }) {
		AbortAll(out.Groups)
		a.intents, keys = nil, nil
	}
	for _, k := range keys {
		if err := putIntents(st, k, a.intents[k]); err != nil {
			return nil, err
		}
	}
	rec := &storev1.Prepared{Participants: p.GetParticipants(), DeadlineUnixNanos: p.GetDeadlineUnixNanos(), Keys: keys,
		Outcome: out, RequestHash: p.GetRequestHash(), Atomic: p.GetAtomic()}
	b, err := rec.MarshalVT()
	if err != nil {
		return nil, err
	}
	if err := st.Set(preparedKey(p.GetTxnId()), b); err != nil {
		return nil, err
	}
	if err := st.Set(deadlineKey(p.GetDeadlineUnixNanos(), p.GetTxnId()), nil); err != nil {
		return nil, err
	}
	return &Result{Outcome: out}, addPrepared(st, 1)
}

// reused is the outcome of a PREPARE whose txn_id this shard knows for
// another request: TXN_ID_REUSED, and the transaction is fenced here.
func reused(hash uint64, p *storev1.Proposal) *storev1.Outcome {
	out := remembered(&storev1.TxnRecord{RequestHash: hash}, p)
	out.TxnState = storev1.TxnState_TXN_STATE_FENCED
	return out
}

// addPrepared counts the transactions prepared and not yet resolved on
// the shard: while there are none, APPLYs need not look for intents.
func addPrepared(st Storage, delta int64) error {
	n, err := readMeta(st, preparedCountKey)
	if err != nil {
		return err
	}
	return st.Set(preparedCountKey, EncodeUint64(uint64(int64(n)+delta)))
}

// addIntents records group g's intents in a.intents and returns the keys
// that gained one (each once).
func (a *applier) addIntents(txn string, group uint32, g *storev1.Group) []string {
	var keys []string
	add := func(k string, op *storev1.Op) {
		set := a.intents[k] // checkIntents read every key of the group
		if !slices.ContainsFunc(set.Intents, func(in *storev1.Intent) bool { return in.GetTxnId() == txn }) {
			keys = append(keys, k)
		}
		set.Intents = append(set.Intents, &storev1.Intent{TxnId: txn, GroupIndex: group, Op: op})
	}
	for _, c := range g.GetConditions() {
		add(c.GetKey(), nil)
	}
	for _, op := range g.GetOps() {
		k, _ := opKey(op)
		add(k, op)
	}
	return keys
}

func lookupPrepared(st Storage, id string) (*storev1.Prepared, error) {
	b, err := st.Get(preparedKey(id))
	if err != nil || b == nil {
		return nil, err
	}
	rec := &storev1.Prepared{}
	return rec, rec.UnmarshalVT(b)
}

// txnStatus is what the shard knows of cross-shard transaction id of the
// request with hash: its prepare outcome (TXN_STATE_PREPARED), its
// decision (DECIDED) or a fence (FENCED); nil when it knows nothing.
// An id recorded for another request (hash) is FENCED: this request can
// never prepare here.
func txnStatus(st Storage, id string, hash uint64, now int64) (*storev1.Outcome, error) {
	status := func(out *storev1.Outcome, recHash uint64) *storev1.Outcome {
		if recHash != hash {
			return &storev1.Outcome{TxnState: storev1.TxnState_TXN_STATE_FENCED}
		}
		return proto.Clone(out).(*storev1.Outcome)
	}
	if rec, err := lookupPrepared(st, id); err != nil || rec != nil {
		return status(rec.GetOutcome(), rec.GetRequestHash()), err
	}
	if rec, err := lookupTxn(st, id, now); err != nil || rec != nil {
		return status(rec.GetOutcome(), rec.GetRequestHash()), err
	}
	return nil, nil
}

// fence returns what the shard knows of p's transaction, and when it
// knows nothing records a fence, remembered as the txn_id's outcome, so
// that the transaction can no longer prepare here.
func fence(st Storage, p *storev1.Proposal, now int64, g *expiryGroup) (*Result, error) {
	if out, err := txnStatus(st, p.GetTxnId(), p.GetRequestHash(), now); err != nil || out != nil {
		if out != nil {
			out.Duplicate = true
		}
		return &Result{Outcome: out}, err
	}
	out := &storev1.Outcome{TxnState: storev1.TxnState_TXN_STATE_FENCED}
	return &Result{Outcome: out}, rememberTxn(st, p, out, now, g)
}

// Settle is the decision of a cross-shard transaction given what each
// participant knows of it (states, one per participant: nil when it knows
// nothing), or nil while it is undecided. A participant's recorded
// decision is the decision. Otherwise the transaction is undecided while
// some participant knows nothing (it may still prepare); once every one
// has prepared, a group commits when all its parts prepared (an atomic
// transaction: when every group did); one fenced participant aborts it
// all. The decision's groups are those the prepares name, in order.
func Settle(states []*storev1.Outcome, atomic bool) *storev1.Outcome {
	fenced, unknown := false, false
	for _, o := range states {
		switch o.GetTxnState() {
		case storev1.TxnState_TXN_STATE_DECIDED:
			d := proto.Clone(o).(*storev1.Outcome)
			d.Duplicate = false
			return d
		case storev1.TxnState_TXN_STATE_FENCED:
			fenced = true
		case storev1.TxnState_TXN_STATE_PREPARED:
		default:
			unknown = true
		}
	}
	if unknown {
		return nil
	}
	failure := map[uint32]*storev1.Failure{}
	var groups []uint32
	for _, o := range states {
		for j, gi := range o.GetGroupIndexes() {
			if !slices.Contains(groups, gi) {
				groups = append(groups, gi)
			}
			if f := o.GetGroups()[j].GetFailure(); f != nil && failure[gi] == nil {
				failure[gi] = f
			}
		}
	}
	slices.Sort(groups)
	d := &storev1.Outcome{TxnState: storev1.TxnState_TXN_STATE_DECIDED}
	for _, gi := range groups {
		d.Groups = append(d.Groups, &storev1.GroupResult{Committed: failure[gi] == nil, Failure: failure[gi]})
		d.GroupIndexes = append(d.GroupIndexes, gi)
	}
	if fenced {
		for i, g := range d.Groups {
			if g.Committed {
				d.Groups[i] = &storev1.GroupResult{Failure: &storev1.Failure{Reason: storev1.FailureReason_FAILURE_REASON_ABORTED,
					Message: "the cross-shard transaction was aborted: a participant was fenced before it prepared (the driver stopped or was too slow)"}}
			}
		}
	} else if atomic && len(failure) > 0 {
		AbortAll(d.Groups)
	}
	return d
}

// resolve applies the intents of p's transaction on this shard as its
// decision says, at a new revision, and forgets the transaction. A
// repeated RESOLVE finds nothing left to do.
func resolve(st Storage, p *storev1.Proposal, now int64, g *expiryGroup) (*Result, error) {
	rev, err := readMeta(st, revisionKey)
	if err != nil {
		return nil, err
	}
	rec, err := lookupPrepared(st, p.GetTxnId())
	if err != nil || rec == nil {
		return &Result{Outcome: &storev1.Outcome{Revision: rev}}, err
	}
	commit := map[uint32]bool{}
	for _, g := range p.GetDecision().GetCommittedGroups() {
		commit[g] = true
	}
	a := &applier{st: st, rev: rev + 1}
	// Apply in group order, as an APPLY would, each key's intents in the
	// order they were prepared.
	type write struct {
		group uint32
		op    *storev1.Op
	}
	var writes []write
	for _, k := range rec.GetKeys() {
		set, err := intents(st, k)
		if err != nil {
			return nil, err
		}
		kept := set.Intents[:0]
		for _, in := range set.GetIntents() {
			if in.GetTxnId() != p.GetTxnId() {
				kept = append(kept, in)
				continue
			}
			if in.GetOp() != nil && commit[in.GetGroupIndex()] {
				writes = append(writes, write{in.GetGroupIndex(), in.GetOp()})
			}
		}
		set.Intents = kept
		if err := putIntents(st, k, set); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(writes, func(x, y write) int { return int(x.group) - int(y.group) })
	var groups [][]write
	for i, w := range writes {
		if i == 0 || w.group != writes[i-1].group {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], w)
	}
	for _, ws := range groups {
		g := &storev1.Group{}
		for _, w := range ws {
			g.Ops = append(g.Ops, w.op)
		}
		// Intents keep what a group prepared on from changing, and
		// reservations keep its adds within bounds, so the group applies;
		// if it did not, every replica would drop it alike.
		ov, f, err := a.evaluate(g)
		if err != nil {
			return nil, err
		}
		if f == nil {
			a.merge(ov)
		}
	}
	if err := st.Delete(preparedKey(p.GetTxnId())); err != nil {
		return nil, err
	}
	if err := st.Delete(deadlineKey(rec.GetDeadlineUnixNanos(), p.GetTxnId())); err != nil {
		return nil, err
	}
	if err := addPrepared(st, -1); err != nil {
		return nil, err
	}
	// Remember the request's outcome here too, so that a retry of the
	// request meeting this shard again is not prepared a second time.
	if known, err := lookupTxn(st, p.GetTxnId(), now); err != nil {
		return nil, err
	} else if known == nil {
		out := &storev1.Outcome{}
		if p.GetOutcome() != nil {
			out = proto.Clone(p.GetOutcome()).(*storev1.Outcome)
		}
		out.TxnState = storev1.TxnState_TXN_STATE_DECIDED
		// Under the request's hash, which the prepare recorded.
		req := &storev1.Proposal{TxnId: p.GetTxnId(), DedupeWindowNanos: p.GetDedupeWindowNanos(), RequestHash: rec.GetRequestHash()}
		if err := rememberTxn(st, req, out, now, g); err != nil {
			return nil, err
		}
	}
	res := &Result{Outcome: &storev1.Outcome{Revision: rev}}
	if res.Changes, err = a.write(p.GetLogRetention()); err != nil {
		return nil, err
	}
	if res.Changes != nil {
		res.Outcome.Revision = a.rev
	}
	return res, nil
}

// Overdue returns up to limit transactions prepared on this shard whose
// deadline has passed at the shard's clock now, oldest first, with their
// records: a leader settles them (fences every participant, then resolves).
func Overdue(st Storage, now int64, limit int) (ids []string, recs []*storev1.Prepared, err error) {
	var keys [][]byte
	err = st.Scan(deadlineKey(0, ""), deadlineKey(now+1, ""), func(k, _ []byte) bool {
		keys = append(keys, bytes.Clone(k))
		return len(keys) < limit
	})
	for _, k := range keys {
		id := string(k[9:])
		rec, err := lookupPrepared(st, id)
		if err != nil {
			return nil, nil, err
		}
		if rec != nil {
			ids, recs = append(ids, id), append(recs, rec)
		}
	}
	return ids, recs, err
}
