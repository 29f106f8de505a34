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
// it holds. Safe for concurrent use.
type Indexer[T proto.Message] struct {
	mu      sync.RWMutex
	objects map[string]T
	funcs   map[string]IndexFunc[T]
	indexes map[string]map[string]map[string]struct{} // index → value → keys
	values  map[string]map[string][]string            // key → index → values
	bytes   int
}

// NewIndexer returns an empty Indexer with the given indexes.
func NewIndexer[T proto.Message](indexes map[string]IndexFunc[T]) *Indexer[T] {
	x := &Indexer[T]{objects: map[string]T{}, funcs: indexes, indexes: map[string]map[string]map[string]struct{}{}, values: map[string]map[string][]string{}}
	for name := range indexes {
		x.indexes[name] = map[string]map[string]struct{}{}
	}
	return x
}

// set stores a copy of obj at key (the Informer calls it; obj is not
// retained by anyone else).
func (x *Indexer[T]) set(key string, obj T) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(key)
	x.objects[key] = obj
	x.bytes += proto.Size(obj)
	vals := map[string][]string{}
	for name, f := range x.funcs {
		vs := f(obj)
		vals[name] = vs
		for _, v := range vs {
			set := x.indexes[name][v]
			if set == nil {
				set = map[string]struct{}{}
				x.indexes[name][v] = set
			}
			set[key] = struct{}{}
		}
	}
	x.values[key] = vals
}

// delete removes key.
func (x *Indexer[T]) delete(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(key)
}

func (x *Indexer[T]) remove(key string) {
	old, ok := x.objects[key]
	if !ok {
		return
	}
	x.bytes -= proto.Size(old)
	for name, vs := range x.values[key] {
		for _, v := range vs {
			delete(x.indexes[name][v], key)
			if len(x.indexes[name][v]) == 0 {
				delete(x.indexes[name], v)
			}
		}
	}
	delete(x.values, key)
	delete(x.objects, key)
}

// replace swaps the whole content (after a relist).
func (x *Indexer[T]) replace(objs map[string]T) {
	x.mu.Lock()
	keys := make([]string, 0, len(x.objects))
	for k := range x.objects {
		if _, keep := objs[k]; !keep {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		x.remove(k)
	}
	x.mu.Unlock()
	for k, obj := range objs {
		x.set(k, obj)
	}
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
