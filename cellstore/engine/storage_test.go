package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// MemStorage's Scan sees exactly the keys that exist, in order, however
// sets, deletes and scans interleave (keys created, deleted and created
// again between scans; long stretches without one; scans of part of the
// range, of keys of several first bytes), against a map.
func TestMemStorageScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	st := NewMemStorage()
	want := map[string]string{}
	for step := range 40000 {
		key := func() string { return fmt.Sprintf("%c%02d", 'a'+r.IntN(3), r.IntN(40)) } // keys of several first bytes
		k := key()
		// Stretches of 18,000 steps without a scan make the fresh keys
		// pile up past their compaction.
		switch n := r.IntN(100); {
		case n < 55 || n >= 95 && step%20000 < 18000:
			v := fmt.Sprint(step)
			if err := st.Set([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		case n < 95:
			if err := st.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		default:
			lower, upper := key(), []byte(nil)
			if r.IntN(2) == 0 {
				upper = []byte(key())
			}
			var got []string
			if err := st.Scan([]byte(lower), upper, func(k, v []byte) bool {
				if string(v) != want[string(k)] {
					t.Fatalf("step %d: %s = %q, want %q", step, k, v, want[string(k)])
				}
				got = append(got, string(k))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			exp := slices.DeleteFunc(slices.Sorted(maps.Keys(want)), func(k string) bool { return k < lower || upper != nil && k >= string(upper) })
			if !slices.Equal(got, exp) {
				t.Fatalf("step %d: Scan(%s, %s) = %v, want %v", step, lower, upper, got, exp)
			}
		}
		if st.Len() != len(want) {
			t.Fatalf("step %d: Len %d, want %d", step, st.Len(), len(want))
		}
	}
}

// A key created and deleted over and over, in a range scanned once and
// then no more, leaves MemStorage's fresh keys bounded: their compaction
// drops the repeats. In a range never scanned (the simulator's tasks),
// keys are only values.
func TestMemStorageFreshKeysBounded(t *testing.T) {
	st := NewMemStorage()
	if err := st.Set([]byte("ftask"), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := st.Scan([]byte("d"), []byte("e"), func(k, v []byte) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete([]byte("ftask")); err != nil {
		t.Fatal(err)
	}
	if len(st.fresh['f']) != 0 || st.keys.Len() != 0 {
		t.Fatalf("a key of a range never scanned is kept in order: %d fresh, %d ordered", len(st.fresh['f']), st.keys.Len())
	}
	for i := range 50000 {
		if err := st.Set([]byte("dtask"), []byte{1}); err != nil {
			t.Fatal(err)
		}
		if err := st.Delete([]byte("dtask")); err != nil {
			t.Fatal(err)
		}
		if n := len(st.fresh['d']); n > 2*st.Len()+1024+1 {
			t.Fatalf("after %d rounds %d fresh keys for %d stored", i+1, n, st.Len())
		}
	}
}
