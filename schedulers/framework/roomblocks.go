package framework

// roomRun is how many consecutive positions of a decision's machine
// order one run of a roomBlocks covers, and roomSectors in how many
// parts it bounds their rooms.
const (
	roomRun     = 64
	roomSectors = 4
)

// roomBlocks bound the room of the machines of a decision's order by
// runs of roomRun positions (the last run may be shorter). A search
// passes over a whole run whose bounds have no room for its task without
// visiting the run's machines, since none of them has room either
// (Room.Fits only grows with the room). In a full cell most of a
// decision's searches find few machines with room, or none, and would
// otherwise visit thousands of machines one by one, in the search's
// shuffled order, to pass them over.
//
// A run's machines are bounded in roomSectors parts, by the share of
// their CPU room in their room (each resource's relative to the most
// any machine has): the most CPU room and the most Memory room of the
// machines of a part. One bound for all would often be loose, because
// a full cell's machines tend to have room of one resource or the
// other (on the Google sample, searches visited 13 runs without a
// machine with room for each run with one; in four parts, one for 7).
//
// A room that shrinks (the plan places a task) leaves its bound an
// over-estimate, which sends a search through the run's machines where
// it could have passed over the run, never the reverse; a room that
// grows (evictions) raises a bound (grow).
type roomBlocks struct {
	bounds []Room // of part q of the run from position k*roomRun at k*roomSectors+q
	n      int    // positions in the order
	// perCPU and perMemory are 1 over the most CPU and Memory room of
	// any machine, at build.
	perCPU, perMemory float64
}

// build bounds the rooms of the machines of order (rooms by machine
// index), reusing b's array.
func (b *roomBlocks) build(rooms []Room, order []int) {
	b.n = len(order)
	most := Room{CPU: 1, Memory: 1}
	for _, r := range rooms {
		most.CPU, most.Memory = max(most.CPU, r.CPU), max(most.Memory, r.Memory)
	}
	b.perCPU, b.perMemory = 1/float64(most.CPU), 1/float64(most.Memory)
	b.bounds = resize(b.bounds, (b.n+roomRun-1)/roomRun*roomSectors)
	for i := range b.bounds {
		b.bounds[i] = Room{CPU: -1, Memory: -1} // no more than any machine's
	}
	for at, idx := range order {
		b.grow(at, rooms[idx])
	}
}

// grow records that the machine at position at of the order has room r
// (now, or as well as the others).
func (b *roomBlocks) grow(at int, r Room) {
	x := &b.bounds[at/roomRun*roomSectors+b.sector(r)]
	x.CPU, x.Memory = max(x.CPU, r.CPU), max(x.Memory, r.Memory)
}

// sector returns the part of its run that bounds a machine with room
// r: from most CPU to most Memory.
func (b *roomBlocks) sector(r Room) int {
	cpu, memory := float64(r.CPU)*b.perCPU, float64(r.Memory)*b.perMemory
	switch {
	case cpu > 3*memory:
		return 0
	case cpu > memory:
		return 1
	case 3*cpu > memory:
		return 2
	}
	return 3
}

// pass returns how many positions from at on a search for a task
// asking for cpu and memory passes over, of the limit it has left to
// examine: the whole run that starts at at, if none of its machines has
// room (0: at starts no run, the run is longer than limit, or one of its
// machines may have room).
func (b *roomBlocks) pass(at, limit int, cpu, memory int64) int {
	n := min(roomRun, b.n-at)
	if at%roomRun != 0 || n > limit {
		return 0
	}
	for _, x := range b.bounds[at/roomRun*roomSectors:][:roomSectors] {
		if x.Fits(cpu, memory) {
			return 0
		}
	}
	return n
}
