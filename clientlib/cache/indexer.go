package cache

import (
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
)

// IndexFunc returns the index values of an object (none: not indexed).
type IndexFunc[T proto.Message] func(obj T) []string

// Indexer is a cache's store: objects by key, and secondary indexes. It
// keeps its own copies and hands out copies, so no caller can change what
// it holds (the Informer's handlers alone see its objects themselves).
// Safe for concurrent use.
type Indexer[T proto.Message] struct {
	mu      sync.RWMutex
	objects map[string]T
	funcs   map[string]IndexFunc[T]
	indexes map[string]map[string]map[string]struct{} // index → value → keys
	meta    map[string]keyMeta
	names   []string // of the indexes, sorted
	bytes   int
}

// keyMeta is what the Indexer remembers of a key besides its object.
type keyMeta struct {
	size   int        // encoded size
	values [][]string // index values, in the order of names
}

// NewIndexer returns an empty Indexer with the given indexes.
func NewIndexer[T proto.Message](indexes map[string]IndexFunc[T]) *Indexer[T] {
	x := &Indexer[T]{objects: map[string]T{}, funcs: indexes, indexes: map[string]map[string]map[string]struct{}{}, meta: map[string]keyMeta{}}
	for name := range indexes {
		x.indexes[name] = map[string]map[string]struct{}{}
		x.names = append(x.names, name)
	}
	slices.Sort(x.names)
	return x
}

// set stores obj, of encoded size bytes, at key (the Informer calls it;
// obj is not retained by anyone else). Index entries that stay the same
// (a task's job, usually) are left alone.
func (x *Indexer[T]) set(key string, obj T, size int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, existed := x.meta[key]
	x.objects[key] = obj
	x.bytes += size - old.size
	m := keyMeta{size: size, values: make([][]string, len(x.names))}
	for i, name := range x.names {
		vs := x.funcs[name](obj)
		m.values[i] = vs
		if existed && slices.Equal(vs, old.values[i]) {
			continue
		}
		if existed {
			x.unindex(name, key, old.values[i])
		}
		for _, v := range vs {
			set := x.indexes[name][v]
			if set == nil {
				set = map[string]struct{}{}
				x.indexes[name][v] = set
			}
			set[key] = struct{}{}
		}
	}
	x.meta[key] = m
}

// unindex removes key from the sets of index name's values.
func (x *Indexer[T]) unindex(name, key string, values []string) {
	index := x.indexes[name]
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
	x.remove(key)
}

func (x *Indexer[T]) remove(key string) {
	m, ok := x.meta[key]
	if !ok {
		return
	}
	x.bytes -= m.size
	for i, vs := range m.values {
		x.unindex(x.names[i], key, vs)
	}
	delete(x.meta, key)
	delete(x.objects, key)
}

// peek returns the object at key itself, not a copy: for the Informer,
// which hands it to handlers as read-only.
func (x *Indexer[T]) peek(key string) (T, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	obj, ok := x.objects[key]
	return obj, ok
}

// Get returns a copy of the object at key.
func (x *Indexer[T]) Get(key string) (T, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	obj, ok := x.objects[key]
	if !ok {
		var zero T
		return zero, false
	}
	return proto.Clone(obj).(T), true
}

// Keys returns every key, sorted.
func (x *Indexer[T]) Keys() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Sorted(maps.Keys(x.objects))
}

// List returns copies of every object, in key order.
func (x *Indexer[T]) List() []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.copies(slices.Sorted(maps.Keys(x.objects)))
}

// ByIndex returns copies of the objects whose index has value, in key
// order.
func (x *Indexer[T]) ByIndex(index, value string) []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.copies(slices.Sorted(maps.Keys(x.indexes[index][value])))
}

// IndexKeys returns the keys of the objects whose index has value, sorted.
func (x *Indexer[T]) IndexKeys(index, value string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Sorted(maps.Keys(x.indexes[index][value]))
}

func (x *Indexer[T]) copies(keys []string) []T {
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = proto.Clone(x.objects[k]).(T)
	}
	return out
}

// Len is the number of objects.
func (x *Indexer[T]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.objects)
}

// Bytes is the encoded size of the objects held (a lower bound of the
// memory they take).
func (x *Indexer[T]) Bytes() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.bytes
}
