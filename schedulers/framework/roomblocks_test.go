package framework

import (
	"math/rand/v2"
	"testing"
)

// A search by roomBlocks passes over exactly the positions a search
// visiting every machine passes over, as rooms shrink and grow, and
// passes over whole runs often enough to pay: on random rooms (some
// negative, some of machines without a resource; most little, as in a
// full cell), in random orders, from random starts.
func TestRoomBlocksPassAsTheSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var runs, visits int
	for range 200 {
		rooms := make([]Room, 1+r.IntN(2000))
		scale := int64(1 + r.IntN(100000))
		for i := range rooms {
			rooms[i] = Room{CPU: r.Int64N(scale) - scale/10, Memory: r.Int64N(scale) - scale/10}
			if r.IntN(500) != 0 { // a full cell: most machines have little room
				rooms[i] = Room{CPU: rooms[i].CPU / 10, Memory: rooms[i].Memory / 10}
			}
			if r.IntN(20) == 0 {
				rooms[i].Memory = -1
			}
		}
		n := len(rooms)
		order := r.Perm(n)
		positions := make([]int, n)
		for at, idx := range order {
			positions[idx] = at
		}
		var b roomBlocks
		b.build(rooms, order)
		for range 50 {
			i := r.IntN(n)
			switch r.IntN(3) {
			case 0: // a placement
				rooms[i].CPU -= r.Int64N(scale / 4)
				rooms[i].Memory -= r.Int64N(scale / 4)
			case 1: // an eviction
				rooms[i].CPU += r.Int64N(scale / 10)
				rooms[i].Memory += r.Int64N(scale / 10)
				b.grow(positions[i], rooms[i])
			}
			cpu, memory := r.Int64N(scale)-scale/20, r.Int64N(scale)-scale/20
			start := r.IntN(n)
			for k := 0; k < n; k++ {
				at := (start + k) % n
				if p := b.pass(at, n-k, cpu, memory); p > 0 {
					for _, idx := range order[at : at+p] {
						if rooms[idx].Fits(cpu, memory) {
							t.Fatalf("passed over positions %d to %d for (%d, %d), but machine %d has room %v", at, at+p-1, cpu, memory, idx, rooms[idx])
						}
					}
					runs++
					k += p - 1
					continue
				}
				visits++
			}
		}
	}
	t.Logf("%d runs passed over, %d machines visited", runs, visits)
	if runs*roomRun < visits { // most positions passed over by runs
		t.Fatalf("%d runs passed over, %d machines visited", runs, visits)
	}
}
