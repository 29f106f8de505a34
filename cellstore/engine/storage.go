package engine

import "github.com/google/btree"

// Storage is the state of one shard as the engine sees it. Reads must see
// the writes made earlier through the same Storage (read-your-writes), which
// is what lets several proposals apply in one batch. Implementations need
// not be safe for concurrent use.
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

// MemStorage is an in-memory Storage, ordered by key. It backs engine tests
// and the in-memory store of the simulator. Values are found by hash, and
// the keys are also kept in order for Scan: most writes change the value of
// a key that exists (a counter, a task bound), which costs no ordered
// insert.
type MemStorage struct {
	values map[string][]byte
	keys   *btree.BTreeG[string]
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
	if _, ok := m.values[string(key)]; ok {
		m.values[string(key)] = v
		return nil
	}
	k := string(key)
	m.values[k] = v
	m.keys.ReplaceOrInsert(k)
	return nil
}

// Delete implements Storage.
func (m *MemStorage) Delete(key []byte) error {
	if _, ok := m.values[string(key)]; ok {
		delete(m.values, string(key))
		m.keys.Delete(string(key))
	}
	return nil
}

// Scan implements Storage.
func (m *MemStorage) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	m.keys.AscendGreaterOrEqual(string(lower), func(k string) bool {
		if upper != nil && k >= string(upper) {
			return false
		}
		return fn([]byte(k), m.values[k])
	})
	return nil
}

// Len is the number of stored keys, internal ones included.
func (m *MemStorage) Len() int { return len(m.values) }
