package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"time"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	"google.golang.org/protobuf/proto"
)

// lookupTxn returns the remembered record of txn id, or nil when there is
// none or it has expired.
func lookupTxn(st Storage, id string, now int64) (*storev1.TxnRecord, error) {
	if id == "" {
		return nil, nil
	}
	b, err := st.Get(txnKey(id))
	if err != nil || b == nil {
		return nil, err
	}
	rec := &storev1.TxnRecord{}
	if err := rec.UnmarshalVT(b); err != nil {
		return nil, err
	}
	if rec.GetExpiresUnixNanos() <= now {
		return nil, nil
	}
	return rec, nil
}

// remembered is the reply to a proposal whose txn_id was seen before: the
// first outcome, or TXN_ID_REUSED for every group when the content differs.
func remembered(rec *storev1.TxnRecord, p *storev1.Proposal) *storev1.Outcome {
	if rec.GetRequestHash() == p.GetRequestHash() {
		out := proto.Clone(rec.GetOutcome()).(*storev1.Outcome)
		out.Duplicate = true
		return out
	}
	out := &storev1.Outcome{GroupIndexes: p.GetGroupIndexes(), Duplicate: true}
	for range p.GetGroups() {
		out.Groups = append(out.Groups, &storev1.GroupResult{Failure: &storev1.Failure{
			Reason:  storev1.FailureReason_FAILURE_REASON_TXN_ID_REUSED,
			Message: "txn_id " + p.GetTxnId() + " was used for a different request",
		}})
	}
	return out
}

// rememberTxn records the outcome of p until now + its dedupe window; its
// expiry index entry is g's.
func rememberTxn(st Storage, p *storev1.Proposal, out *storev1.Outcome, now int64, g *expiryGroup) error {
	if p.GetTxnId() == "" || p.GetDedupeWindowNanos() <= 0 {
		return nil
	}
	expires, ok := addInt64(now, p.GetDedupeWindowNanos())
	if !ok {
		expires = math.MaxInt64
	}
	rec := &storev1.TxnRecord{Outcome: out, ExpiresUnixNanos: expires, RequestHash: p.GetRequestHash()}
	if err := setMessage(st, txnKey(p.GetTxnId()), rec); err != nil {
		return err
	}
	g.add(p.GetTxnId(), expires)
	return nil
}

// expiryGroup gathers the outcomes that the proposals of one Raft entry
// remember, for the expiry index: one key for the entry instead of one
// per outcome. Under load an entry carries tens of proposals, and each
// key is a write into every replica's memtable.
type expiryGroup struct {
	ids     []string
	expires int64 // the latest of their expiries
}

func (g *expiryGroup) add(id string, expires int64) {
	g.ids = append(g.ids, id)
	g.expires = max(g.expires, expires)
}

// write indexes the group's outcomes under one key at the latest of their
// expiries, so each is forgotten when the group's last window ends
// (lookups check a record's own expiry: none is answered after its
// window). The key's expiry is at least the clock's next nanosecond: a
// scan by a later proposal of the entry may have moved the scans' start
// up to there. A group of one keeps the form of an outcome's own entry,
// x<expiry><id> with no value; a larger one is x<expiry>\xff<seq> holding
// the ids (expiryGroupKey, encodeIDs).
func (g *expiryGroup) write(st Storage) error {
	if len(g.ids) == 0 {
		return nil
	}
	clock, err := readMeta(st, clockKey)
	if err != nil {
		return err
	}
	expires := max(g.expires, int64(clock)+1)
	if len(g.ids) == 1 {
		return st.Set(expiryKey(expires, g.ids[0]), nil)
	}
	seq, err := readMeta(st, expirySeqKey)
	if err != nil {
		return err
	}
	if err := st.Set(expirySeqKey, EncodeUint64(seq+1)); err != nil {
		return err
	}
	return st.Set(expiryGroupKey(expires, seq), encodeIDs(g.ids))
}

// encodeIDs and decodeIDs are the value of a group's expiry index entry:
// each id as its uvarint length and its bytes.
func encodeIDs(ids []string) []byte {
	n := 0
	for _, id := range ids {
		n += binary.MaxVarintLen16 + len(id) // a capacity hint: an id over 64 KiB only makes append grow
	}
	b := make([]byte, 0, n)
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	return b
}

func decodeIDs(b []byte, ids []string) ([]string, error) {
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errors.New("engine: corrupt expiry group")
		}
		ids = append(ids, string(b[k:k+int(n)]))
		b = b[k+int(n):]
	}
	return ids, nil
}

// expiryScanInterval is how often (in proposal time) the engine looks for
// expired outcomes. Scanning less often keeps the per-proposal cost at a
// few point reads.
const expiryScanInterval = int64(time.Second)

// expireTxns forgets remembered outcomes whose window ended at or before
// now: at most maxExpiredPerApply per call, or a few more to finish an
// index entry of a group. It scans at most once per expiryScanInterval,
// and only from where the last scan ended, so deleted index entries are
// never walked twice.
func expireTxns(st Storage, now int64) error {
	next, err := readMeta(st, expiryNextKey)
	if err != nil || now < int64(next) {
		return err
	}
	low, err := readMeta(st, expiryLowKey)
	if err != nil {
		return err
	}
	var (
		keys      [][]byte
		ids       []string
		decodeErr error
	)
	err = st.Scan(expiryKey(int64(low), ""), expiryKey(now+1, ""), func(k, v []byte) bool {
		keys = append(keys, bytes.Clone(k))
		if isExpiryGroupKey(k) {
			ids, decodeErr = decodeIDs(v, ids)
		} else {
			ids = append(ids, string(k[9:]))
		}
		return decodeErr == nil && len(ids) < maxExpiredPerApply
	})
	if err != nil {
		return err
	}
	if decodeErr != nil {
		return decodeErr
	}
	for _, id := range ids {
		// The record may have been rewritten with a later expiry after
		// the window ended; only drop it if it has expired.
		if rec, err := lookupTxn(st, id, now); err != nil {
			return err
		} else if rec == nil {
			if err := st.Delete(txnKey(id)); err != nil {
				return err
			}
		}
	}
	for _, k := range keys {
		if err := st.Delete(k); err != nil {
			return err
		}
	}
	low, next = uint64(now+1), uint64(now+expiryScanInterval)
	if len(ids) >= maxExpiredPerApply {
		// More may be left: resume from the last expiry seen, next time.
		low, next = binary.BigEndian.Uint64(keys[len(keys)-1][1:9]), uint64(now)
	}
	if err := st.Set(expiryLowKey, EncodeUint64(low)); err != nil {
		return err
	}
	return st.Set(expiryNextKey, EncodeUint64(next))
}
