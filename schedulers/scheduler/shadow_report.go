package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Agreement is how a shadow's choice for a task compares with the real
// schedulers'.
type Agreement int

const (
	// SameMachine: both placed the task, on the same machine.
	SameMachine Agreement = iota
	// Elsewhere: both placed it, a real scheduler on another machine.
	Elsewhere
	// OnlyShadow: the shadow placed it; no real scheduler did before it
	// was deleted or finished (stopped, abandoned).
	OnlyShadow
	// OnlyReal: the shadow found no machine; a real scheduler placed it.
	OnlyReal
	// Neither: neither placed it before it was gone.
	Neither
	numAgreements
)

var agreementNames = [numAgreements]string{"same_machine", "elsewhere", "only_shadow", "only_real", "neither"}

func (a Agreement) String() string { return agreementNames[a] }

// shadowBuckets are the upper bounds of the decision-time histogram, in
// seconds: 100 µs doubling to 6.5 s.
var shadowBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)

// shadowStats are a shadow's counts, its decision times, and its latest
// decisions.
type shadowStats struct {
	mu                                      sync.Mutex
	started                                 time.Time
	decisions, tasks, placements, unfit     uint64
	conflicts, conflictedDecisions, stopped uint64
	agreement                               [numAgreements]uint64
	counts                                  []uint64 // per bucket of shadowBuckets, and a last one above them
	sum, max                                time.Duration
	keep, next                              int
	recent                                  []*ShadowDecision // a ring of the latest keep decisions, the oldest at next once full
}

func newShadowStats(now time.Time, keep int) *shadowStats {
	return &shadowStats{started: now, keep: keep, counts: make([]uint64, len(shadowBuckets)+1)}
}

// decided counts decision rec, of whose placements stopped found their
// task gone, and keeps it among the latest.
func (st *shadowStats) decided(rec *ShadowDecision, stopped int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.decisions++
	st.tasks += uint64(rec.Tasks)
	st.placements += uint64(len(rec.Placements))
	st.unfit += uint64(len(rec.Unplaced))
	st.conflicts += uint64(rec.Conflicts)
	if rec.Conflicts > 0 {
		st.conflictedDecisions++
	}
	st.stopped += uint64(stopped)
	i, _ := slices.BinarySearch(shadowBuckets, rec.Duration.Seconds())
	st.counts[i]++
	st.sum += rec.Duration
	st.max = max(st.max, rec.Duration)
	switch {
	case st.keep <= 0:
	case len(st.recent) < st.keep:
		st.recent = append(st.recent, rec)
	default:
		st.recent[st.next] = rec
		st.next = (st.next + 1) % st.keep
	}
}

// agreed counts the outcome of a task decided about.
func (st *shadowStats) agreed(a Agreement) {
	st.mu.Lock()
	st.agreement[a]++
	st.mu.Unlock()
}

// complete fills in where a real scheduler placed the task of rec at idx
// (of its unplaced tasks if unfit) and the outcome.
func (st *shadowStats) complete(rec *ShadowDecision, unfit bool, idx int, real string, a Agreement) {
	st.mu.Lock()
	defer st.mu.Unlock()
	ps := rec.Placements
	if unfit {
		ps = rec.Unplaced
	}
	if idx >= 0 && idx < len(ps) {
		ps[idx].Real, ps[idx].Outcome = real, a.String()
	}
}

// copyOf returns a copy of rec that later outcomes do not change.
func (st *shadowStats) copyOf(rec *ShadowDecision) ShadowDecision {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := *rec
	c.Placements, c.Unplaced = slices.Clone(rec.Placements), slices.Clone(rec.Unplaced)
	return c
}

// ShadowReport sums up what a shadow did from Started to At.
type ShadowReport struct {
	Scheduler    string    `json:"scheduler"`
	Kind         string    `json:"kind"`
	ConflictMode string    `json:"conflict_mode"`
	TxnMode      string    `json:"txn_mode"`
	Started      time.Time `json:"started"`
	At           time.Time `json:"at"`
	// Decisions made (one per pending episode of a job), the tasks
	// decided about, placed and found no machine for.
	Decisions     uint64 `json:"decisions"`
	Tasks         uint64 `json:"tasks"`
	Placements    uint64 `json:"placements"`
	Unschedulable uint64 `json:"unschedulable"`
	// Conflicts are the placements that would have conflicted at commit,
	// in ConflictedDecisions decisions; ConflictFraction is Conflicts per
	// placement. Stopped are placements whose task was gone by then.
	Conflicts           uint64  `json:"conflicts"`
	ConflictedDecisions uint64  `json:"conflicted_decisions"`
	ConflictFraction    float64 `json:"conflict_fraction"`
	Stopped             uint64  `json:"stopped"`
	// Agreement compares the shadow's choices with the real schedulers'.
	Agreement ShadowAgreement `json:"agreement"`
	// DecisionSeconds are the decision times.
	DecisionSeconds ShadowTimes `json:"decision_seconds"`
	// Recent are the latest decisions (ShadowConfig.Keep), oldest first.
	Recent []ShadowDecision `json:"recent"`
}

