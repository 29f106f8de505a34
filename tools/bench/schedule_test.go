package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Competing batch schedulers place 10,000 tasks on 1,000 hollow machines
// of a real store (one run with a hollow agent per machine, which
// registers it and runs what is bound to it); the audit of every machine
// finds no allocation above capacity and counters that match the tasks
// bound.
func TestCompetingSchedulersAudit(t *testing.T) {
	machines, tasks := 1000, 10000
	if testing.Short() {
		machines, tasks = 100, 1000
	}
	for _, tc := range []struct {
		mode   framework.ConflictMode
		shards int
		agents bool
	}{{framework.Fine, 1, true}, {framework.Coarse, 1, false}, {framework.Fine, 4, false}} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%s/%d-shards/agents=%v", conflictName(mode), tc.shards, tc.agents), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			res, err := RunSchedule(ctx, ScheduleConfig{Machines: machines, Tasks: tasks, TasksPerJob: 50, Schedulers: 2,
				Conflict: mode, Shards: tc.shards, HollowAgents: tc.agents, Dir: t.TempDir(), Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			if res.Placed != tasks {
				t.Errorf("%d of %d tasks placed", res.Placed, tasks)
			}
			if res.CPUPerPlacementUs <= 0 {
				t.Errorf("CPU per placement %v µs: the process's CPU time was not measured", res.CPUPerPlacementUs)
			}
			if res.Overcommitted != 0 || res.CounterMismatches != 0 {
				t.Errorf("%d machines over capacity, %d with counters that disagree with their tasks", res.Overcommitted, res.CounterMismatches)
			}
		})
	}
}
