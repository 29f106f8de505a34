package sim

import (
	"context"
	"fmt"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// PrefillStats say what a workload's prefill (workload.Prefill) put in
// the cell at time 0, before the run's first event. None of it counts in
// the schedulers' measures.
type PrefillStats struct {
	// Jobs and Tasks placed (a job may be placed in part).
	Jobs  int `json:"jobs"`
	Tasks int `json:"tasks"`
	// CPUUtilisation and MemoryUtilisation are the fractions of the
	// cell's CPU and memory the prefill allocated, TargetCPU and
	// TargetMemory the workload's targets (0: none).
	CPUUtilisation    float64 `json:"cpu_allocated_fraction"`
	MemoryUtilisation float64 `json:"memory_allocated_fraction"`
	TargetCPU         float64 `json:"target_cpu_fraction"`
	TargetMemory      float64 `json:"target_memory_fraction"`
	// NotPlaced counts the tasks of a list (a prefill without targets,
	// such as a trace's tasks running at its window's start) that fitted
	// nowhere: they are left out.
	NotPlaced int `json:"tasks_not_placed,omitempty"`
}

// Prefilled returns what the workload's prefill put in the cell (zero
// before Run, or without a prefill).
func (s *Simulator) Prefilled() PrefillStats {
	if p := s.stats.Prefill; p != nil {
		return *p
	}
	return PrefillStats{}
}

// prefill fills the cell at time 0 with p's jobs (nil: nothing), placed
// where PlanPrefill chooses (random first fit, as the Omega lightweight
// simulator prefills its cell), with no decision time and no
// scheduler's measure. Each job's tasks are created pending and bound
// with framework.CommitPlan (fine-grained, incremental), as a scheduler
// commits, so the cell's counters, its view and the simulator's
// bookkeeping (preemption, failures, task ends) are as after any
// placement; the bindings name the scheduler PrefillScheduler. After
// time 0 a prefill job is like any other of its type: a task preempted
// or lost goes back to pending and the scheduler serving the type (one
// must) places it again, which counts in that scheduler's measures; its
// job counts in none of Jobs, Tasks, waits or unscheduled jobs.
func (s *Simulator) prefill(ctx context.Context, p *workload.Prefill) error {
	if p == nil {
		return nil
	}
	st, err := PlanPrefill(ctx, p, s.cfg.Machines, s.cfg.Seed, s.prefillJob)
	if err != nil {
		return err
	}
	s.stats.Prefill = &st
	return s.err
}

// prefillJob creates job's tasks, pending, and commits task i's
// placement on machine on[i] of the Config, at time 0.
func (s *Simulator) prefillJob(job workload.Job, on []int) error {
	// first and placed: its waits are not measured.
	js := &jobState{job: job, key: "sim/" + job.ID, first: 0, placed: true, on: map[string]int{}}
	if s.jobs[js.key] != nil {
		return fmt.Errorf("sim: prefill: job %s twice", job.ID)
	}
	if js.sched = s.schedulerFor(job); js.sched == nil {
		return fmt.Errorf("sim: prefill: no scheduler serves %s jobs (prefill job %s), to place its tasks again if they are preempted or lost", job.Type, job.ID)
	}
	if err := s.createTasks(js, nil); err != nil {
		return fmt.Errorf("sim: prefill: submit job %s: %w", job.ID, err)
	}
	s.jobs[js.key] = js
	plan := &framework.Plan{Placements: make([]framework.Placement, len(on))}
	for i, m := range on {
		plan.Placements[i] = framework.Placement{Task: js.ftask(int32(i)), Machine: s.view.Machine(s.cfg.Machines[m].Name)}
	}
	res, err := framework.CommitPlan(context.Background(), s.store, plan, framework.Modes{Conflict: framework.Fine, Txn: framework.Incremental},
		PrefillScheduler, epoch.Add(s.now))
	if err == nil && len(res.Committed) != len(on) {
		err = fmt.Errorf("%d of %d placements did not commit", len(on)-len(res.Committed), len(on))
	}
	if err != nil {
		return fmt.Errorf("sim: prefill: commit job %s: %w", job.ID, err)
	}
	for _, p := range res.Committed {
		s.placed(js, p, res)
	}
	return nil
}
