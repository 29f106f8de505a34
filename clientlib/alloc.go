package clientlib

import (
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// AllocPrefix starts the keys of every machine's counters.
const AllocPrefix = "/alloc/"

// AllocKey is the key of machine m's counter of resource r: the sum of
// the requests of the tasks bound to m, changed only by bounded adds.
func AllocKey(machine, resource string) string { return AllocPrefix + machine + "/" + resource }

// BindingKey is the key of the Binding of task t on its machine.
func BindingKey(t *troupev1.Task) string {
	return Bindings.Prefix + t.GetBinding().GetMachine() + "/" +
		TaskRef(t.GetMetadata().GetNamespace(), t.GetSpec().GetJob(), t.GetSpec().GetIndex())
}

// Unbind adds to group g what takes task t off its machine, if it is
// bound: its Binding is deleted (the agent stops it) and its requests are
// given back to the machine's counters. It returns a copy of t without its
// binding, bound or not, for the caller to change and write with the status
// it wants; t itself (a cached object, say) is left as it is.
func Unbind(g *Group, t *troupev1.Task) *troupev1.Task {
	out := proto.Clone(t).(*troupev1.Task)
	out.Binding = nil
	m := t.GetBinding().GetMachine()
	if m == "" {
		return out
	}
	g.Delete(BindingKey(t))
	req := t.GetSpec().GetTemplate().GetRequests()
	for _, r := range slices.Sorted(maps.Keys(req)) {
		g.Add(AllocKey(m, r), -req[r], 0, math.MaxInt64)
	}
	return out
}
