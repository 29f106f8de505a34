package cache

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
)

// IndexFunc returns the index values of an object (none: not indexed).
type IndexFunc[T proto.Message] func(obj T) []string

// DecodeFunc turns a stored key and value into an object, version filled
// in.
type DecodeFunc[T proto.Message] func(key string, value []byte, version uint64) (T, error)

// Indexer is a cache's store: objects by key, and secondary indexes. It
// holds each object as the store encodes it, a fraction of the memory of
// the decoded message (a task's maps alone take more than its
// encoding), and decodes it for each reader: every object handed out is
// a new one, so no caller can change what it holds. Safe for concurrent
// use.
type Indexer[T proto.Message] struct {
	mu      sync.RWMutex
	decode  DecodeFunc[T]
	entries map[string]entry
	names   []string                         // of the indexes, sorted
	funcs   []IndexFunc[T]                   // by position in names
	indexes []map[string]map[string]struct{} // by position in names: value → keys
	bytes   int
}

// entry is what the Indexer holds of a key: its object's encoding and
// version, and its index values (in the order of names).
type entry struct {
	value   []byte
	version uint64
	values  [][]string
}

// NewIndexer returns an empty Indexer that decodes its objects with
// decode and keeps the given indexes.
func NewIndexer[T proto.Message](decode DecodeFunc[T], indexes map[string]IndexFunc[T]) *Indexer[T] {
	x := &Indexer[T]{decode: decode, entries: map[string]entry{}, names: slices.Sorted(maps.Keys(indexes))}
	// By position, not by name: an object's index values are set and
	// compared on each of its changes.
	for _, name := range x.names {
		x.funcs = append(x.funcs, indexes[name])
		x.indexes = append(x.indexes, map[string]map[string]struct{}{})
	}
	return x
}

// set stores obj, decoded from value at version, at key, which held old
// if it existed. The Informer, the one writer, calls it with what held
// told it just before: a lookup fewer for every event. It keeps a copy of
// value: a response's buffer, or a store's own record, is not pinned.
// Index entries that stay the same (a task's job, usually) are left
// alone.
func (x *Indexer[T]) set(key string, obj T, value []byte, version uint64, old entry, existed bool) {
	value = bytes.Clone(value)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.bytes += len(value) - len(old.value)
	e := entry{value: value, version: version}
	if len(x.names) > 0 {
		e.values = make([][]string, len(x.names))
	}
	for i, index := range x.indexes {
		vs := x.funcs[i](obj)
		if existed && slices.Equal(vs, old.values[i]) {
			e.values[i] = old.values[i]
			continue
		}
		e.values[i] = vs
		if existed {
			x.unindex(index, key, old.values[i])
		}
		for _, v := range vs {
			set := index[v]
			if set == nil {
				set = map[string]struct{}{}
				index[v] = set
			}
			set[key] = struct{}{}
		}
	}
	x.entries[key] = e
}

// unindex removes key from the sets of index's values.
func (x *Indexer[T]) unindex(index map[string]map[string]struct{}, key string, values []string) {
	for _, v := range values {
		delete(index[v], key)
		if len(index[v]) == 0 {
			delete(index, v)
		}
	}
}

// delete removes key.
func (x *Indexer[T]) delete(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[key]
	if !ok {
		return
	}
	x.bytes -= len(e.value)
	for i, vs := range e.values {
		x.unindex(x.indexes[i], key, vs)
	}
	delete(x.entries, key)
}

// held returns what the Indexer holds at key: its version, and the
// encoding to decode the object it replaces from.
func (x *Indexer[T]) held(key string) (entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.entries[key]
	return e, ok
}

// Get returns the object at key (a new one).
func (x *Indexer[T]) Get(key string) (T, bool) {
	x.mu.RLock()
	e, ok := x.entries[key]
	x.mu.RUnlock()
	if !ok {
		var zero T
		return zero, false
	}
	return x.object(key, e), true
}

// object decodes entry e of key. The value decoded when it was stored,
// and decoding is deterministic, so it cannot fail.
func (x *Indexer[T]) object(key string, e entry) T {
	obj, err := x.decode(key, e.value, e.version)
	if err != nil {
		panic(fmt.Sprintf("cache: the value held at %s, decoded once, no longer decodes: %v", key, err))
	}
	return obj
}

// Keys returns every key, sorted.
func (x *Indexer[T]) Keys() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Sorted(maps.Keys(x.entries))
}

// List returns every object (new ones), in key order.
func (x *Indexer[T]) List() []T {
	return x.objects(x.Keys())
}

// ByIndex returns the objects (new ones) whose index has value, in key
// order.
func (x *Indexer[T]) ByIndex(index, value string) []T {
	return x.objects(x.IndexKeys(index, value))
}

// IndexKeys returns the keys of the objects whose index has value, sorted.
func (x *Indexer[T]) IndexKeys(index, value string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := slices.Index(x.names, index)
	if i < 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(x.indexes[i][value]))
}

// objects returns the objects at keys that are held, in order.
func (x *Indexer[T]) objects(keys []string) []T {
	x.mu.RLock()
	es := make([]entry, 0, len(keys))
	held := keys[:0:0]
	for _, k := range keys {
		if e, ok := x.entries[k]; ok {
			es, held = append(es, e), append(held, k)
		}
	}
	x.mu.RUnlock()
	out := make([]T, len(es))
	for i, e := range es {
		out[i] = x.object(held[i], e)
	}
	return out
}

// Len is the number of objects.
func (x *Indexer[T]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.entries)
}

// Bytes is the encoded size of the objects held (what the Indexer keeps
// of them, without its keys and indexes).
func (x *Indexer[T]) Bytes() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.bytes
}
