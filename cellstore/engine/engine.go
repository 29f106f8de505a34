package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Bounds on the housekeeping one Apply does, so that the cost of a proposal
// does not depend on how much expired state has piled up.
const (
	maxExpiredPerApply  = 256
	maxLogTrimPerApply  = 64
	defaultLogRetention = 10000
)

// Result is what Apply produced.
type Result struct {
	// Outcome is the reply for the proposal (Outcome.Duplicate set when it
	// was remembered rather than applied).
	Outcome *storev1.Outcome
	// Changes is the change set written at Outcome.Revision, nil when the
	// proposal wrote nothing.
	Changes *storev1.ChangeSet
}

// RecordWriter is a Storage that encodes what the engine writes in its own
// memory: the state machine's, straight into its Pebble batch, which would
// otherwise copy what the engine encoded only for it.
type RecordWriter interface {
	// SetRecord sets dataKey to EncodeRecord(version, value).
	SetRecord(dataKey []byte, version uint64, value []byte) error
	// SetMessage sets key, of the change log or of a remembered outcome,
	// to m's encoding.
	SetMessage(key []byte, m Message) error
}

// Message is a message with vtprotobuf's generated encoding.
type Message interface {
	SizeVT() int
	MarshalToSizedBufferVT(b []byte) (int, error)
	MarshalVT() ([]byte, error)
}

// setMessage sets key to m's encoding.
func setMessage(st Storage, key []byte, m Message) error {
	if rw, ok := st.(RecordWriter); ok {
		return rw.SetMessage(key, m)
	}
	b, err := m.MarshalVT()
	if err != nil {
		return err
	}
	return st.Set(key, b)
}

// pending is the state a key will have once the proposal commits.
type pending struct {
	value   []byte
	deleted bool
}

// overlay is pending writes in the order first written: one group's
// before it commits, or a proposal's committed groups' (applier.committed).
// A proposal writes few keys (a placement five), which a slice finds
// faster than a map and without allocating one; a large one gets an index.
type overlay struct {
	writes []keyWrite
	index  map[string]int // position in writes, once they pass overlayIndexed
}

// keyWrite is one key's pending state in an overlay.
type keyWrite struct {
	key string
	p   pending
}

// overlayIndexed is the size past which an overlay indexes its keys.
const overlayIndexed = 16

func (o *overlay) get(k string) (pending, bool) {
	if o == nil {
		return pending{}, false
	}
	if o.index != nil {
		i, ok := o.index[k]
		if !ok {
			return pending{}, false
		}
		return o.writes[i].p, true
	}
	for i := range o.writes {
		if o.writes[i].key == k {
			return o.writes[i].p, true
		}
	}
	return pending{}, false
}

func (o *overlay) set(k string, p pending) {
	if o.index != nil {
		if i, ok := o.index[k]; ok {
			o.writes[i].p = p
			return
		}
	} else {
		for i := range o.writes {
			if o.writes[i].key == k {
				o.writes[i].p = p
				return
			}
		}
	}
	o.writes = append(o.writes, keyWrite{k, p})
	switch {
	case o.index != nil:
		o.index[k] = len(o.writes) - 1
	case len(o.writes) > overlayIndexed:
		// Sized for as many keys as writes has room for: the writes a
		// proposal or group may make (sizeCommitted, evaluate).
		o.index = make(map[string]int, max(2*len(o.writes), cap(o.writes)))
		for i, w := range o.writes {
			o.index[w.key] = i
		}
	}
}

// applier evaluates one proposal. Writes of committed groups accumulate in
// committed; a group's own writes go to a scratch overlay first, so a failed
// group leaves nothing behind.
type applier struct {
	st  Storage
	rev uint64 // revision the proposal's writes get
	// committed holds the writes of the committed groups, each key at
	// the place of its first write.
	committed overlay
	// scratch is the overlay evaluate plays a group into, reused from
	// group to group: a plan has hundreds.
	scratch overlay
	// key is the buffer of dataKey: Storage implementations neither keep
	// nor change the keys they are given.
	key []byte
	// intents read so far, by key (only when transactions are prepared).
	intents map[string]*storev1.IntentSet
}

// Apply applies proposal p to the shard state in st and returns the outcome.
// It is deterministic: the same state and proposal give the same writes and
// outcome. An error means the storage failed; the state is then undefined
// and the caller must not commit it. Apply(st, p) is ApplyEntry(st, [p]).
func Apply(st Storage, p *storev1.Proposal) (*Result, error) {
	var g expiryGroup
	res, err := apply(st, p, &g)
	if err != nil {
		return nil, err
	}
	return res, g.write(st)
}

