// Package domainspread is the DomainSpread score: spread a job's tasks
// over failure domains, the values of a machine label such as "zone" or
// "rack" (the job's constraints.spread_label, or the plugin's default
// Label when the job names none). A machine scores higher the fewer of the
// job's tasks its domain already has.
//
// A ScorePlugin sees one machine, but the score needs the job's task count
// in every domain. So DomainSpread has an optional extra step, PreScore,
// that the framework calls once for a task before scoring, with every
// machine of the snapshot as the plan has left them (assumed placements
// included; all machines, not only the feasible ones: a machine that is
// full of the job's tasks is infeasible but its domain still counts). It
// returns a Scorer bound to that task's job and to the counts; the
// framework scores the feasible machines with it instead of with the
// DomainSpread itself:
//
//	// in the framework (Go interfaces match by method set, so the
//	// framework declares its own, without importing this package):
//	type PreScorePlugin interface {
//		ScorePlugin
//		PreScore(t *Task, machines []*Machine) ScorePlugin
//	}
//
//	plugin := w.Plugin
//	if p, ok := plugin.(PreScorePlugin); ok {
//		plugin = p.PreScore(t, views) // once per task, O(machines)
//	}
//	... plugin.Score(t, m) for each feasible m ...
//
// Nothing is stored in the DomainSpread, so one instance serves concurrent
// decisions. The Scorer is a framework.AssumingScore: to avoid the
// O(machines) count per task, the framework keeps it for the following
// tasks of the same job and class and calls Scorer.Assume after each
// placement of the job.
//
// Without PreScore, DomainSpread.Score is 0 for every machine: neutral.
package domainspread

import (
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Name is the plugin's name.
const Name = "DomainSpread"

// DefaultLabel is the failure-domain label of New("").
const DefaultLabel = "zone"

// DomainSpread is the plugin a profile lists; Label is the failure-domain
// label for jobs that give no spread_label ("" spreads only those that do).
type DomainSpread struct {
	Label string
}

var _ framework.ScorePlugin = (*DomainSpread)(nil)

// New returns the plugin with default label label, DefaultLabel if empty.
func New(label string) *DomainSpread {
	if label == "" {
		label = DefaultLabel
	}
	return &DomainSpread{Label: label}
}

// Name returns "DomainSpread".
func (*DomainSpread) Name() string { return Name }

// Score is 0: DomainSpread scores through the Scorer PreScore returns.
func (*DomainSpread) Score(*framework.Task, *framework.Machine) int64 { return 0 }

// LabelFor returns the failure-domain label for t: its spread_label, or
// p.Label.
func (p *DomainSpread) LabelFor(t *framework.Task) string {
	if l := t.Task.GetSpec().GetConstraints().GetSpreadLabel(); l != "" {
		return l
	}
	return p.Label
}

// PreScore returns the Scorer for t, with its job's task count per domain
// among machines (every machine of the snapshot, placements assumed).
func (p *DomainSpread) PreScore(t *framework.Task, machines []*framework.Machine) framework.ScorePlugin {
	label := p.LabelFor(t)
	return NewScorer(t.Job, label, Counts(label, t.Job, machines))
}

// Counts returns the tasks of job per value of label among machines; every
// value present is a key, with 0 when it has none of job's tasks. Machines
// without the label are left out.
func Counts(label, job string, machines []*framework.Machine) map[string]int {
	counts := map[string]int{}
	if label == "" {
		return counts
	}
	for _, m := range machines {
		if d, ok := m.Labels[label]; ok {
			counts[d] += m.JobTasks[job]
		}
	}
	return counts
}

// Scorer scores machines for the tasks of one job by the job's task count
// in their domain c, relative to the least (lo) and most (hi) loaded
// domains:
//
//	MaxScore · (hi − c) / (hi − lo), or MaxScore when every domain has as many
//
// so the least loaded domains score MaxScore and the most loaded 0.
// Machines without the label, and tasks of other jobs, score 0. A Scorer
// is not safe for concurrent use with Assume.
type Scorer struct {
	job, label string
	counts     map[string]int
	lo, hi     int
}

var _ framework.AssumingScore = (*Scorer)(nil)

// NewScorer returns the scorer for job's tasks with counts, the job's tasks
// per value of label (as Counts returns them). It keeps counts.
func NewScorer(job, label string, counts map[string]int) *Scorer {
	s := &Scorer{job: job, label: label, counts: counts}
	s.bounds()
	return s
}

func (s *Scorer) bounds() {
	first := true
	for _, c := range s.counts {
		if first || c < s.lo {
			s.lo = c
		}
		if first || c > s.hi {
			s.hi = c
		}
		first = false
	}
}

// Name returns "DomainSpread".
func (*Scorer) Name() string { return Name }

// Label returns the failure-domain label the scorer spreads over.
func (s *Scorer) Label() string { return s.label }

// Score ranks m for t, 0..framework.MaxScore.
func (s *Scorer) Score(t *framework.Task, m *framework.Machine) int64 {
	if s.label == "" || t.Job != s.job {
		return 0
	}
	d, ok := m.Labels[s.label]
	if !ok {
		return 0
	}
	c := s.counts[d] // a domain not counted has none of the job's tasks
	if s.hi == s.lo {
		return framework.MaxScore
	}
	// c < lo (an uncounted domain) would exceed MaxScore.
	return min(int64(s.hi-c)*framework.MaxScore/int64(s.hi-s.lo), framework.MaxScore)
}

// Assume counts one more of the job's tasks in m's domain, after the
// framework placed one there.
func (s *Scorer) Assume(m *framework.Machine) {
	if s.label == "" {
		return
	}
	if d, ok := m.Labels[s.label]; ok {
		s.counts[d]++
		s.bounds()
	}
}
