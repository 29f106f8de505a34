package domainspread

import (
	"maps"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

const job = "ns/web"

func task(spreadLabel string) *framework.Task {
	return &framework.Task{Job: job, Task: &troupev1.Task{Spec: &troupev1.TaskSpec{
		Constraints: &troupev1.Constraints{SpreadLabel: spreadLabel}}}}
}

func machine(name string, labels map[string]string, tasks int) *framework.Machine {
	return &framework.Machine{Name: name, Labels: labels, JobTasks: map[string]int{job: tasks, "ns/other": 7}}
}

// cell: zone a has 3 of the job's tasks, b 1, c none; racks r1 3, r2 1.
func cell() []*framework.Machine {
	return []*framework.Machine{
		machine("a1", map[string]string{"zone": "a", "rack": "r1"}, 2),
		machine("a2", map[string]string{"zone": "a", "rack": "r1"}, 1),
		machine("b1", map[string]string{"zone": "b", "rack": "r2"}, 1),
		machine("c1", map[string]string{"zone": "c"}, 0),
		machine("x1", nil, 5),
	}
}

func TestCounts(t *testing.T) {
	tests := []struct {
		label string
		job   string
		want  map[string]int
	}{
		{"zone", job, map[string]int{"a": 3, "b": 1, "c": 0}},
		{"rack", job, map[string]int{"r1": 3, "r2": 1}},
		{"zone", "ns/other", map[string]int{"a": 14, "b": 7, "c": 7}},
		{"zone", "ns/none", map[string]int{"a": 0, "b": 0, "c": 0}},
		{"nosuch", job, map[string]int{}},
		{"", job, map[string]int{}},
	}
	for _, tc := range tests {
		if got := Counts(tc.label, tc.job, cell()); !maps.Equal(got, tc.want) {
			t.Errorf("Counts(%q, %q) = %v, want %v", tc.label, tc.job, got, tc.want)
		}
	}
}

func TestScore(t *testing.T) {
	machines := cell()
	byName := map[string]*framework.Machine{}
	for _, m := range machines {
		byName[m.Name] = m
	}
	tests := []struct {
		name   string
		plugin *DomainSpread
		task   *framework.Task
		want   map[string]int64
	}{
		{"default label zone", New(""), task(""),
			map[string]int64{"a1": 0, "a2": 0, "b1": 66, "c1": 100, "x1": 0}},
		{"job's spread_label wins", New("zone"), task("rack"),
			map[string]int64{"a1": 0, "a2": 0, "b1": 100, "c1": 0, "x1": 0}},
		{"no label at all", &DomainSpread{}, task(""),
			map[string]int64{"a1": 0, "a2": 0, "b1": 0, "c1": 0, "x1": 0}},
		{"label no machine has", New("region"), task(""),
			map[string]int64{"a1": 0, "a2": 0, "b1": 0, "c1": 0, "x1": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.plugin.PreScore(tc.task, machines)
			if s.Name() != "DomainSpread" {
				t.Fatal(s.Name())
			}
			for name, want := range tc.want {
				if got := s.Score(tc.task, byName[name]); got != want {
					t.Errorf("Score(%s) = %d, want %d", name, got, want)
				}
			}
		})
	}
}

func TestScorerEdges(t *testing.T) {
	zoned := func(z string) *framework.Machine { return machine("m-"+z, map[string]string{"zone": z}, 0) }
	tests := []struct {
		name   string
		counts map[string]int
		task   *framework.Task
		m      *framework.Machine
		want   int64
	}{
		{"balanced domains all score max", map[string]int{"a": 2, "b": 2}, task(""), zoned("a"), framework.MaxScore},
		{"no counts", map[string]int{}, task(""), zoned("a"), framework.MaxScore},
		{"uncounted domain is clamped to max", map[string]int{"a": 2, "b": 4}, task(""), zoned("new"), framework.MaxScore},
		{"middle domain", map[string]int{"a": 0, "b": 1, "c": 4}, task(""), zoned("b"), 75},
		{"task of another job", map[string]int{"a": 0, "b": 4}, &framework.Task{Job: "ns/db"}, zoned("a"), 0},
		{"machine without the label", map[string]int{"a": 0, "b": 4}, task(""), machine("bare", nil, 0), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewScorer(job, "zone", tc.counts).Score(tc.task, tc.m); got != tc.want {
				t.Fatalf("Score = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestUnboundScoreIsNeutral(t *testing.T) {
	p := New("zone")
	if p.Name() != "DomainSpread" || p.Label != "zone" || New("").Label != DefaultLabel {
		t.Fatalf("New: %+v", p)
	}
	for _, m := range cell() {
		if s := p.Score(task(""), m); s != 0 {
			t.Fatalf("Score(%s) without PreScore = %d, want 0", m.Name, s)
		}
	}
}

func TestAssume(t *testing.T) {
	a := machine("a", map[string]string{"zone": "a"}, 0)
	b := machine("b", map[string]string{"zone": "b"}, 0)
	s := NewScorer(job, "zone", map[string]int{"a": 0, "b": 0})
	if s.Label() != "zone" || s.Score(task(""), a) != framework.MaxScore || s.Score(task(""), b) != framework.MaxScore {
		t.Fatal("balanced start")
	}
	s.Assume(a)
	s.Assume(machine("bare", nil, 0)) // no domain: no change
	if got, want := [2]int64{s.Score(task(""), a), s.Score(task(""), b)}, [2]int64{0, framework.MaxScore}; got != want {
		t.Fatalf("after one task in a: scores %v, want %v", got, want)
	}
	s.Assume(b)
	if s.Score(task(""), a) != framework.MaxScore {
		t.Fatal("balanced again")
	}
	empty := NewScorer(job, "", map[string]int{})
	empty.Assume(a)
	if empty.Score(task(""), a) != 0 || len(empty.counts) != 0 {
		t.Fatal("a scorer without label spreads nothing")
	}
}

// TestGreedySpreads places tasks one at a time on the best-scoring
// machine, recounting as a framework would: the job ends up even across
// zones despite zone a having most machines.
func TestGreedySpreads(t *testing.T) {
	var machines []*framework.Machine
	for i, z := range []string{"a", "a", "a", "a", "b", "b", "c"} {
		machines = append(machines, &framework.Machine{Name: z + string(rune('0'+i)),
			Labels: map[string]string{"zone": z}, JobTasks: map[string]int{}})
	}
	p, tk := New("zone"), task("")
	for range 9 {
		s := p.PreScore(tk, machines)
		best, bestScore := machines[0], int64(-1)
		for _, m := range machines {
			if sc := s.Score(tk, m); sc > bestScore {
				best, bestScore = m, sc
			}
		}
		best.JobTasks[job]++
	}
	if got, want := Counts("zone", job, machines), map[string]int{"a": 3, "b": 3, "c": 3}; !maps.Equal(got, want) {
		t.Fatalf("after 9 tasks: %v, want %v", got, want)
	}
}
