package spread

import (
	"testing"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/plugins/binpacking"
)

func machine(name string, cpuUsed, memUsed int64) *framework.Machine {
	return &framework.Machine{Name: name,
		Capacity:  map[string]int64{"cpu": 4000, "memory": 4000},
		Allocated: map[string]int64{"cpu": cpuUsed, "memory": memUsed}}
}

func TestScore(t *testing.T) {
	task := &framework.Task{Requests: map[string]int64{"cpu": 1000, "memory": 1000}}
	tests := []struct {
		name string
		m    *framework.Machine
		want int64
	}{
		{"empty", machine("empty", 0, 0), 75},
		{"half", machine("half", 1000, 1000), 50},
		{"fills it", machine("full", 3000, 3000), 0},
		{"unbalanced", machine("unbalanced", 3000, 0), 37}, // 100 - 63
		{"no capacity", &framework.Machine{Name: "bare"}, 0},
	}
	p := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Score(task, tc.m); got != tc.want {
				t.Fatalf("Score = %d, want %d", got, tc.want)
			}
		})
	}
	if p.Name() != "LeastAllocated" {
		t.Fatal(p.Name())
	}
}

func TestFullerScoresLower(t *testing.T) {
	p, bp := New(), binpacking.New()
	task := &framework.Task{Requests: map[string]int64{"cpu": 500, "memory": 100}}
	ordered := []*framework.Machine{ // emptiest first
		machine("a", 0, 0), machine("b", 500, 0), machine("c", 500, 2000), machine("d", 3000, 2000), machine("e", 3500, 3900),
	}
	for i, m := range ordered {
		if s, b := p.Score(task, m), bp.Score(task, m); s+b != framework.MaxScore {
			t.Fatalf("%s: LeastAllocated %d + BinPacking %d != %d", m.Name, s, b, framework.MaxScore)
		}
		if i == 0 {
			continue
		}
		if lo, hi := p.Score(task, m), p.Score(task, ordered[i-1]); lo >= hi {
			t.Fatalf("Score(%s) = %d, Score(%s) = %d: want the fuller machine strictly lower", m.Name, lo, ordered[i-1].Name, hi)
		}
	}
}
