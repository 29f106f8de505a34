package sim

import (
	"slices"
	"time"
)

// busyWindow is the length of the windows busyness is measured over;
// the Omega paper reports the median of per-day values over a week, a
// trace of hours gives per-hour values.
const busyWindow = time.Hour

// Stats are the Omega paper's measures of a run, per scheduler.
type Stats struct {
	// Duration is the virtual time the run covered.
	Duration time.Duration
	// CPUUtilisation is the mean fraction of the cell's CPU allocated.
	CPUUtilisation float64
	// Failures counts the machines that failed (Config.Failures).
	Failures   int
	Schedulers []SchedulerStats
}

// SchedulerStats are one scheduler's measures.
type SchedulerStats struct {
	Name string
	// Jobs and Tasks submitted to it.
	Jobs, Tasks int
	// Decisions made (each followed by a commit), Placements committed,
	// Conflicts (placements that lost to another scheduler),
	// Unschedulable (task decisions that found no machine), Abandoned
	// jobs (given up after MaxAttempts decisions) and Unscheduled jobs
	// (with tasks still pending at the end, abandoned or not).
	Decisions, Placements, Conflicts, Unschedulable, Abandoned, Unscheduled int
	// Preempted counts this scheduler's tasks evicted by higher-priority
	// ones, and Lost those lost to machine failures.
	Preempted, Lost int
	// ConflictFraction is conflicts per placement.
	ConflictFraction float64
	// Busyness is the fraction of the run spent deciding; BusyMedian,
	// BusyP10 and BusyP90 are over hourly windows.
	Busyness, BusyMedian, BusyP10, BusyP90 float64
	// WaitMedian and WaitP90: time from a job's submission to the start
	// of its first decision.
	WaitMedian, WaitP90 time.Duration

	busy  []time.Duration // per window
	waits []time.Duration
}

func newStats(scheds []SchedulerConfig) *Stats {
	st := &Stats{}
	for _, sc := range scheds {
		st.Schedulers = append(st.Schedulers, SchedulerStats{Name: sc.Name})
	}
	return st
}

func (st *Stats) submitted(i, tasks int) {
	st.Schedulers[i].Jobs++
	st.Schedulers[i].Tasks += tasks
}

func (st *Stats) waited(i int, d time.Duration) {
	st.Schedulers[i].waits = append(st.Schedulers[i].waits, d)
}

// busy charges the decision from start to end to scheduler i's windows.
func (st *Stats) busy(i int, start, end time.Duration) {
	s := &st.Schedulers[i]
	for t := start; t < end; {
		w := int(t / busyWindow)
		for len(s.busy) <= w {
			s.busy = append(s.busy, 0)
		}
		next := min(end, time.Duration(w+1)*busyWindow)
		s.busy[w] += next - t
		t = next
	}
}

func (st *Stats) committed(i, placed, conflicted, unschedulable int) {
	s := &st.Schedulers[i]
	s.Decisions++
	s.Placements += placed
	s.Conflicts += conflicted
	s.Unschedulable += unschedulable
}

func (st *Stats) abandoned(i int) { st.Schedulers[i].Abandoned++ }

func (st *Stats) preempted(i int) { st.Schedulers[i].Preempted++ }

func (st *Stats) lost(i int) { st.Schedulers[i].Lost++ }

// finish derives the summary figures at the end of a run at now.
func (st *Stats) finish(now time.Duration, jobs []*jobState) {
	st.Duration = now
	for _, js := range jobs {
		if len(js.pending()) > 0 {
			st.Schedulers[js.sched.index].Unscheduled++
		}
	}
	windows := int((now + busyWindow - 1) / busyWindow)
	for i := range st.Schedulers {
		s := &st.Schedulers[i]
		if s.Placements > 0 {
			s.ConflictFraction = float64(s.Conflicts) / float64(s.Placements)
		}
		var total time.Duration
		var fractions []float64
		for w := range windows {
			var b time.Duration
			if w < len(s.busy) {
				b = s.busy[w]
			}
			total += b
			length := min(busyWindow, now-time.Duration(w)*busyWindow)
			fractions = append(fractions, float64(b)/float64(length))
		}
		if now > 0 {
			s.Busyness = float64(total) / float64(now)
		}
		s.BusyP10, s.BusyMedian, s.BusyP90 = quantile(fractions, 0.1), quantile(fractions, 0.5), quantile(fractions, 0.9)
		slices.Sort(s.waits)
		s.WaitMedian, s.WaitP90 = quantile(s.waits, 0.5), quantile(s.waits, 0.9)
	}
}

// quantile returns the q-quantile of sorted-or-not xs (nearest rank); 0
// for none.
func quantile[T float64 | time.Duration](xs []T, q float64) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
