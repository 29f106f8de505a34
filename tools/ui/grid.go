package ui

import (
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// The machine grid goes to the page as two bytes per machine, in the
// order of their names: the CPU allocated in percent of capacity
// (capped at 255), and flags. 10,000 machines are 20 KB, base64 in JSON
// 27 KB, sent whole when the set of machines changes (with the names) and
// otherwise as the slots that changed.

// Flags of a machine in the grid.
const (
	flagLost     = 1 << iota // the node controller marked it lost
	flagCordoned             // unschedulable
	flagNotReady             // neither ready nor lost (yet)
	flagExpired              // its lease ran out, and it is not marked lost yet
)

// gridFrame is the grid at a moment.
type gridFrame struct {
	// gen changes when the set of machines (and so names) changes.
	gen   uint64
	names []string
	// cells are two bytes per machine, as above.
	cells []byte
}

// grid returns the grid now.
func (a *Aggregator) grid() gridFrame {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	slots, gen := a.sortedSlots()
	f := gridFrame{gen: gen, names: make([]string, len(slots)), cells: make([]byte, 2*len(slots))}
	for i, s := range slots {
		f.names[i] = s.name
		var pct int64
		if s.cpuCap > 0 {
			pct = min(s.cpuAlloc*100/s.cpuCap, 255)
		}
		var flags byte
		switch s.phase {
		case troupev1.MachinePhase_MACHINE_PHASE_LOST:
			flags |= flagLost
		case troupev1.MachinePhase_MACHINE_PHASE_READY:
		default:
			flags |= flagNotReady
		}
		if s.cordoned {
			flags |= flagCordoned
		}
		if !s.leaseEnd.IsZero() && now.After(s.leaseEnd) && flags&flagLost == 0 {
			flags |= flagExpired
		}
		f.cells[2*i], f.cells[2*i+1] = byte(max(pct, 0)), flags
	}
	return f
}

// gridMessage is the grid as a page's stream sends it: Full (with Names
// when they changed) or Delta, triples of slot, CPU percent and flags.
type gridMessage struct {
	Gen   uint64   `json:"gen"`
	Names []string `json:"names,omitempty"`
	Full  []byte   `json:"full,omitempty"`
	Delta []int    `json:"delta,omitempty"`
}

// gridUpdate is what turns a page that shows prev (nil: nothing yet)
// into one that shows cur: nothing if they are the same, the changed
// slots if few changed, else cur whole.
func gridUpdate(prev *gridFrame, cur gridFrame) (gridMessage, bool) {
	if prev == nil || prev.gen != cur.gen || len(prev.cells) != len(cur.cells) {
		return gridMessage{Gen: cur.gen, Names: cur.names, Full: cur.cells}, true
	}
	var delta []int
	for i := 0; i < len(cur.cells); i += 2 {
		if prev.cells[i] != cur.cells[i] || prev.cells[i+1] != cur.cells[i+1] {
			delta = append(delta, i/2, int(cur.cells[i]), int(cur.cells[i+1]))
		}
	}
	switch {
	case len(delta) == 0:
		return gridMessage{}, false
	case len(delta)/3 > len(cur.cells)/12: // a sixth of the machines: whole is smaller
		return gridMessage{Gen: cur.gen, Full: cur.cells}, true
	}
	return gridMessage{Gen: cur.gen, Delta: delta}, true
}
