package clientlib

import (
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// AllocPrefix starts the keys of every machine's counters.
const AllocPrefix = "/alloc/"

// AllocKey is the key of machine m's counter of resource r: the sum of
// the requests of the tasks bound to m, changed only by bounded adds.
func AllocKey(machine, resource string) string { return AllocPrefix + machine + "/" + resource }

// ClaimsCounter is the name, among a machine's counters, of its claims
// counter (ClaimsKey): not a resource, since resource names are built in
// (cpu, memory, ...) or "<domain>/<name>".
const ClaimsCounter = "claims"

// ClaimsKey is the key of machine m's claims counter, AllocKey(m,
// ClaimsCounter): the number of placements committed on m by schedulers
// in coarse-grained claims-only conflict detection
// (framework.CoarseClaims), which require its version and add to it in
// the same group. Only their placements change it (a task's end, stop or
// eviction does not), so its version is the machine's claim sequence
// number, as in Google's lightweight Omega simulator. It lives under
// AllocPrefix, on the machine's shard, so that the caches and views that
// follow a machine's counters follow it too; readers that sum resources
// from the counters skip it (IsClaimsKey).
func ClaimsKey(machine string) string { return AllocKey(machine, ClaimsCounter) }

// IsClaimsKey reports whether key is a machine's claims counter.
func IsClaimsKey(key string) bool {
	rest, ok := strings.CutPrefix(key, AllocPrefix)
	if !ok {
		return false
	}
	_, counter, _ := strings.Cut(rest, "/")
	return counter == ClaimsCounter
}

// BindingKey is the key of the Binding of task t on its machine.
func BindingKey(t *troupev1.Task) string {
	return Bindings.Prefix + t.GetBinding().GetMachine() + "/" +
		TaskRef(t.GetMetadata().GetNamespace(), t.GetSpec().GetJob(), t.GetSpec().GetIndex())
}

// Unbind adds to group g what takes task t off its machine, if it is
// bound (Release). It returns a copy of t without its binding, bound or
// not, for the caller to change and write with the status it wants; t
// itself (a cached object, say) is left as it is.
func Unbind(g *Group, t *troupev1.Task) *troupev1.Task {
	out := proto.Clone(t).(*troupev1.Task)
	out.Binding = nil
	Release(g, t)
	return out
}

// Release adds to group g what takes task t off its machine, if it is
// bound: its Binding is deleted (the agent stops it) and its requests are
// given back to the machine's counters. A writer that removes t from the
// store needs nothing else (and no copy of it).
func Release(g *Group, t *troupev1.Task) {
	m := t.GetBinding().GetMachine()
	if m == "" {
		return
	}
	g.Delete(BindingKey(t))
	req := t.GetSpec().GetTemplate().GetRequests()
	for _, r := range slices.Sorted(maps.Keys(req)) {
		g.Add(AllocKey(m, r), -req[r], 0, math.MaxInt64)
	}
}
