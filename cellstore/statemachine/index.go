package statemachine

import (
	"fmt"
	"maps"
	"slices"

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
//   - data: every user data key that exists, with its record when small;
//   - present: every txn_id with a remembered outcome (looked up by name,
//     mostly absent);
//   - held: the intents and prepared records of cross-shard transactions
//     in progress, with their values: few, short-lived, and read back by
//     every RESOLVE;
//   - meta: the shard's metadata keys, which every proposal reads and
//     rewrites. Their writes are combined: only the last value of an
//     Update batch goes to Pebble (see flushMeta).
//
// It is derived state: rebuilt from Pebble when the replica opens or
// recovers a snapshot, and kept current by every write through
// batchStorage.
type keyIndex struct {
	data    map[string][]byte // storage key → record (nil: exists, not cached)
	present map[string]struct{}
	held    map[string][]byte
	meta    map[string][]byte
	dirty   map[string]bool // meta keys written since the last flushMeta
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
	*x = keyIndex{data: map[string][]byte{}, present: map[string]struct{}{}, held: map[string][]byte{}, meta: map[string][]byte{}, dirty: map[string]bool{}}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		switch {
		case k[0] == engine.DataPrefix:
			x.data[string(k)] = cacheable(it.Value())
		case familyOf(k) == presence:
			x.present[string(k)] = struct{}{}
		case familyOf(k) == valued:
			x.held[string(k)] = append([]byte(nil), it.Value()...)
		case k[0] == engine.MetaPrefix:
			x.meta[string(k)] = append([]byte(nil), it.Value()...)
		}
	}
	return it.Close()
}

func cacheable(rec []byte) []byte {
	if len(rec) > maxCachedValue {
		return nil
	}
	return append(make([]byte, 0, len(rec)), rec...)
}

// flushMeta writes the metadata keys changed since the last flush into b.
func (x *keyIndex) flushMeta(b *pebble.Batch) error {
	for _, k := range slices.Sorted(maps.Keys(x.dirty)) {
		var err error
		if v, ok := x.meta[k]; ok {
			err = b.Set([]byte(k), v, nil)
		} else {
			err = b.Delete([]byte(k), nil)
		}
		if err != nil {
			return err
		}
	}
	clear(x.dirty)
	return nil
}

// batchStorage is the engine's Storage over an indexed Pebble batch and
// the replica's keyIndex.
type batchStorage struct {
	b   *pebble.Batch
	idx *keyIndex
}

var _ engine.Storage = batchStorage{}

func (s batchStorage) Get(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("statemachine: empty storage key")
	}
	switch key[0] {
	case engine.MetaPrefix:
		return s.idx.meta[string(key)], nil
	case engine.DataPrefix:
		rec, ok := s.idx.data[string(key)]
		if !ok || rec != nil {
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

func (s batchStorage) Set(key, value []byte) error {
	switch key[0] {
	case engine.MetaPrefix:
		s.idx.meta[string(key)] = append([]byte(nil), value...)
		s.idx.dirty[string(key)] = true
		return nil
	case engine.DataPrefix:
		s.idx.data[string(key)] = cacheable(value)
	default:
		switch familyOf(key) {
		case presence:
			s.idx.present[string(key)] = struct{}{}
		case valued:
			s.idx.held[string(key)] = append([]byte(nil), value...)
		}
	}
	return s.b.Set(key, value, nil)
}

func (s batchStorage) Delete(key []byte) error {
	switch key[0] {
	case engine.MetaPrefix:
		delete(s.idx.meta, string(key))
		s.idx.dirty[string(key)] = true
		return nil
	case engine.DataPrefix:
		delete(s.idx.data, string(key))
	default:
		delete(s.idx.present, string(key))
		delete(s.idx.held, string(key))
	}
	return s.b.Delete(key, nil)
}
