package scheduler

import (
	"sync"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Stats are the Omega measures of one instance.
type Stats struct {
	mu            sync.Mutex
	started       time.Time
	busy          time.Duration
	attempts      uint64 // commits tried
	conflicts     uint64 // placements that lost
	placements    uint64
	unschedulable uint64
	decisions     uint64
	tasksDecided  uint64
	waitTotal     time.Duration // submission to first attempt, summed
	waitCount     uint64
}

func newStats(now time.Time) *Stats { return &Stats{started: now} }

// Snapshot is a copy of Stats with derived figures.
type Snapshot struct {
	Attempts, Conflicts, Placements, Unschedulable uint64
	// ConflictFraction is conflicts per successful placement (Omega).
	ConflictFraction float64
	// Busyness is the fraction of time spent deciding and committing.
	Busyness float64
	// DecisionPerJob and DecisionPerTask are mean decision times.
	DecisionPerJob, DecisionPerTask time.Duration
	// MeanWait is the mean time from submission to first attempt.
	MeanWait time.Duration
	// PlacementsPerSec since the instance started.
	PlacementsPerSec float64
}

func (s *Stats) decided(start, end time.Time, tasks, committed, conflicted, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy += end.Sub(start)
	s.decisions++
	s.tasksDecided += uint64(tasks)
	if committed+conflicted > 0 {
		s.attempts++
	}
	s.placements += uint64(committed)
	s.conflicts += uint64(conflicted)
	s.unschedulable += uint64(failed)
}

// waited records the wait of tasks seen for the first time.
func (s *Stats) waited(tasks []*framework.Task, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tasks {
		if sub := t.Task.GetSpec().GetSubmitted(); sub != nil && t.Task.GetSpec().GetAttempt() == 0 {
			s.waitTotal += now.Sub(sub.AsTime())
			s.waitCount++
		}
	}
}

func (s *Stats) snapshot(now time.Time) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Snapshot{Attempts: s.attempts, Conflicts: s.conflicts, Placements: s.placements, Unschedulable: s.unschedulable}
	if s.placements > 0 {
		out.ConflictFraction = float64(s.conflicts) / float64(s.placements)
	}
	if el := now.Sub(s.started); el > 0 {
		out.Busyness = float64(s.busy) / float64(el)
		out.PlacementsPerSec = float64(s.placements) / el.Seconds()
	}
	if s.decisions > 0 {
		out.DecisionPerJob = s.busy / time.Duration(s.decisions)
	}
	if s.tasksDecided > 0 {
		out.DecisionPerTask = s.busy / time.Duration(s.tasksDecided)
	}
	if s.waitCount > 0 {
		out.MeanWait = s.waitTotal / time.Duration(s.waitCount)
	}
	return out
}