// ApplyEntry applies the proposals of one Raft entry in order, as Apply
// would one after the other, except that the outcomes they remember share
// one expiry index entry (expiryGroup): one storage write for the entry
// instead of one per proposal. Every replica applies the same entries, so
// the grouping is as deterministic as the rest.
func ApplyEntry(st Storage, ps []*storev1.Proposal) ([]*Result, error) {
	var g expiryGroup
	out := make([]*Result, len(ps))
	for i, p := range ps {
		res, err := apply(st, p, &g)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	return out, g.write(st)
}

// apply applies p; the outcome it remembers joins g.
func apply(st Storage, p *storev1.Proposal, g *expiryGroup) (*Result, error) {
	now, err := advanceClock(st, p.GetNowUnixNanos())
	if err != nil {
		return nil, err
	}
	if err := expireTxns(st, now); err != nil {
		return nil, err
	}
	switch p.GetPhase() {
	case storev1.Phase_PHASE_PREPARE:
		return prepare(st, p, now)
	case storev1.Phase_PHASE_FENCE:
		return fence(st, p, now, g)
	case storev1.Phase_PHASE_RESOLVE:
		return resolve(st, p, now, g)
	case storev1.Phase_PHASE_FREEZE:
		return freeze(st, p, now)
	case storev1.Phase_PHASE_THAW:
		return thaw(st, p, now)
	case storev1.Phase_PHASE_APPLY:
	default:
		// A phase from a newer binary: applying it as a plain commit
		// would make this replica's state differ from the others'.
		return nil, fmt.Errorf("engine: proposal phase %d is unknown to this binary; upgrade every member before the cell uses it", p.GetPhase())
	}
	if rec, err := lookupTxn(st, p.GetTxnId(), now); err != nil {
		return nil, err
	} else if rec != nil {
		return &Result{Outcome: remembered(rec, p)}, nil
	}
	rev, err := readMeta(st, revisionKey)
	if err != nil {
		return nil, err
	}
	if frozen, err := frozen(st, now); err != nil || frozen {
		return refused(p, rev), err
	}
	a := &applier{st: st, rev: rev + 1}
	a.sizeCommitted(p.GetGroups())
	out := &storev1.Outcome{GroupIndexes: p.GetGroupIndexes(), Revision: rev}
	out.Groups = make([]*storev1.GroupResult, len(p.GetGroups()))
	results := make([]storev1.GroupResult, len(p.GetGroups())) // one allocation for all
	prepared, err := readMeta(st, preparedCountKey)
	if err != nil {
		return nil, err
	}
	failed := false
	for i, g := range p.GetGroups() {
		ov, f, err := a.try(g, prepared > 0) // prepared: intents exist somewhere on the shard
		if err != nil {
			return nil, err
		}
		out.Groups[i] = &results[i]
		if f != nil {
			results[i].Failure = f
			failed = true
			continue
		}
		a.merge(ov)
		results[i].Committed = true
	}
	if p.GetAtomic() && failed {
		AbortAll(out.Groups)
		a.committed = overlay{}
	}
	res := &Result{Outcome: out}
	if res.Changes, err = a.write(p.GetLogRetention()); err != nil {
		return nil, err
	}
	if res.Changes != nil {
		out.Revision = a.rev
	}
	for _, g := range out.Groups {
		if g.Committed {
			g.Revision = out.Revision
		}
	}
	if err := rememberTxn(st, p, out, now, g); err != nil {
		return nil, err
	}
	return res, nil
}

// AbortAll marks every committed-looking group of a failed atomic request
// as aborted.
func AbortAll(groups []*storev1.GroupResult) {
	for i, g := range groups {
		if g.Committed {
			groups[i] = &storev1.GroupResult{Failure: Aborted()}
		}
	}
}

// Aborted is the failure of a group whose atomic request failed elsewhere.
func Aborted() *storev1.Failure {
	return &storev1.Failure{
		Reason:  storev1.FailureReason_FAILURE_REASON_ABORTED,
		Message: "another group of the atomic request failed",
	}
}

// sizeCommitted sizes a.committed for the writes of groups, at most one
// per operation, so that merging them does not grow it step by step (nor
// its index, if it needs one: overlay.set). A single group's overlay
// becomes committed as it is (merge).
func (a *applier) sizeCommitted(groups []*storev1.Group) {
	if len(groups) < 2 {
		return
	}
	n := 0
	for _, g := range groups {
		n += len(g.GetOps())
	}
	a.committed.writes = make([]keyWrite, 0, n)
}

// dataKey is DataKey(k) in a.key, valid until the next call.
func (a *applier) dataKey(k string) []byte {
	a.key = append(append(a.key[:0], prefixData), k...)
	return a.key
}

// try checks group g against the intents on its keys (when intents may
// exist) and evaluates it: the overlay of its writes, or why it fails.
func (a *applier) try(g *storev1.Group, intents bool) (*overlay, *storev1.Failure, error) {
	if intents {
		if f, err := a.checkIntents(nil, g); f != nil || err != nil {
			return nil, f, err
		}
	}
	return a.evaluate(g)
}

// pendingWrite returns the write to key k that the proposal has made so
// far as the group sees it: the group's own, else an earlier committed
// group's.
func (a *applier) pendingWrite(ov *overlay, k string) (pending, bool) {
	if p, ok := ov.get(k); ok {
		return p, true
	}
	return a.committed.get(k)
}

// current returns the state of key k as the group sees it: its own writes,
// then the writes of earlier committed groups, then storage.
func (a *applier) current(ov *overlay, k string) (value []byte, version uint64, exists bool, err error) {
	if p, ok := a.pendingWrite(ov, k); ok {
		return p.value, a.rev, !p.deleted, nil
	}
	rec, err := a.st.Get(a.dataKey(k))
	if err != nil || rec == nil {
		return nil, 0, false, err
	}
	version, value, err = DecodeRecord(rec)
	return value, version, err == nil, err
}

// version reports the version a condition sees: writes pending in the
// proposal count as the revision the proposal will commit at.
func (a *applier) version(ov *overlay, k string) (uint64, error) {
	if p, ok := a.pendingWrite(ov, k); ok {
		if p.deleted {
			return 0, nil
		}
		return a.rev, nil
	}
	v, _, err := a.readVersion(k)
	return v, err
}

// readVersion returns the version of user key k in storage and whether
// it exists, without reading its value where the storage can tell
// (VersionReader).
func (a *applier) readVersion(k string) (version uint64, exists bool, err error) {
	if vr, ok := a.st.(VersionReader); ok {
		return vr.DataVersion(a.dataKey(k))
	}
	rec, err := a.st.Get(a.dataKey(k))
	if err != nil || rec == nil {
		return 0, false, err
	}
	version, _, err = DecodeRecord(rec)
	return version, err == nil, err
}

// evaluate checks a group's conditions and plays its operations into an
// overlay. A non-nil Failure means the group fails.
func (a *applier) evaluate(g *storev1.Group) (*overlay, *storev1.Failure, error) {
	ov := &a.scratch
	ov.writes = slices.Grow(ov.writes[:0], len(g.GetOps()))
	clear(ov.index)
	for _, c := range g.GetConditions() {
		v, err := a.version(ov, c.GetKey())
		if err != nil {
			return nil, nil, err
		}
		if v != c.GetVersion() {
			return nil, &storev1.Failure{
				Reason:         storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH,
				Key:            c.GetKey(),
				CurrentVersion: v,
				Message:        fmt.Sprintf("version of %q is %d, condition wants %d", c.GetKey(), v, c.GetVersion()),
			}, nil
		}
	}
	for _, op := range g.GetOps() {
		switch o := op.GetOp().(type) {
		case *storev1.Op_Put:
			ov.set(o.Put.GetKey(), pending{value: o.Put.GetValue()})
		case *storev1.Op_Delete:
			ov.set(o.Delete.GetKey(), pending{deleted: true})
		case *storev1.Op_Add:
			f, err := a.add(ov, o.Add)
			if err != nil || f != nil {
				return nil, f, err
			}
		default:
			// The server refuses such requests; a proposal that carries one
			// anyway fails its group rather than the whole shard.
			return nil, &storev1.Failure{
				Reason:  storev1.FailureReason_FAILURE_REASON_MALFORMED,
				Message: fmt.Sprintf("operation of unknown type %T", o),
			}, nil
		}
	}
	return ov, nil, nil
}

// add applies one counter operation to the overlay.
func (a *applier) add(ov *overlay, op *storev1.Add) (*storev1.Failure, error) {
	k := op.GetKey()
	cur, version, ok, err := a.counter(ov, k)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &storev1.Failure{
			Reason:         storev1.FailureReason_FAILURE_REASON_NOT_A_COUNTER,
			Key:            k,
			CurrentVersion: version,
			Message:        fmt.Sprintf("value of %q is not a decimal int64 counter", k),
		}, nil
	}
	next, ok := addInt64(cur, op.GetDelta())
	if !ok || next < op.GetMin() || next > op.GetMax() {
		return &storev1.Failure{
			Reason:         storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED,
			Key:            k,
			CurrentVersion: version,
			Message:        fmt.Sprintf("counter %q is %d; adding %d leaves [%d, %d]", k, cur, op.GetDelta(), op.GetMin(), op.GetMax()),
		}, nil
	}
	if op.GetDelta() != 0 { // an add of 0 only checks the bounds: nothing changes
		ov.set(k, pending{value: strconv.AppendInt(nil, next, 10)})
	}
	return nil, nil
}

