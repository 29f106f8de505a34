package statemachine

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/troupe-cluster/troupe/cellstore/engine"
)

// maxCachedValue is the largest record the index keeps in memory (counters
// and other small values); larger ones are read from Pebble.
const maxCachedValue = 64

// keyIndex is a replica's in-memory index of its Pebble state, used by
// Update only, in the spirit of etcd's in-memory key index. Most engine
// reads ask for keys that do not exist (a new txn_id, a "must not exist"
// condition) or for small counters; the index answers those without
// touching Pebble:
//
//   - data: every user data key that exists, with its version, and its
//     record when small: a version condition never reads Pebble, nor does
//     an add on a counter;
//   - present: every txn_id with a remembered outcome (looked up by name,
//     mostly absent);
//   - held: the intents and prepared records of cross-shard transactions
//     in progress, with their values: few, short-lived, and read back by
//     every RESOLVE;
//   - meta: the shard's metadata keys, which every proposal reads and
//     rewrites. Their writes are combined: only the last value of an
//     Update batch goes to Pebble (see flushMeta). A key keeps its entry
//     once seen, deleted or not, so that writing it again allocates
//     nothing.
//
// It is derived state: rebuilt from Pebble when the replica opens or
// recovers a snapshot, and kept current by every write through
// batchStorage.
type keyIndex struct {
	data    map[string]dataEntry // storage key → what the index keeps of it
	present map[string]struct{}
	held    map[string][]byte
	meta    map[string]*metaEntry
	dirty   []*metaEntry // written since the last flushMeta
	// written is the large records (kept without their record in data)
	// that the Update in progress wrote, in order: its batch of user
	// data is not indexed (batchStorage.bulk), so neither it nor Pebble
	// can read them back; writtenAt indexes them once one is looked for.
	written   []writtenRecord
	writtenAt map[string]int // key → its last record's place in written
}

// writtenRecord is a large record written by the Update in progress. value
// is the engine's, which it does not change once written.
type writtenRecord struct {
	key     string
	version uint64
	value   []byte
}

// addWritten records that the Update in progress wrote a large record.
func (x *keyIndex) addWritten(key string, version uint64, value []byte) {
	x.written = append(x.written, writtenRecord{key, version, value})
	if x.writtenAt != nil {
		x.writtenAt[key] = len(x.written) - 1
	}
}

// writtenRecord returns the record of data key k if the Update in progress
// wrote it last as a large record.
func (x *keyIndex) writtenRecord(k []byte) ([]byte, bool) {
	if len(x.written) == 0 {
		return nil, false
	}
	if x.writtenAt == nil {
		x.writtenAt = make(map[string]int, len(x.written))
		for i, w := range x.written {
			x.writtenAt[w.key] = i
		}
	}
	i, ok := x.writtenAt[string(k)]
	if !ok {
		return nil, false
	}
	w := x.written[i]
	return engine.EncodeRecord(w.version, w.value), true
}

// endUpdate forgets the records of the Update that ended, which Pebble
// now has (or which a failed Update leaves to Dragonboat's retry).
func (x *keyIndex) endUpdate() {
	clear(x.written) // the values are the entries'
	x.written = x.written[:0]
	x.writtenAt = nil
}

// metaEntry is a metadata key as the index keeps it.
type metaEntry struct {
	key    string
	value  []byte
	exists bool
	dirty  bool // in keyIndex.dirty
}

// metaValue returns the value of metadata key k, nil when it does not
// exist.
func (x *keyIndex) metaValue(k []byte) []byte {
	if e := x.meta[string(k)]; e != nil && e.exists {
		return e.value
	}
	return nil
}

// setMeta records a write of metadata key k: value, or a delete.
func (x *keyIndex) setMeta(k, value []byte, exists bool) {
	e := x.meta[string(k)]
	if e == nil {
		e = &metaEntry{key: string(k)}
		x.meta[e.key] = e
	}
	e.value, e.exists = value, exists
	if !e.dirty {
		e.dirty = true
		x.dirty = append(x.dirty, e)
	}
}

// dataEntry is what the index keeps of an existing user data key.
type dataEntry struct {
	version uint64
	rec     []byte // the whole record; nil when larger than maxCachedValue
}

// newDataEntry indexes record rec, which it may keep, and returns the
// record's value (aliasing rec).
func newDataEntry(rec []byte) (dataEntry, []byte, error) {
	v, value, err := engine.DecodeRecord(rec)
	if err != nil {
		return dataEntry{}, nil, err
	}
	if len(rec) > maxCachedValue {
		rec = nil
	}
	return dataEntry{version: v, rec: rec}, value, nil
}

// family is how the index keeps the keys of storage key k's family.
type family int

const (
	unindexed family = iota
	presence         // every existing key (present)
	valued           // every existing key with its value (held)
)

func familyOf(k []byte) family {
	switch k[0] {
	case engine.TxnPrefix:
		return presence
	case engine.IntentPrefix, engine.PreparedPrefix:
		return valued
	}
	return unindexed
}

// load rebuilds the index from db.
func (x *keyIndex) load(db *pebble.DB) error {
	*x = keyIndex{data: map[string]dataEntry{}, present: map[string]struct{}{}, held: map[string][]byte{}, meta: map[string]*metaEntry{}}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		switch {
		case k[0] == engine.DataPrefix:
			e, _, err := newDataEntry(it.Value())
			if err != nil {
				it.Close()
				return fmt.Errorf("key %q: %w", k, err)
			}
			e.rec = bytes.Clone(e.rec) // the iterator's value is only valid until Next
			x.data[string(k)] = e
		case familyOf(k) == presence:
			x.present[string(k)] = struct{}{}
		case familyOf(k) == valued:
			x.held[string(k)] = append([]byte(nil), it.Value()...)
		case k[0] == engine.MetaPrefix:
			x.meta[string(k)] = &metaEntry{key: string(k), value: bytes.Clone(it.Value()), exists: true}
		}
	}
	return it.Close()
}

