package framework

import (
	"math/rand/v2"
	"testing"
)

// A roomIndex never answers that no machine has room where one has,
// as rooms shrink and grow, and answers it where a plain search finds
// none often enough to pay: on random rooms (some negative, some of
// machines without a resource), against visiting them all.
func TestRoomIndexAnswersAsTheSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var none, noneFound int
	for range 2000 {
		rooms := make([]Room, 1+r.IntN(300))
		scale := int64(1 + r.IntN(100000))
		for i := range rooms {
			rooms[i] = Room{CPU: r.Int64N(scale) - scale/10, Memory: r.Int64N(scale) - scale/10}
			if r.IntN(20) == 0 {
				rooms[i].Memory = -1
			}
		}
		var x roomIndex
		x.build(rooms, r.Int64N(3)*r.Int64N(scale/100+1)) // the width of rooms, or another
		for range 50 {
			i := r.IntN(len(rooms))
			switch r.IntN(3) {
			case 0: // a placement
				rooms[i].CPU -= r.Int64N(scale / 4)
				rooms[i].Memory -= r.Int64N(scale / 4)
			case 1: // an eviction
				rooms[i].CPU += r.Int64N(scale)
				rooms[i].Memory += r.Int64N(scale)
				x.grow(rooms[i])
			}
			cpu, memory := r.Int64N(scale)-scale/20, r.Int64N(scale)-scale/20
			fits := false
			for _, room := range rooms {
				fits = fits || room.Fits(cpu, memory)
			}
			if x.none(cpu, memory) {
				none++
				if fits {
					t.Fatalf("none(%d, %d), but a machine has room: %v", cpu, memory, rooms)
				}
			}
			if !fits {
				noneFound++
			}
		}
	}
	t.Logf("none %d of the %d questions where no machine has room", none, noneFound)
	if none < noneFound/2 {
		t.Fatalf("none answered %d of the %d questions where no machine has room", none, noneFound)
	}
}