// counter reads key k as a counter, as the group sees it: an absent key
// is 0 at version 0. ok is false when the value is not a decimal int64
// (as strconv.ParseInt reads it); version is then the key's. Adds
// (add) and the check of their reservations (checkKey) both read
// counters here.
func (a *applier) counter(ov *overlay, k string) (cur int64, version uint64, ok bool, err error) {
	value, version, exists, err := a.current(ov, k)
	if err != nil || !exists {
		return 0, 0, err == nil, err
	}
	cur, perr := strconv.ParseInt(string(value), 10, 64)
	return cur, version, perr == nil, nil
}

func addInt64(a, b int64) (int64, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}

// merge folds a committed group's overlay into the proposal's writes. Keys
// are ordered by the group that first wrote them, then by key, so the change
// set does not depend on the order of a group's operations.
func (a *applier) merge(ov *overlay) {
	if len(ov.writes) == 0 {
		return
	}
	slices.SortFunc(ov.writes, func(x, y keyWrite) int { return strings.Compare(x.key, y.key) })
	if a.committed.writes == nil { // not sized (sizeCommitted): the first group's
		// Its keys are distinct already; the sort moved them.
		if ov.index != nil {
			for i, w := range ov.writes {
				ov.index[w.key] = i
			}
		}
		a.committed, *ov = *ov, overlay{} // ov (a.scratch) no longer shares its memory
		return
	}
	for _, w := range ov.writes {
		a.committed.set(w.key, w.p)
	}
}

