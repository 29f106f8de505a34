package framework

// roomBuckets is how many ranges of CPU room a roomIndex tells apart.
const roomBuckets = 256

// roomIndex answers, for a task asking for CPU and Memory, whether no
// machine has room for it, without visiting the machines: in a full
// cell most of a decision's searches are for tasks that fit nowhere,
// and each would otherwise visit every machine, in the search's
// shuffled order, to find none.
//
// It splits the machines' CPU room into ranges of width cpu, and keeps
// the most Memory room of the machines in each range or above (memory),
// and the most CPU room (top); machines with no CPU room are left out. A room that shrinks (the plan
// places a task) leaves the index an over-estimate, which may answer
// "maybe" where none fits but never "none" where one does; a room that
// grows (evictions) is added (grow).
type roomIndex struct {
	cpu, top int64
	memory   [roomBuckets]int64
}

// build indexes rooms, in ranges of CPU room of width cpu (0: of the
// width that fits rooms, found in a pass of its own; a cell's rooms
// change little from one decision to the next, so the width of the last
// one's, width, saves a pass).
func (x *roomIndex) build(rooms []Room, cpu int64) {
	x.top = 0
	if cpu <= 0 {
		for _, r := range rooms {
			x.top = max(x.top, r.CPU)
		}
		cpu = x.top/roomBuckets + 1
	}
	x.cpu = cpu
	for b := range x.memory {
		x.memory[b] = -1
	}
	for _, r := range rooms {
		if r.CPU > 0 {
			x.top = max(x.top, r.CPU)
			b := x.bucket(r.CPU)
			x.memory[b] = max(x.memory[b], r.Memory)
		}
	}
	for b := roomBuckets - 2; b >= 0; b-- {
		x.memory[b] = max(x.memory[b], x.memory[b+1])
	}
}

// width returns the width of CPU ranges that fits the rooms indexed.
func (x *roomIndex) width() int64 { return x.top/roomBuckets + 1 }

// grow records that a machine's room is now r. Room beyond the
// ranges counts in the last: none stays right, if less sharp.
func (x *roomIndex) grow(r Room) {
	if r.CPU <= 0 {
		return
	}
	x.top = max(x.top, r.CPU)
	for b := x.bucket(r.CPU); b >= 0 && x.memory[b] < r.Memory; b-- {
		x.memory[b] = r.Memory
	}
}

// none reports whether no machine has room for cpu and memory (false:
// some may have, or the task asks for nothing of one, which a machine
// without room of it may hold: Room.Fits).
func (x *roomIndex) none(cpu, memory int64) bool {
	return cpu > 0 && memory > 0 && (cpu > x.top || x.memory[x.bucket(cpu)] < memory)
}

// bucket returns the range of CPU room cpu falls in, the last for all
// beyond.
func (x *roomIndex) bucket(cpu int64) int64 { return min(cpu/x.cpu, roomBuckets-1) }
