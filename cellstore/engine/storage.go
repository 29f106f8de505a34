package engine

import (
	"slices"

	"github.com/google/btree"
)

// Storage is the state of one shard as the engine sees it. Reads must see
// the writes made earlier through the same Storage (read-your-writes), which
// is what lets several proposals apply in one batch. Implementations need
// not be safe for concurrent use, and must neither keep nor change the key
// slices they are given: the engine reuses one buffer for its keys.
type Storage interface {
	// Get returns the value of key, or nil if it does not exist. The
	// returned slice is only valid until the next write.
	Get(key []byte) ([]byte, error)
	// Set may keep value (MemStorage does): the caller must not change
	// it afterwards.
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan calls fn for each key in [lower, upper) in key order (upper nil:
	// no bound) until fn returns false. fn must not write.
	Scan(lower, upper []byte, fn func(key, value []byte) bool) error
}

// VersionReader is a Storage that knows the version of every user key
// without reading its value (the state machine's key index): the engine
// then reads a value only where it needs one (a counter), not for a
// version condition or to tell whether a deleted key exists.
type VersionReader interface {
	// DataVersion returns the version of the user key stored at dataKey
	// (DataKey) and whether it exists; it agrees with DecodeRecord of what
	// Get returns.
	DataVersion(dataKey []byte) (version uint64, exists bool, err error)
}

// MemStorage is an in-memory Storage, ordered by key. It backs engine tests
// and the in-memory store of the simulator. Values are found by hash, and
// the keys are put in order only when a Scan of their range needs them:
// the keys of a first byte (the engine's key kinds) are ordered from the
// first Scan that reaches them on, and until then cost nothing but their
// hash-map entry. Most writes change the value of a key that exists (a
// counter, a task bound), and a store nobody reads by range (the
// simulator's: its engine scans only its own small indexes, such as the
// outcomes' expiry) creates and deletes data keys without ever ordering
// them.
type MemStorage struct {
	values map[string][]byte
	// scanned marks the first bytes of the keys a Scan has reached:
	// keys holds those keys in order, but for fresh[b], the keys of
	// first byte b created since their range was last scanned (some
	// since deleted or ordered), added to keys by the next Scan that
	// reaches them. The keys of a first byte never scanned are in
	// neither: the first Scan that reaches them finds them among all
	// the values.
	scanned [256]bool
	keys    *btree.BTreeG[string]
	fresh   [256][]string
}

var _ Storage = (*MemStorage)(nil)

// NewMemStorage returns an empty MemStorage.
func NewMemStorage() *MemStorage {
	return &MemStorage{values: map[string][]byte{}, keys: btree.NewOrderedG[string](32)}
}

// Get implements Storage.
func (m *MemStorage) Get(key []byte) ([]byte, error) { return m.values[string(key)], nil }

// Set implements Storage.
func (m *MemStorage) Set(key, value []byte) error {
	v := value
	if v == nil {
		v = []byte{} // present, if empty: Get tells it from an absent key
	}
	b := firstByte(key)
	if !m.scanned[b] {
		m.values[string(key)] = v // one hash: no order to keep
		return nil
	}
	if _, ok := m.values[string(key)]; ok {
		m.values[string(key)] = v
		return nil
	}
	k := string(key)
	if len(m.fresh[b]) >= 2*len(m.values)+1024 {
		m.compact(b)
	}
	m.values[k] = v
	m.fresh[b] = append(m.fresh[b], k)
	return nil
}

// Delete implements Storage.
func (m *MemStorage) Delete(key []byte) error {
	if _, ok := m.values[string(key)]; ok {
		delete(m.values, string(key))
		if m.scanned[firstByte(key)] {
			m.keys.Delete(string(key))
		}
	}
	return nil
}

// Scan implements Storage.
func (m *MemStorage) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	last := 255
	if upper != nil {
		last = firstByte(upper)
	}
	m.order(firstByte(lower), last)
	m.keys.AscendGreaterOrEqual(string(lower), func(k string) bool {
		if upper != nil && k >= string(upper) {
			return false
		}
		return fn([]byte(k), m.values[k])
	})
	return nil
}

// compact drops from fresh[b] the keys deleted or ordered since, and
// the repeats of a key deleted and created again: what is left is at
// most the keys that exist, so compacting again takes as many appends.
func (m *MemStorage) compact(b int) {
	seen := make(map[string]bool, len(m.fresh[b]))
	m.fresh[b] = slices.DeleteFunc(m.fresh[b], func(k string) bool {
		_, ok := m.values[k]
		drop := !ok || seen[k] || m.keys.Has(k)
		seen[k] = true
		return drop
	})
}

// order puts the keys of first bytes first to last that exist in keys:
// the fresh ones of bytes scanned before, and every one of the others,
// found in one pass over the values.
func (m *MemStorage) order(first, last int) {
	var unscanned [256]bool
	found := false
	for b := first; b <= last; b++ {
		if !m.scanned[b] {
			unscanned[b], m.scanned[b], found = true, true, true
			continue
		}
		for _, k := range m.fresh[b] {
			if _, ok := m.values[k]; ok {
				m.keys.ReplaceOrInsert(k)
			}
		}
		m.fresh[b] = m.fresh[b][:0]
	}
	if found {
		for k := range m.values {
			if unscanned[firstByte(k)] {
				m.keys.ReplaceOrInsert(k)
			}
		}
	}
}

// firstByte is the first byte of k, which decides how its order is kept
// (the empty key, first in order, goes with the keys of byte 0).
func firstByte[K string | []byte](k K) int {
	if len(k) == 0 {
		return 0
	}
	return int(k[0])
}

// Len is the number of stored keys, internal ones included.
func (m *MemStorage) Len() int { return len(m.values) }