// ShadowAgreement counts the tasks decided about by outcome (Agreement),
// and those whose real outcome is not known yet. Rate is SameMachine of
// SameMachine and Elsewhere: of the tasks both placed, the share placed
// on the same machine (0 when there are none).
type ShadowAgreement struct {
	SameMachine uint64  `json:"same_machine"`
	Elsewhere   uint64  `json:"elsewhere"`
	OnlyShadow  uint64  `json:"only_shadow"`
	OnlyReal    uint64  `json:"only_real"`
	Neither     uint64  `json:"neither"`
	Outstanding uint64  `json:"outstanding"`
	Rate        float64 `json:"rate"`
}

// ShadowTimes sum up decision times, in seconds: how many, their mean and
// maximum, quantiles as the upper bound of the histogram bucket they fall
// in (the maximum past the last bucket), and the histogram (cumulative
// counts by upper bound, as Prometheus's).
type ShadowTimes struct {
	Count   uint64         `json:"count"`
	Mean    float64        `json:"mean"`
	Max     float64        `json:"max"`
	P50     float64        `json:"p50_le"`
	P90     float64        `json:"p90_le"`
	P99     float64        `json:"p99_le"`
	Buckets []ShadowBucket `json:"buckets"`
}

// ShadowBucket is a histogram bucket: decisions that took at most LE
// seconds.
type ShadowBucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Report sums up what the shadow did so far.
func (s *Shadow) Report() ShadowReport {
	outstanding := s.Outstanding()
	st := s.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	r := ShadowReport{Scheduler: s.cfg.Name, Kind: s.cfg.Kind, ConflictMode: s.cfg.Modes.Conflict.String(), TxnMode: s.cfg.Modes.Txn.String(),
		Started: st.started, At: s.clock.Now(), Decisions: st.decisions, Tasks: st.tasks, Placements: st.placements,
		Unschedulable: st.unfit, Conflicts: st.conflicts, ConflictedDecisions: st.conflictedDecisions, Stopped: st.stopped,
		Agreement: ShadowAgreement{SameMachine: st.agreement[SameMachine], Elsewhere: st.agreement[Elsewhere],
			OnlyShadow: st.agreement[OnlyShadow], OnlyReal: st.agreement[OnlyReal], Neither: st.agreement[Neither],
			Outstanding: uint64(outstanding)},
		Recent: []ShadowDecision{}}
	if r.Placements > 0 {
		r.ConflictFraction = float64(r.Conflicts) / float64(r.Placements)
	}
	if both := r.Agreement.SameMachine + r.Agreement.Elsewhere; both > 0 {
		r.Agreement.Rate = float64(r.Agreement.SameMachine) / float64(both)
	}
	t := &r.DecisionSeconds
	t.Count, t.Max = st.decisions, st.max.Seconds()
	if st.decisions > 0 {
		t.Mean = st.sum.Seconds() / float64(st.decisions)
	}
	var cum uint64
	for i, le := range shadowBuckets {
		cum += st.counts[i]
		t.Buckets = append(t.Buckets, ShadowBucket{LE: le, Count: cum})
	}
	t.P50, t.P90, t.P99 = st.quantile(0.5), st.quantile(0.9), st.quantile(0.99)
	for i := range st.recent {
		rec := st.recent[(st.next+i)%len(st.recent)]
		c := *rec
		c.Placements, c.Unplaced = slices.Clone(rec.Placements), slices.Clone(rec.Unplaced)
		r.Recent = append(r.Recent, c)
	}
	return r
}

// quantile returns the upper bound of the bucket quantile q of the
// decision times falls in (the maximum past the last); st.mu is held.
func (st *shadowStats) quantile(q float64) float64 {
	if st.decisions == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(st.decisions)))
	var cum uint64
	for i, le := range shadowBuckets {
		if cum += st.counts[i]; cum >= rank {
			return min(le, st.max.Seconds())
		}
	}
	return st.max.Seconds()
}

// Summary is the report in a few lines of words.
func (r ShadowReport) Summary() string {
	var b strings.Builder
	pct := func(n, of uint64) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Microsecond) }
	ran := r.At.Sub(r.Started)
	if ran > time.Minute {
		ran = ran.Round(time.Second)
	} else {
		ran = ran.Round(time.Millisecond)
	}
	fmt.Fprintf(&b, "%s (shadow of %s; %s, %s) for %v: %d decisions about %d tasks: %d placed, %d fit nowhere\n",
		r.Scheduler, r.Kind, r.ConflictMode, r.TxnMode, ran, r.Decisions, r.Tasks, r.Placements, r.Unschedulable)
	fmt.Fprintf(&b, "  would have conflicted: %d placements (%s) in %d decisions; %d found their task gone\n",
		r.Conflicts, pct(r.Conflicts, r.Placements), r.ConflictedDecisions, r.Stopped)
	a := r.Agreement
	same := "none placed by both yet"
	if a.SameMachine+a.Elsewhere > 0 {
		same = pct(a.SameMachine, a.SameMachine+a.Elsewhere) + " agree"
	}
	fmt.Fprintf(&b, "  against the real schedulers: %d on the same machine, %d elsewhere (%s), %d placed by the shadow only, "+
		"%d by the real ones only, %d by neither, %d not placed yet\n",
		a.SameMachine, a.Elsewhere, same, a.OnlyShadow, a.OnlyReal, a.Neither, a.Outstanding)
	t := r.DecisionSeconds
	fmt.Fprintf(&b, "  decision time: mean %v, p50 <= %v, p90 <= %v, p99 <= %v, max %v\n", sec(t.Mean), sec(t.P50), sec(t.P90), sec(t.P99), sec(t.Max))
	return b.String()
}