// write persists the proposal's writes at revision a.rev with their change
// set, and trims the change log to retention revisions. Deleting a key that
// does not exist changes nothing; when nothing changes, write returns nil
// and the revision stays.
func (a *applier) write(retention uint64) (*storev1.ChangeSet, error) {
	writes := a.committed.writes
	if len(writes) == 0 {
		return nil, nil
	}
	cs := &storev1.ChangeSet{Events: make([]*storev1.Event, 0, len(writes))}
	type event struct {
		ev storev1.Event
		kv storev1.KeyValue
	}
	evs := make([]event, len(writes)) // one allocation for all
	rw, inPlace := a.st.(RecordWriter)
	for i, w := range writes {
		k, p := w.key, w.p
		kv := &evs[i].kv
		kv.Key, kv.Version = k, a.rev
		ev := &evs[i].ev
		ev.Type, ev.Kv = storev1.EventType_EVENT_TYPE_PUT, kv
		var err error
		if p.deleted {
			if _, exists, err := a.readVersion(k); err != nil {
				return nil, err
			} else if !exists {
				continue
			}
			ev.Type = storev1.EventType_EVENT_TYPE_DELETE
			err = a.st.Delete(a.dataKey(k))
		} else {
			kv.Value = p.value
			if inPlace {
				err = rw.SetRecord(a.dataKey(k), a.rev, p.value)
			} else {
				err = a.st.Set(a.dataKey(k), EncodeRecord(a.rev, p.value))
			}
		}
		if err != nil {
			return nil, err
		}
		cs.Events = append(cs.Events, ev)
	}
	if len(cs.Events) == 0 {
		return nil, nil
	}
	if err := setMessage(a.st, LogKey(a.rev), cs); err != nil {
		return nil, err
	}
	if err := a.st.Set(revisionKey, EncodeUint64(a.rev)); err != nil {
		return nil, err
	}
	return cs, trimLog(a.st, a.rev, retention)
}

// trimLog keeps the change log at most retention revisions long, deleting a
// bounded number of entries per call.
func trimLog(st Storage, rev, retention uint64) error {
	if retention == 0 {
		retention = defaultLogRetention
	}
	stored, err := readMeta(st, logStartKey)
	if err != nil {
		return err
	}
	start := stored
	if start == 0 {
		start = rev
	}
	for n := 0; n < maxLogTrimPerApply && rev-start >= retention; n++ {
		if err := st.Delete(LogKey(start)); err != nil {
			return err
		}
		start++
	}
	if start == stored {
		return nil // nothing trimmed: the stored start stands
	}
	return st.Set(logStartKey, EncodeUint64(start))
}

func readMeta(st Storage, key []byte) (uint64, error) {
	b, err := st.Get(key)
	if err != nil {
		return 0, err
	}
	return DecodeUint64(b)
}

// advanceClock returns the shard's clock: the largest proposal time seen, so
// that a proposer whose clock lags cannot move time backwards.
func advanceClock(st Storage, proposed int64) (int64, error) {
	cur, err := readMeta(st, clockKey)
	if err != nil {
		return 0, err
	}
	if proposed <= int64(cur) {
		return int64(cur), nil
	}
	return proposed, st.Set(clockKey, EncodeUint64(uint64(proposed)))
}
