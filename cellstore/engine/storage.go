package engine

import (
	"bytes"

	"github.com/google/btree"
)

// Storage is the state of one shard as the engine sees it. Reads must see
// the writes made earlier through the same Storage (read-your-writes), which
// is what lets several proposals apply in one batch. Implementations need
// not be safe for concurrent use.
type Storage interface {
	// Get returns the value of key, or nil if it does not exist. The
	// returned slice is only valid until the next write.
	Get(key []byte) ([]byte, error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan calls fn for each key in [lower, upper) in key order (upper nil:
	// no bound) until fn returns false. fn must not write.
	Scan(lower, upper []byte, fn func(key, value []byte) bool) error
}

type memItem struct{ k, v []byte }

// MemStorage is an in-memory Storage, ordered by key. It backs engine tests
// and the in-memory store of the simulator.
type MemStorage struct{ t *btree.BTreeG[memItem] }

var _ Storage = (*MemStorage)(nil)

// NewMemStorage returns an empty MemStorage.
func NewMemStorage() *MemStorage {
	return &MemStorage{t: btree.NewG(32, func(a, b memItem) bool { return bytes.Compare(a.k, b.k) < 0 })}
}

// Get implements Storage.
func (m *MemStorage) Get(key []byte) ([]byte, error) {
	it, ok := m.t.Get(memItem{k: key})
	if !ok {
		return nil, nil
	}
	return it.v, nil
}

// Set implements Storage.
func (m *MemStorage) Set(key, value []byte) error {
	m.t.ReplaceOrInsert(memItem{k: bytes.Clone(key), v: bytes.Clone(value)})
	return nil
}

// Delete implements Storage.
func (m *MemStorage) Delete(key []byte) error {
	m.t.Delete(memItem{k: key})
	return nil
}

// Scan implements Storage.
func (m *MemStorage) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	m.t.AscendGreaterOrEqual(memItem{k: lower}, func(it memItem) bool {
		if upper != nil && bytes.Compare(it.k, upper) >= 0 {
			return false
		}
		return fn(it.k, it.v)
	})
	return nil
}

// Len is the number of stored keys, internal ones included.
func (m *MemStorage) Len() int { return m.t.Len() }
