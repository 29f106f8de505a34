package troupev1

import (
	"cmp"
	"slices"
)

// keysDescending returns m's keys from the greatest to the least.
//
// The MarshalVT methods of objects_vtproto.pb.go range over a map field's
// keys through it (make proto rewrites vtprotobuf's ranging over the map
// itself, which has no deterministic mode): they write from the end of the
// buffer backwards, so the entries come out in ascending key order, as
// proto.MarshalOptions{Deterministic: true} writes them. An object's
// stored form is thus a function of its content, as it was before
// MarshalVT.
func keysDescending[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	return keys
}
