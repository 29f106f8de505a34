package ui

import (
	"math"
	"slices"
	"time"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// track is what the aggregator keeps of a scheduler instance: its latest
// record, the records of the last Config.Window, and the waits of the
// tasks it bound.
type track struct {
	info    *troupev1.SchedulerInfo
	samples samples
	waits   waits
}

func newTrack() *track { return &track{waits: waits{ring: make([]time.Duration, 0, maxWaits)}} }

// sample is one record of a scheduler: its counters, cumulative since it
// started, at its heartbeat.
type sample struct {
	at                                             time.Time
	attempts, conflicts, placements, unschedulable uint64
	busyness                                       float64
}

func sampleOf(info *troupev1.SchedulerInfo) sample {
	c := info.GetCounters()
	return sample{at: info.GetHeartbeat().AsTime(), attempts: c.GetAttempts(), conflicts: c.GetConflicts(), placements: c.GetPlacements(),
		unschedulable: c.GetUnschedulable(), busyness: c.GetBusyness()}
}

// samples are a scheduler's records in heartbeat order, over a window.
type samples []sample

// maxSamples bounds a scheduler's samples whatever its publishing rate.
const maxSamples = 600

// add appends s, if it is later than the last, and drops the samples
// older than window before it.
func (ss *samples) add(s sample, window time.Duration) {
	if n := len(*ss); n > 0 && !s.at.After((*ss)[n-1].at) {
		return
	}
	*ss = append(*ss, s)
	cut := 0
	for cut < len(*ss)-1 && ((*ss)[cut].at.Before(s.at.Add(-window)) || len(*ss)-cut > maxSamples) {
		cut++
	}
	*ss = slices.Delete(*ss, 0, cut)
}

// point is one value of a chart at a time.
type point struct {
	at time.Time
	v  float64
}

// series are a scheduler's figures between consecutive records:
// placements per second, conflicts per placement (Omega's conflict
// fraction), and busyness as published (the fraction of its time since
// it started that it spent deciding). A counter that went down (the
// instance restarted) starts again: that interval is left out.
type series struct {
	rate, fraction, busyness []point
}

func (ss samples) series() series {
	var out series
	for i, s := range ss {
		out.busyness = append(out.busyness, point{s.at, s.busyness})
		if i == 0 {
			continue
		}
		if d, ok := delta(ss[i-1], s); ok {
			out.rate = append(out.rate, point{s.at, d.rate})
			out.fraction = append(out.fraction, point{s.at, d.fraction})
		}
	}
	return out
}

// change is what a scheduler did between two records.
type change struct {
	span                                 time.Duration
	attempts, conflicts, placements, uns uint64
	rate, fraction                       float64
}

// delta is the change from a to b; false if a counter went down (a
// restart) or no time passed.
func delta(a, b sample) (change, bool) {
	span := b.at.Sub(a.at)
	if span <= 0 || b.attempts < a.attempts || b.conflicts < a.conflicts || b.placements < a.placements || b.unschedulable < a.unschedulable {
		return change{}, false
	}
	c := change{span: span, attempts: b.attempts - a.attempts, conflicts: b.conflicts - a.conflicts, placements: b.placements - a.placements,
		uns: b.unschedulable - a.unschedulable}
	c.rate = float64(c.placements) / span.Seconds()
	c.fraction = conflictFraction(c.conflicts, c.placements)
	return c, true
}

// conflictFraction is conflicts per successful placement; conflicts
// without a placement count as if there were one.
func conflictFraction(conflicts, placements uint64) float64 {
	return float64(conflicts) / float64(max(placements, 1))
}

// recent is the change over the last span before the latest record:
// from the earliest record at most span older than it and after the
// instance's last restart (false if there is no such record but the
// latest).
func (ss samples) recent(span time.Duration) (change, bool) {
	if len(ss) < 2 {
		return change{}, false
	}
	last := ss[len(ss)-1]
	first := len(ss) - 1
	for first > 0 && !ss[first-1].at.Before(last.at.Add(-span)) {
		if _, ok := delta(ss[first-1], ss[first]); !ok {
			break
		}
		first--
	}
	return delta(ss[first], last)
}

// maxWaits is how many of its latest waits a scheduler's track keeps.
const maxWaits = 512

// waits are the latest waits of tasks a scheduler bound: from the task's
// submission (its attempt's) to its binding, in a ring.
type waits struct {
	ring []time.Duration
	next int
	n    uint64 // waits seen in all
}

func (w *waits) add(d time.Duration) {
	if len(w.ring) < cap(w.ring) {
		w.ring = append(w.ring, d)
	} else {
		w.ring[w.next] = d
		w.next = (w.next + 1) % len(w.ring)
	}
	w.n++
}

// quantiles returns the waits' median and 90th percentile (nearest
// rank), and how many of them there are.
func (w *waits) quantiles() (median, p90 time.Duration, n int) {
	if len(w.ring) == 0 {
		return 0, 0, 0
	}
	sorted := slices.Sorted(slices.Values(w.ring))
	rank := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(sorted)))) - 1
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	return rank(0.5), rank(0.9), len(sorted)
}
