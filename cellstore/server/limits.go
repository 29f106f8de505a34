package server

import (
	"fmt"
	"unicode/utf8"

	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Limits bound what one request may carry.
type Limits struct {
	MaxKeyBytes     int // per key
	MaxValueBytes   int // per value
	MaxRequestBytes int // encoded CommitRequest
	MaxOps          int // conditions plus operations, over all groups
	MaxGroups       int
	MaxTxnIDBytes   int
	MaxRangeLimit   int // keys per Range page
	MaxRangeBytes   int // keys and values per Range page (at least one key)
}

// DefaultLimits returns the limits a store node starts with.
func DefaultLimits() Limits {
	return Limits{
		MaxKeyBytes:     1024,
		MaxValueBytes:   1 << 20,
		MaxRequestBytes: 4 << 20,
		MaxOps:          4096,
		MaxGroups:       1024,
		MaxTxnIDBytes:   128,
		MaxRangeLimit:   10000,
		MaxRangeBytes:   2 << 20,
	}
}

// Validate checks the limits themselves.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxKeyBytes", l.MaxKeyBytes}, {"MaxValueBytes", l.MaxValueBytes}, {"MaxRequestBytes", l.MaxRequestBytes},
		{"MaxOps", l.MaxOps}, {"MaxGroups", l.MaxGroups}, {"MaxTxnIDBytes", l.MaxTxnIDBytes}, {"MaxRangeLimit", l.MaxRangeLimit}, {"MaxRangeBytes", l.MaxRangeBytes}} {
		if f.v <= 0 {
			return fmt.Errorf("limits: %s must be positive, got %d", f.name, f.v)
		}
	}
	if l.MaxValueBytes+l.MaxKeyBytes > l.MaxRequestBytes {
		return fmt.Errorf("limits: MaxRequestBytes (%d) cannot hold one key and value (%d + %d)", l.MaxRequestBytes, l.MaxKeyBytes, l.MaxValueBytes)
	}
	return nil
}

// checkKey validates a key of any request. The store's gRPC codec does
// not check that strings are UTF-8 (proto/codec), so it does: protobuf's
// strings are, and a reader with another codec could not decode a stored
// key that is not.
func (l Limits) checkKey(what, k string) error {
	if validKey(k) {
		return nil
	}
	if k == "" {
		return storeerr.EmptyKey.With("%s", what)
	}
	return storeerr.NotUTF8.With("%s: key %q", what, k)
}

// validKey is checkKey's test, without its error: a commit checks
// thousands of keys, and builds the name of the one that fails alone.
func validKey(k string) bool { return k != "" && utf8.ValidString(k) }

// ValidateCommit checks a commit request's shape. It returns a gRPC error
// for a malformed request, and for each group either nil or the failure
// (TOO_LARGE) that stops that group alone.
func (l Limits) ValidateCommit(req *storev1.CommitRequest) ([]*storev1.Failure, error) {
	switch {
	case req.GetTxnId() == "":
		return nil, storeerr.EmptyTxnID
	case len(req.GetTxnId()) > l.MaxTxnIDBytes:
		return nil, storeerr.OverLimit.With("commit: txn_id is %d bytes, limit %d", len(req.GetTxnId()), l.MaxTxnIDBytes)
	case !utf8.ValidString(req.GetTxnId()): // kept in the store, as a key is (checkKey)
		return nil, storeerr.NotUTF8.With("commit: txn_id %q", req.GetTxnId())
	case len(req.GetGroups()) == 0:
		return nil, storeerr.NoGroups
	case len(req.GetGroups()) > l.MaxGroups:
		return nil, storeerr.OverLimit.With("commit: %d groups, limit %d", len(req.GetGroups()), l.MaxGroups)
	}
	if n := req.SizeVT(); n > l.MaxRequestBytes {
		return nil, storeerr.OverLimit.With("commit: request is %d bytes, limit %d", n, l.MaxRequestBytes)
	}
	ops := 0
	failures := make([]*storev1.Failure, len(req.GetGroups()))
	for gi, g := range req.GetGroups() {
		if len(g.GetConditions())+len(g.GetOps()) == 0 {
			return nil, storeerr.EmptyGroup.With("commit: group %d", gi)
		}
		ops += len(g.GetConditions()) + len(g.GetOps())
		for _, c := range g.GetConditions() {
			if !validKey(c.GetKey()) {
				return nil, l.checkKey(fmt.Sprintf("commit: group %d condition", gi), c.GetKey())
			}
			failures[gi] = cmpFailure(failures[gi], l.tooLarge(c.GetKey(), nil))
		}
		for oi, op := range g.GetOps() {
			k, v, err := opKeyValue(op)
			if err != nil {
				return nil, storeerr.MalformedOp.With("commit: group %d op %d: %v", gi, oi, err)
			}
			if !validKey(k) {
				return nil, l.checkKey(fmt.Sprintf("commit: group %d op %d", gi, oi), k)
			}
			failures[gi] = cmpFailure(failures[gi], l.tooLarge(k, v))
		}
	}
	if ops > l.MaxOps {
		return nil, storeerr.OverLimit.With("commit: %d conditions and operations, limit %d", ops, l.MaxOps)
	}
	return failures, nil
}

// opKeyValue returns an operation's key and the value it writes, and
// refuses malformed operations.
func opKeyValue(op *storev1.Op) (string, []byte, error) {
	switch o := op.GetOp().(type) {
	case nil:
		return "", nil, fmt.Errorf("operation has no type")
	case *storev1.Op_Add:
		if o.Add.GetMin() > o.Add.GetMax() {
			return "", nil, fmt.Errorf("add on %q: min %d > max %d", o.Add.GetKey(), o.Add.GetMin(), o.Add.GetMax())
		}
	}
	return op.Key(), op.GetPut().GetValue(), nil
}

func (l Limits) tooLarge(k string, v []byte) *storev1.Failure {
	switch {
	case len(k) > l.MaxKeyBytes:
		return &storev1.Failure{Reason: storev1.FailureReason_FAILURE_REASON_TOO_LARGE, Key: k[:min(len(k), 64)] + "…",
			Message: fmt.Sprintf("key is %d bytes, limit %d", len(k), l.MaxKeyBytes)}
	case len(v) > l.MaxValueBytes:
		return &storev1.Failure{Reason: storev1.FailureReason_FAILURE_REASON_TOO_LARGE, Key: k,
			Message: fmt.Sprintf("value of %q is %d bytes, limit %d", k, len(v), l.MaxValueBytes)}
	}
	return nil
}

// cmpFailure keeps the first failure found.
func cmpFailure(first, next *storev1.Failure) *storev1.Failure {
	if first != nil {
		return first
	}
	return next
}

// rangeLimit applies the server's page size to a requested limit.
func (l Limits) rangeLimit(requested uint32) int {
	if requested == 0 || int(requested) > l.MaxRangeLimit {
		return l.MaxRangeLimit
	}
	return int(requested)
}
