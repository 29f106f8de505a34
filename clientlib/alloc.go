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

// Unbind adds to group g what takes bound task t off its machine: its
// Binding is deleted (the agent stops it) and its requests are given back
// to the machine's counters. It returns t without its binding, for the
// caller to write with the status it wants.
func Unbind(g *Group, t *troupev1.Task) *troupev1.Task {
	m := t.GetBinding().GetMachine()
	if m == "" {
		return t
	}
	g.Delete(BindingKey(t))
	req := t.GetSpec().GetTemplate().GetRequests()
	for _, r := range slices.Sorted(maps.Keys(req)) {
		g.Add(AllocKey(m, r), -req[r], 0, math.MaxInt64)
	}
	out := proto.Clone(t).(*troupev1.Task)
	out.Binding = nil
	return out
}
