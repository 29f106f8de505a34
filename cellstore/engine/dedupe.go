package engine

import (
	"bytes"
	"encoding/binary"
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

// rememberTxn records the outcome of p until now + its dedupe window.
func rememberTxn(st Storage, p *storev1.Proposal, out *storev1.Outcome, now int64) error {
	if p.GetTxnId() == "" || p.GetDedupeWindowNanos() <= 0 {
		return nil
	}
	expires, ok := addInt64(now, p.GetDedupeWindowNanos())
	if !ok {
		expires = math.MaxInt64
	}
	b, err := (&storev1.TxnRecord{Outcome: out, ExpiresUnixNanos: expires, RequestHash: p.GetRequestHash()}).MarshalVT()
	if err != nil {
		return err
	}
	if err := st.Set(txnKey(p.GetTxnId()), b); err != nil {
		return err
	}
	return st.Set(expiryKey(expires, p.GetTxnId()), nil)
}

// expiryScanInterval is how often (in proposal time) the engine looks for
// expired outcomes. Scanning less often keeps the per-proposal cost at a
// few point reads.
const expiryScanInterval = int64(time.Second)

// expireTxns forgets remembered outcomes whose window ended at or before
// now, a bounded number per call. It scans at most once per
// expiryScanInterval, and only from where the last scan ended, so deleted
// index entries are never walked twice.
func expireTxns(st Storage, now int64) error {
	next, err := readMeta(st, metaExpiryNext)
	if err != nil || now < int64(next) {
		return err
	}
	low, err := readMeta(st, metaExpiryLow)
	if err != nil {
		return err
	}
	var expired [][]byte
	err = st.Scan(expiryKey(int64(low), ""), expiryKey(now+1, ""), func(k, _ []byte) bool {
		expired = append(expired, bytes.Clone(k))
		return len(expired) < maxExpiredPerApply
	})
	if err != nil {
		return err
	}
	for _, k := range expired {
		id := string(k[9:])
		// The record may have been rewritten with a later expiry after
		// the window ended; only drop it if it has expired.
		if rec, err := lookupTxn(st, id, now); err != nil {
			return err
		} else if rec == nil {
			if err := st.Delete(txnKey(id)); err != nil {
				return err
			}
		}
		if err := st.Delete(k); err != nil {
			return err
		}
	}
	low, next = uint64(now+1), uint64(now+expiryScanInterval)
	if len(expired) == maxExpiredPerApply {
		// More may be left: resume from the last expiry seen, next time.
		low, next = binary.BigEndian.Uint64(expired[len(expired)-1][1:9]), uint64(now)
	}
	if err := st.Set([]byte(metaExpiryLow), EncodeUint64(low)); err != nil {
		return err
	}
	return st.Set([]byte(metaExpiryNext), EncodeUint64(next))
}
