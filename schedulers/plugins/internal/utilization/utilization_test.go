package utilization

import (
	"math"
	"math/rand/v2"
	"testing"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

func TestFullness(t *testing.T) {
	const gib = int64(1) << 30
	tests := []struct {
		name      string
		requests  map[string]int64
		capacity  map[string]int64
		allocated map[string]int64
		want      int64
		wantOK    bool
	}{
		{"empty machine, no requests", nil, map[string]int64{"cpu": 4000, "memory": 8 * gib}, nil, 0, true},
		{"half cpu, quarter memory", map[string]int64{"cpu": 1000, "memory": 1 * gib},
			map[string]int64{"cpu": 4000, "memory": 8 * gib}, map[string]int64{"cpu": 1000, "memory": 1 * gib}, 38, true}, // (50+25)/2 = 37.5 → 38
		{"full", map[string]int64{"cpu": 2000}, map[string]int64{"cpu": 4000, "memory": 8 * gib},
			map[string]int64{"cpu": 2000, "memory": 8 * gib}, 100, true},
		{"overcommitted is clamped to full", map[string]int64{"cpu": 9000}, map[string]int64{"cpu": 4000}, nil, 100, true},
		{"negative allocation is clamped to empty", nil, map[string]int64{"cpu": 4000}, map[string]int64{"cpu": -5}, 0, true},
		{"requested extended resource counts", map[string]int64{"gpu": 1}, map[string]int64{"cpu": 4000, "memory": 8 * gib, "gpu": 1},
			nil, 33, true}, // (0+0+100)/3
		{"unrequested extended resource does not count", nil, map[string]int64{"cpu": 4000, "gpu": 1},
			map[string]int64{"gpu": 1}, 0, true},
		{"zero request is not a request", map[string]int64{"gpu": 0}, map[string]int64{"cpu": 4000, "gpu": 2},
			map[string]int64{"gpu": 2}, 0, true},
		{"resource without capacity is left out", map[string]int64{"cpu": 1000, "gpu": 1}, map[string]int64{"cpu": 2000}, nil, 50, true},
		{"nothing to count", nil, map[string]int64{"gpu": 2}, nil, 0, false},
		{"huge amounts do not overflow", map[string]int64{"memory": math.MaxInt64 / 4},
			map[string]int64{"memory": math.MaxInt64 / 2}, map[string]int64{"memory": math.MaxInt64 / 8}, 75, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Fullness(&framework.Task{Requests: tc.requests},
				&framework.Machine{Capacity: tc.capacity, Allocated: tc.allocated})
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("Fullness = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// Fullness reads flattened machines and tasks (Machine.Flatten, NewTask)
// as it reads their maps: on random machines, some without cpu or
// memory, with extended resources or negative counters, and random
// tasks, some requesting a gpu (read from the maps) or zero of one.
func TestFullnessFlatAsMaps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	amount := func(max int64) int64 { return r.Int64N(max+1) - max/10 }
	flat := 0
	for range 20000 {
		m := &framework.Machine{Capacity: map[string]int64{}, Allocated: map[string]int64{}}
		for _, res := range []string{"cpu", "memory", "gpu"} {
			if r.IntN(6) > 0 {
				m.Capacity[res] = amount(16000)
			}
			if r.IntN(4) > 0 {
				m.Allocated[res] = amount(20000)
			}
		}
		m.Flatten()
		requests := map[string]int64{}
		for _, res := range []string{"cpu", "memory", "gpu"} {
			if r.IntN(4) > 0 && (res != "gpu" || r.IntN(3) == 0) {
				requests[res] = amount(8000)
			}
		}
		task := framework.NewTask("/tasks/ns/j/0", &troupev1.Task{Spec: &troupev1.TaskSpec{
			Template: &troupev1.TaskTemplate{Requests: requests}}})
		got, gotOK := Fullness(task, m)
		plain := *task // a copy reads the maps
		want, wantOK := Fullness(&plain, &framework.Machine{Capacity: m.Capacity, Allocated: m.Allocated})
		if got != want || gotOK != wantOK {
			t.Fatalf("Fullness(%v on %v, %v) = %d, %v flat; %d, %v from the maps", requests, m.Capacity, m.Allocated, got, gotOK, want, wantOK)
		}
		if _, _, only := task.CPUMemory(); only {
			flat++
		}
	}
	if flat == 0 || flat == 20000 {
		t.Fatalf("%d of 20000 tasks scored flat: both paths must be exercised", flat)
	}
}
