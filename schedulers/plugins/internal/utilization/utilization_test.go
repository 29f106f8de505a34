package utilization

import (
	"math"
	"testing"

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
