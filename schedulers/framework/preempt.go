package framework

import (
	"maps"
	"slices"
)

// preemptCandidates is how many machines where preemption would work are
// compared before the best is taken: as placement samples feasible
// machines, preemption samples candidates, in the decision's random
// machine order, rather than weighing every machine of a large cell.
const preemptCandidates = 16

// preempt finds, for a task that fits nowhere, the machine where evicting
// the fewest lower-priority tasks makes it fit (ties: the lowest highest
// victim priority, then the first found), among the first
// preemptCandidates machines of the order where evictions would make
// room. Victims are taken lowest priority first. Every filter is run
// again on the machine as it would be without the victims.
//
// What a machine offers a task depends only on the machine as the plan
// has left it and on the task's class, requests, priority and job, so
// the search for the plan's next identical task (same key) looks again
// only at the machines found and those the plan touched since (placed
// on, evicted from), and goes on in the order from where it stopped.
func (s *scheduling) preempt(class, key string, t *Task) (int, []*Running) {
	ps := s.preemptions[key]
	if ps == nil {
		ps = &preemptSearch{}
		s.preemptions[key] = ps
	}
	cv := s.cache.class(class, len(s.snap.Machines))
	var evictable []Evictable
	if s.snap.Preemptible != nil {
		evictable = s.snap.Preemptible(PreemptsBelow(t.Priority))
	}
	again := ps.found
	for _, idx := range s.touched[ps.touched:] {
		if at := s.position(idx); at < ps.scanned && !slices.Contains(again, at) {
			again = append(again, at)
		}
	}
	slices.Sort(again)
	var (
		found   []int
		victims [][]*Running
	)
	// Machines with nothing to evict, or (with a FitFilter) where
	// evicting all t may would leave too little room, are passed over
	// by what they can evict (Snapshot.Preemptible, nil: unknown; it may
	// count tasks this plan evicted already: their room is in the
	// machine's now). Most machines of a full cell are.
	rooms := s.roomsFor()
	cpu, memory := t.Requests[CPU], t.Requests[Memory]
	look := func(at int) {
		idx := s.order[at]
		if evictable != nil {
			e := &evictable[idx]
			if e.Tasks == 0 || rooms != nil && !rooms[idx].plus(e.Requests).Fits(cpu, memory) {
				return
			}
		}
		if v := s.victims(cv, t, idx); v != nil {
			found, victims = append(found, at), append(victims, v)
		}
	}
	for _, at := range again { // all below ps.scanned
		if len(found) == preemptCandidates {
			break
		}
		look(at)
	}
	if len(found) == preemptCandidates {
		ps.scanned = found[len(found)-1] + 1
	}
	for ; ps.scanned < len(s.order) && len(found) < preemptCandidates; ps.scanned++ {
		look(ps.scanned)
	}
	ps.found, ps.touched = found, len(s.touched)
	best := -1
	for i, v := range victims {
		if best < 0 || len(v) < len(victims[best]) ||
			(len(v) == len(victims[best]) && maxPriority(v) < maxPriority(victims[best])) {
			best = i
		}
	}
	if best < 0 {
		return -1, nil
	}
	return s.order[found[best]], victims[best]
}

// preemptSearch is how far preemption searched the order for the
// identical tasks of a plan: positions below scanned, where found are
// those of the machines with victims, as the plan was when it had
// touched its first touched machines.
type preemptSearch struct {
	scanned, touched int
	found            []int
}

// position returns where machine idx is in the order.
func (s *scheduling) position(idx int) int {
	if s.positions == nil {
		s.positions = resize(s.cache.positions, len(s.order))
		s.cache.positions = s.positions
		for at, i := range s.order {
			s.positions[i] = int32(at)
		}
	}
	return int(s.positions[idx])
}

// victims returns the smallest prefix, by priority, of machine idx's
// preemptible tasks whose eviction lets t pass every filter on it; nil if
// none does. With a FitFilter, evictions that leave too little room for
// t's CPU and memory are refused without running the filters.
func (s *scheduling) victims(cv *classVerdicts, t *Task, idx int) []*Running {
	if s.snap.Running == nil {
		return nil
	}
	rooms := s.roomsFor()
	m := s.view(idx)
	var candidates []*Running
	for _, r := range s.snap.Running(m.Name) {
		if CanPreempt(t.Priority, r.Priority) && !s.evicted[r.Key] {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	slices.SortStableFunc(candidates, func(a, b *Running) int { return int(a.Priority - b.Priority) })
	first := 1
	if rooms != nil {
		if first = roomyPrefix(rooms[idx], candidates, t); first == 0 {
			return nil
		}
	}
	for n := first; n <= len(candidates); n++ {
		// The filters' verdict is all that is kept of the trial machine
		// (not its status, which may explain itself from it), so one
		// serves every trial of the decision.
		if s.trial == nil {
			s.trial = &Machine{Allocated: map[string]int64{}, JobTasks: map[string]int{}}
		}
		strip(s.trial, m, candidates[:n])
		if s.filter(cv, t, idx, s.trial).IsSuccess() {
			return candidates[:n]
		}
	}
	return nil
}

// roomyPrefix returns the length of the shortest prefix of victims whose
// eviction from a machine with room r leaves room for t's CPU and
// memory (0: none does).
func roomyPrefix(r Room, victims []*Running, t *Task) int {
	cpu, memory := t.Requests[CPU], t.Requests[Memory]
	for n, v := range victims {
		r.CPU += v.Requests[CPU]
		r.Memory += v.Requests[Memory]
		if r.Fits(cpu, memory) {
			return n + 1
		}
	}
	return 0
}

// without returns m as it would be with victims gone.
func without(m *Machine, victims []*Running) *Machine {
	c := &Machine{Allocated: map[string]int64{}, JobTasks: map[string]int{}}
	strip(c, m, victims)
	return c
}

// strip makes c m as it would be with victims gone, in c's own maps
// Allocated and JobTasks (emptied first).
func strip(c, m *Machine, victims []*Running) {
	allocated, jobTasks := c.Allocated, c.JobTasks
	clear(allocated)
	clear(jobTasks)
	*c = *m
	c.Allocated, c.JobTasks = allocated, jobTasks
	maps.Copy(c.Allocated, m.Allocated)
	maps.Copy(c.JobTasks, m.JobTasks)
	for _, v := range victims {
		for r, q := range v.Requests {
			c.Allocated[r] -= q
		}
		if c.JobTasks[v.Job] > 0 {
			c.JobTasks[v.Job]--
		}
	}
	c.FlattenAllocated(m)
}

// evict removes victims from machine idx in the plan's overlay. The room
// they leave may fit tasks that fitted nowhere before.
func (s *scheduling) evict(idx int, victims []*Running) {
	if len(victims) == 0 {
		return
	}
	s.assumed[idx] = without(s.view(idx), victims)
	s.touched = append(s.touched, idx)
	if s.rooms != nil {
		s.rooms[idx] = RoomOf(s.assumed[idx])
		if s.blocksBuilt {
			s.blocks.grow(s.position(idx), s.rooms[idx])
		}
	}
	for _, v := range victims {
		s.evicted[v.Key] = true
	}
	s.evictedAny = true
	clear(s.failed)
	s.scorers = nil // the victims' jobs lost tasks
}

func maxPriority(rs []*Running) int32 {
	var p int32
	for i, r := range rs {
		if i == 0 || r.Priority > p {
			p = r.Priority
		}
	}
	return p
}
