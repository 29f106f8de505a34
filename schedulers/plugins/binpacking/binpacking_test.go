package binpacking

import (
	"testing"

	"github.com/troupe-cluster/troupe/schedulers/framework"
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
		{"empty", machine("empty", 0, 0), 25},
		{"half", machine("half", 1000, 1000), 50},
		{"fills it", machine("full", 3000, 3000), 100},
		{"unbalanced", machine("unbalanced", 3000, 0), 63}, // (100+25)/2 = 62.5 → 63
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
	if p.Name() != "BinPacking" {
		t.Fatal(p.Name())
	}
}

func TestFullerScoresHigher(t *testing.T) {
	p := New()
	task := &framework.Task{Requests: map[string]int64{"cpu": 500, "memory": 100, "gpu": 1}}
	gpu := func(m *framework.Machine, used int64) *framework.Machine {
		m.Capacity["gpu"], m.Allocated["gpu"] = 4, used
		return m
	}
	ordered := []*framework.Machine{ // emptiest first
		gpu(machine("a", 0, 0), 0),
		gpu(machine("b", 500, 0), 0),
		gpu(machine("c", 500, 2000), 1),
		gpu(machine("d", 3000, 2000), 2),
		gpu(machine("e", 3500, 3900), 3),
	}
	for i := 1; i < len(ordered); i++ {
		lo, hi := p.Score(task, ordered[i-1]), p.Score(task, ordered[i])
		if lo >= hi || lo < 0 || hi > framework.MaxScore {
			t.Fatalf("Score(%s) = %d, Score(%s) = %d: want the fuller machine strictly higher, within 0..%d",
				ordered[i-1].Name, lo, ordered[i].Name, hi, framework.MaxScore)
		}
	}
}
