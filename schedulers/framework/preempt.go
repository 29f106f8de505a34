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
// preemptCandidates machines where evictions would make room. Victims are
// taken lowest priority first. Every filter is run again on the machine
// as it would be without the victims.
func (s *scheduling) preempt(class string, t *Task) (int, []*Running) {
	var (
		best        = -1
		bestVictims []*Running
		found       int
	)
	for _, i := range s.order {
		victims := s.victims(class, t, i)
		if victims == nil {
			continue
		}
		if best < 0 || len(victims) < len(bestVictims) ||
			(len(victims) == len(bestVictims) && maxPriority(victims) < maxPriority(bestVictims)) {
			best, bestVictims = i, victims
		}
		if found++; found == preemptCandidates {
			break
		}
	}
	return best, bestVictims
}

// victims returns the smallest prefix, by priority, of machine idx's
// preemptible tasks whose eviction lets t pass every filter on it; nil if
// none does.
func (s *scheduling) victims(class string, t *Task, idx int) []*Running {
	if s.snap.Running == nil {
		return nil
	}
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
	for n := 1; n <= len(candidates); n++ {
		if s.filter(class, t, idx, without(m, candidates[:n])).IsSuccess() {
			return candidates[:n]
		}
	}
	return nil
}

// without returns m as it would be with victims gone.
func without(m *Machine, victims []*Running) *Machine {
	c := *m
	c.Allocated, c.JobTasks = map[string]int64{}, map[string]int{}
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
	return &c
}

// evict removes victims from machine idx in the plan's overlay. The room
// they leave may fit tasks that fitted nowhere before.
func (s *scheduling) evict(idx int, victims []*Running) {
	if len(victims) == 0 {
		return
	}
	s.assumed[idx] = without(s.view(idx), victims)
	for _, v := range victims {
		s.evicted[v.Key] = true
	}
	s.evictedAny = true
	clear(s.failed)
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
