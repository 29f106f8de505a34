// Package keyspace maps keys to shards and encodes watch cursors.
//
// A key's shard key is derived from its family (first path segment):
//
//	/machines/<m> /leases/<m> /alloc/<m>/… /bindings/<m>/…
//	/runs/<m>/… /machineevents/<m>/…                       →  "m/<m>"
//	/jobs/<ns>/<job> /tasks/<ns>/<job>/… /events/<ns>/<job>/…
//	/jobstops/<ns>/<job> /scheduling/<ns>/<job>            →  "j/<ns>/<job>"
//	/<family>/<name>/… (anything else)                     →  "/<family>/<name>"
//
// so all keys of one machine live on one shard, and so do all keys of one
// job. The shard is FNV-1a(shard key) mod the cell's shard count, which is
// fixed when the cell is created.
package keyspace

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// machineFamilies hold machine-scoped keys; jobFamilies job-scoped ones.
var (
	machineFamilies = map[string]bool{"machines": true, "leases": true, "alloc": true, "bindings": true, "runs": true,
		"machineevents": true}
	jobFamilies = map[string]bool{"jobs": true, "tasks": true, "events": true, "jobstops": true,
		"scheduling": true}
)

// segments returns how many path segments after the family make up the
// shard key of family, and the shard key's tag.
func segments(family string) (int, string) {
	switch {
	case machineFamilies[family]:
		return 1, "m/"
	case jobFamilies[family]:
		return 2, "j/"
	default:
		return 1, "/" + family + "/"
	}
}

// ShardKey returns the shard key of key.
func ShardKey(key string) string {
	family, rest, ok := strings.Cut(strings.TrimPrefix(key, "/"), "/")
	if !ok {
		return key
	}
	n, tag := segments(family)
	parts := strings.SplitN(rest, "/", n+1)
	if len(parts) > n {
		parts = parts[:n]
	}
	return tag + strings.Join(parts, "/")
}

// Router maps keys to shard indexes in [0, Shards).
type Router struct{ shards uint32 }

// NewRouter returns the router of a cell with n shards (n >= 1).
func NewRouter(n uint32) Router {
	if n == 0 {
		n = 1
	}
	return Router{shards: n}
}

// Shards is the cell's shard count.
func (r Router) Shards() uint32 { return r.shards }

// Shard returns the shard index of key.
func (r Router) Shard(key string) uint32 {
	if r.shards == 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(ShardKey(key)))
	return uint32(h.Sum64() % uint64(r.shards))
}

// KeyOn returns the first key fmt.Sprintf(format, i), i = 0, 1, ...,
// that lives on shard, for tests and benchmarks that aim at a shard
// ("/machines/m%d"). It panics when the first million keys of format
// miss the shard (format without a verb, or shard out of range).
func (r Router) KeyOn(shard uint32, format string) string {
	for i := range 1 << 20 {
		if k := fmt.Sprintf(format, i); r.Shard(k) == shard {
			return k
		}
	}
	panic(fmt.Sprintf("keyspace: no key of the form %q on shard %d of %d", format, shard, r.shards))
}

// PrefixShards returns the shards that may hold keys under prefix: one
// shard when the prefix fixes the shard key (such as "/bindings/m1/"), all
// shards otherwise.
func (r Router) PrefixShards(prefix string) []uint32 {
	if r.shards > 1 && fixesShardKey(prefix) {
		return []uint32{r.Shard(prefix)}
	}
	all := make([]uint32, r.shards)
	for i := range all {
		all[i] = uint32(i)
	}
	return all
}

// fixesShardKey reports whether every key with prefix has the same shard
// key: the family and all shard-key segments are complete (followed by "/").
func fixesShardKey(prefix string) bool {
	family, rest, ok := strings.Cut(strings.TrimPrefix(prefix, "/"), "/")
	if !ok || !strings.HasPrefix(prefix, "/") {
		return false
	}
	n, _ := segments(family)
	return strings.Count(rest, "/") >= n
}
