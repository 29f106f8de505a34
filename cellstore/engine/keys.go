package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Internal key prefixes; see the package comment.
const (
	prefixData     = 'd'
	prefixLog      = 'l'
	prefixTxn      = 't'
	prefixExpiry   = 'x'
	prefixMeta     = 'm'
	prefixIntent   = 'i'
	prefixPrepared = 'p'
	prefixDeadline = 'q'
	metaRevision   = "mrev"
	metaLogStart   = "mlogstart"
	metaClock      = "mclock"
	metaAppliedIx  = "mapplied"
	metaExpiryLow  = "mexpirylow"  // expiry index entries below this are gone
	metaExpiryNext = "mexpirynext" // proposal time of the next expiry scan
	metaExpirySeq  = "mexpiryseq"  // groups of the expiry index made so far (expiryGroupKey)
	metaPrepared   = "mprepared"   // cross-shard transactions prepared here and not resolved
	metaFreeze     = "mfreeze"     // the freeze a backup holds on the shard (Freeze)
)

// The metadata keys as storage keys, made once rather than at every read
// and write (a proposal reads and writes several): storage keeps copies of
// the keys it is given, never the caller's slice, and nothing changes
// these.
var (
	revisionKey      = []byte(metaRevision)
	logStartKey      = []byte(metaLogStart)
	clockKey         = []byte(metaClock)
	expiryLowKey     = []byte(metaExpiryLow)
	expiryNextKey    = []byte(metaExpiryNext)
	expirySeqKey     = []byte(metaExpirySeq)
	preparedCountKey = []byte(metaPrepared)
	freezeKey        = []byte(metaFreeze)
)

// Prefixes of the storage key families, for storage layers that index
// them (see the package comment).
const (
	MetaPrefix     = prefixMeta
	DataPrefix     = prefixData
	LogPrefix      = prefixLog
	TxnPrefix      = prefixTxn
	IntentPrefix   = prefixIntent
	PreparedPrefix = prefixPrepared
)

// DataKey is the storage key of user key k.
func DataKey(k string) []byte {
	b := make([]byte, 0, len(k)+1)
	b = append(b, prefixData)
	return append(b, k...)
}

// UserKey is the inverse of DataKey.
func UserKey(dk []byte) string { return string(dk[1:]) }

// DataBounds returns the storage key range [lower, upper) holding the user
// keys that start with prefix.
func DataBounds(prefix string) (lower, upper []byte) {
	lower = DataKey(prefix)
	return lower, prefixEnd(lower)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// LogKey is the storage key of revision rev's change set.
func LogKey(rev uint64) []byte {
	b := make([]byte, 9)
	b[0] = prefixLog
	binary.BigEndian.PutUint64(b[1:], rev)
	return b
}

func txnKey(id string) []byte {
	b := make([]byte, 0, len(id)+1)
	b = append(b, prefixTxn)
	return append(b, id...)
}

func expiryKey(expires int64, id string) []byte {
	b := make([]byte, 9, 9+len(id))
	b[0] = prefixExpiry
	binary.BigEndian.PutUint64(b[1:], uint64(expires))
	return append(b, id...)
}

// expiryGroupKey is the expiry index entry of the seq'th group of outcomes
// (expiryGroup). The byte after the expiry, 0xff, starts no UTF-8
// string, so no txn id: the key never collides with an outcome's own
// entry, x<expiry><id>, which is how every entry was written before
// groups and how a group of one still is.
func expiryGroupKey(expires int64, seq uint64) []byte {
	b := make([]byte, 18)
	b[0] = prefixExpiry
	binary.BigEndian.PutUint64(b[1:], uint64(expires))
	b[9] = 0xff
	binary.BigEndian.PutUint64(b[10:], seq)
	return b
}

func isExpiryGroupKey(k []byte) bool { return len(k) == 18 && k[9] == 0xff }

// AppliedIndexKey is where the Raft state machine keeps its applied index,
// written in the same batch as the data it covers.
func AppliedIndexKey() []byte { return []byte(metaAppliedIx) }

// EncodeRecord encodes a stored user value with its version.
func EncodeRecord(version uint64, value []byte) []byte {
	b := make([]byte, RecordSize(version, len(value)))
	PutRecord(b, version, value)
	return b
}

// RecordSize is the length of the record of a value of n bytes at version.
func RecordSize(version uint64, n int) int { return protowire.SizeVarint(version) + n }

// PutRecord encodes the record of value at version into dst, which is
// RecordSize long, for writers that encode in place (RecordWriter).
func PutRecord(dst []byte, version uint64, value []byte) {
	n := binary.PutUvarint(dst, version)
	copy(dst[n:], value)
}

// DecodeRecord splits a stored user value into version and value. The value
// aliases rec.
func DecodeRecord(rec []byte) (version uint64, value []byte, err error) {
	v, n := binary.Uvarint(rec)
	if n <= 0 {
		return 0, nil, errors.New("engine: corrupt record header")
	}
	return v, rec[n:], nil
}

// EncodeUint64 and DecodeUint64 store metadata counters.
func EncodeUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// DecodeUint64 decodes a value written by EncodeUint64; a missing value
// (nil) is 0.
func DecodeUint64(b []byte) (uint64, error) {
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("engine: corrupt uint64 of %d bytes", len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// RevisionKey is where the shard revision is kept.
func RevisionKey() []byte { return []byte(metaRevision) }

// LogStartKey is where the oldest revision still in the change log is kept.
func LogStartKey() []byte { return []byte(metaLogStart) }