// flushMeta writes the metadata keys changed since the last flush into b,
// in key order.
func (x *keyIndex) flushMeta(b *pebble.Batch) error {
	slices.SortFunc(x.dirty, func(a, b *metaEntry) int { return strings.Compare(a.key, b.key) })
	for _, e := range x.dirty {
		var err error
		if e.exists {
			err = b.Set([]byte(e.key), e.value, nil)
		} else {
			err = b.Delete([]byte(e.key), nil)
		}
		if err != nil {
			return err
		}
		e.dirty = false
	}
	x.dirty = x.dirty[:0]
	return nil
}

// batchStorage is the engine's Storage over two Pebble batches and the
// replica's keyIndex. Indexing a batch (so that reads see its writes) is a
// skiplist insert per write, a sixth of the engine's time on a placement;
// most of what an Update writes needs none. User data goes to bulk, not
// indexed: the key index answers every read of a data key, but for the
// value of a large record, which it keeps while the Update that wrote it
// runs (keyIndex.written). The change log goes there too: nothing in an
// Update reads it (Scan refuses to). Everything else, read back from
// Pebble (remembered outcomes, the expiry index, cross-shard records),
// goes to b, indexed, which Update appends to bulk before committing bulk
// alone: one atomic batch, as before.
type batchStorage struct {
	b    *pebble.Batch
	bulk *pebble.Batch
	idx  *keyIndex
}

// batch returns the batch that writes of storage key k go to.
func (s batchStorage) batch(k []byte) *pebble.Batch {
	if bulkFamily(k[0]) {
		return s.bulk
	}
	return s.b
}

// bulkFamily reports whether the keys that start with prefix are written
// to the unindexed batch.
func bulkFamily(prefix byte) bool {
	return prefix == engine.DataPrefix || prefix == engine.LogPrefix
}

var (
	_ engine.Storage       = batchStorage{}
	_ engine.VersionReader = batchStorage{}
	_ engine.RecordWriter  = batchStorage{}
)

func (s batchStorage) Get(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("statemachine: empty storage key")
	}
	switch key[0] {
	case engine.MetaPrefix:
		return s.idx.metaValue(key), nil
	case engine.DataPrefix:
		e, ok := s.idx.data[string(key)]
		if !ok || e.rec != nil {
			return e.rec, nil
		}
		if rec, ok := s.idx.writtenRecord(key); ok {
			return rec, nil
		}
	default:
		switch familyOf(key) {
		case presence:
			if _, ok := s.idx.present[string(key)]; !ok {
				return nil, nil
			}
		case valued:
			return s.idx.held[string(key)], nil
		}
	}
	return getValue(s.b, key)
}

// DataVersion implements engine.VersionReader from the index alone.
func (s batchStorage) DataVersion(key []byte) (uint64, bool, error) {
	e, ok := s.idx.data[string(key)]
	return e.version, ok, nil
}

func (s batchStorage) Set(key, value []byte) error {
	switch key[0] {
	case engine.MetaPrefix:
		s.idx.setMeta(key, value, true) // the engine's Set contract: value is not changed afterwards
		return nil
	case engine.DataPrefix:
		e, v, err := newDataEntry(value)
		if err != nil {
			return err
		}
		k := string(key)
		s.idx.data[k] = e
		if e.rec == nil {
			s.idx.addWritten(k, e.version, v)
		}
	default:
		switch familyOf(key) {
		case presence:
			s.idx.present[string(key)] = struct{}{}
		case valued:
			s.idx.held[string(key)] = value
		}
	}
	return s.batch(key).Set(key, value, nil)
}

// SetRecord implements engine.RecordWriter: the record is encoded in the
// batch's own memory, and kept by the index (a copy) only when small.
func (s batchStorage) SetRecord(key []byte, version uint64, value []byte) error {
	op := s.bulk.SetDeferred(len(key), engine.RecordSize(version, len(value)))
	copy(op.Key, key)
	engine.PutRecord(op.Value, version, value)
	e := dataEntry{version: version}
	k := string(key)
	if len(op.Value) <= maxCachedValue {
		e.rec = bytes.Clone(op.Value) // the batch's memory moves as it grows
	} else {
		s.idx.addWritten(k, version, value)
	}
	s.idx.data[k] = e
	return op.Finish()
}

// SetMessage implements engine.RecordWriter: the message is encoded in the
// batch's own memory, unless the index keeps the key's value.
func (s batchStorage) SetMessage(key []byte, m engine.Message) error {
	if key[0] == engine.MetaPrefix || key[0] == engine.DataPrefix || familyOf(key) == valued {
		b, err := m.MarshalVT()
		if err != nil {
			return err
		}
		return s.Set(key, b)
	}
	op := s.batch(key).SetDeferred(len(key), m.SizeVT())
	copy(op.Key, key)
	if _, err := m.MarshalToSizedBufferVT(op.Value); err != nil {
		return err
	}
	if familyOf(key) == presence {
		s.idx.present[string(key)] = struct{}{}
	}
	return op.Finish()
}

func (s batchStorage) Delete(key []byte) error {
	switch key[0] {
	case engine.MetaPrefix:
		s.idx.setMeta(key, nil, false)
		return nil
	case engine.DataPrefix:
		delete(s.idx.data, string(key))
	default:
		delete(s.idx.present, string(key))
		delete(s.idx.held, string(key))
	}
	return s.batch(key).Delete(key, nil)
}