var (
	descShadowDecisions = prometheus.NewDesc("troupe_shadow_decisions_total",
		"Decisions a shadow scheduler made: one per pending episode of a job.", []string{"scheduler"}, nil)
	descShadowTasks = prometheus.NewDesc("troupe_shadow_tasks_total",
		"Pending tasks a shadow scheduler decided about.", []string{"scheduler"}, nil)
	descShadowPlacements = prometheus.NewDesc("troupe_shadow_placements_total",
		"Placements in a shadow scheduler's plans.", []string{"scheduler"}, nil)
	descShadowUnschedulable = prometheus.NewDesc("troupe_shadow_unschedulable_total",
		"Tasks a shadow scheduler found no machine for.", []string{"scheduler"}, nil)
	descShadowConflicts = prometheus.NewDesc("troupe_shadow_conflicts_total",
		"Placements of a shadow scheduler that would have conflicted with the cell when committed.", []string{"scheduler"}, nil)
	descShadowConflicted = prometheus.NewDesc("troupe_shadow_conflicted_decisions_total",
		"Decisions of a shadow scheduler with a placement that would have conflicted.", []string{"scheduler"}, nil)
	descShadowStopped = prometheus.NewDesc("troupe_shadow_stopped_total",
		"Placements of a shadow scheduler whose task was deleted or finished by commit.", []string{"scheduler"}, nil)
	descShadowAgreement = prometheus.NewDesc("troupe_shadow_agreement_total",
		"Tasks a shadow scheduler decided about, by how its choice compares with the real schedulers': "+
			"same_machine, elsewhere, only_shadow, only_real, neither.", []string{"scheduler", "outcome"}, nil)
	descShadowOutstanding = prometheus.NewDesc("troupe_shadow_outstanding_tasks",
		"Tasks a shadow scheduler decided about that are still pending in the cell.", []string{"scheduler"}, nil)
	descShadowJobs = prometheus.NewDesc("troupe_shadow_tracked_jobs",
		"Jobs a shadow scheduler keeps records of: with tasks pending or awaiting the real outcome.", []string{"scheduler"}, nil)
	descShadowSeconds = prometheus.NewDesc("troupe_shadow_decision_seconds",
		"A shadow scheduler's decision times.", []string{"scheduler"}, nil)
)

// Collector exports the shadow's counts in Prometheus format.
func (s *Shadow) Collector() prometheus.Collector { return ShadowCollector(s) }

// ShadowCollector exports the counts of shadows, which share descriptors
// (told apart by their scheduler label), as one collector.
func ShadowCollector(shadows ...*Shadow) prometheus.Collector { return shadowCollector(shadows) }

type shadowCollector []*Shadow

func (shadowCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descShadowDecisions, descShadowTasks, descShadowPlacements, descShadowUnschedulable,
		descShadowConflicts, descShadowConflicted, descShadowStopped, descShadowAgreement, descShadowOutstanding, descShadowJobs,
		descShadowSeconds} {
		ch <- d
	}
}

func (c shadowCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c {
		name := s.cfg.Name
		jobs, _ := s.tracking()
		outstanding := s.Outstanding()
		st := s.stats
		st.mu.Lock()
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{descShadowDecisions, prometheus.CounterValue, float64(st.decisions)},
			{descShadowTasks, prometheus.CounterValue, float64(st.tasks)},
			{descShadowPlacements, prometheus.CounterValue, float64(st.placements)},
			{descShadowUnschedulable, prometheus.CounterValue, float64(st.unfit)},
			{descShadowConflicts, prometheus.CounterValue, float64(st.conflicts)},
			{descShadowConflicted, prometheus.CounterValue, float64(st.conflictedDecisions)},
			{descShadowStopped, prometheus.CounterValue, float64(st.stopped)},
			{descShadowOutstanding, prometheus.GaugeValue, float64(outstanding)},
			{descShadowJobs, prometheus.GaugeValue, float64(jobs)},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, name)
		}
		for a := range numAgreements {
			ch <- prometheus.MustNewConstMetric(descShadowAgreement, prometheus.CounterValue, float64(st.agreement[a]), name, a.String())
		}
		buckets := make(map[float64]uint64, len(shadowBuckets))
		var cum uint64
		for i, le := range shadowBuckets {
			cum += st.counts[i]
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descShadowSeconds, st.decisions, st.sum.Seconds(), buckets, name)
		st.mu.Unlock()
	}
}
