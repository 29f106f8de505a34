package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

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

const (
	// prefillMisses: the prefill stops after this many jobs in a row
	// place no task (the cell has no room left for their shapes).
	prefillMisses = 100
	// prefillStream is the random stream of the prefill's placements
	// (the schedulers' are 0, 1, ..., the machines' failures
	// failureStreams + i, below 1<<33).
	prefillStream = 1 << 33
	// prefillScheduler is the scheduler the prefill's bindings name.
	prefillScheduler = "prefill"
)

// prefill fills the cell at time 0 with p's jobs (nil: nothing), as the
// Omega lightweight simulator (google/cluster-scheduler-simulator)
// prefills its cell: each task goes on a machine chosen uniformly at
// random among those with room for it (its scheduleJob: random first
// fit, machines found full taken out of the draw), with no decision time
// and no scheduler's measure. A job's tasks are placed in order until
// one fits nowhere, and the job keeps those placed (partial placement);
// the prefill stops before the first task that would take the cell's
// allocated CPU (or memory) past its target, so it ends within one
// task's requests below the target, or earlier when p.Jobs ends or
// prefillMisses jobs in a row place nothing. A prefill without targets
// is a list (a trace's tasks running at its window's start, with what
// remains of their runs): every task of every job of p.Jobs is placed,
// as far as it fits, until p.Jobs ends; a task that fits nowhere is left
// out (NotPlaced) and the job's next tasks are tried. Distinct machines
// and label selectors hold. Each job's tasks are created pending and
// bound with framework.CommitPlan (fine-grained, incremental), as a
// scheduler commits, so the cell's counters, its view and the simulator's
// bookkeeping (preemption, failures, task ends) are as after any
// placement; the bindings name the scheduler "prefill". After time 0 a
// prefill job is like any other of its type: a task preempted or lost
// goes back to pending and the scheduler serving the type (one must)
// places it again, which counts in that scheduler's measures; its job
// counts in none of Jobs, Tasks, waits or unscheduled jobs.
func (s *Simulator) prefill(ctx context.Context, p *workload.Prefill) error {
	if p == nil {
		return nil
	}
	if !(p.CPU >= 0 && p.CPU <= 1 && p.Memory >= 0 && p.Memory <= 1) || p.Jobs == nil {
		return fmt.Errorf("sim: prefill: targets cpu %v, memory %v: fractions in [0, 1] (both 0: a list), and jobs needed", p.CPU, p.Memory)
	}
	list := p.CPU == 0 && p.Memory == 0 // every job, as far as it fits
	machines := s.cfg.Machines
	freeCPU, freeMem := make([]int64, len(machines)), make([]int64, len(machines))
	pool := make([]int, len(machines)) // machine indexes, in the order of the draw
	var memTotal int64
	for n, m := range machines {
		freeCPU[n], freeMem[n], pool[n] = m.CPU, m.Memory, n
		memTotal += m.Memory
	}
	limit := func(target float64, total int64) int64 {
		if target == 0 {
			return math.MaxInt64
		}
		return int64(math.Floor(target * float64(total)))
	}
	cpuLimit, memLimit := limit(p.CPU, s.cpuTotal), limit(p.Memory, memTotal)
	var cpu, mem int64
	rng := rand.New(rand.NewPCG(s.cfg.Seed, prefillStream))
	st := PrefillStats{TargetCPU: p.CPU, TargetMemory: p.Memory}
	for full, misses := false, 0; !full && (list || misses < prefillMisses); {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sim: prefill: %w", err)
		}
		job, err := p.Jobs.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("sim: prefill: %w", err)
		}
		on := make([]int, 0, len(job.Tasks)) // the machine of each task placed
		kept := make([]workload.Task, 0, len(job.Tasks))
		remaining := len(pool)
		// A list's jobs may mix task shapes (a trace's do): a task of
		// another shape draws from the whole cell again, but for the
		// machines the job uses if they must be distinct.
		var used map[int]bool
		if list && job.DistinctMachines {
			used = map[int]bool{}
		}
		for i, t := range job.Tasks {
			if cpu+t.CPU > cpuLimit || mem+t.Memory > memLimit {
				full = true
				break
			}
			if list && i > 0 && (t.CPU != job.Tasks[i-1].CPU || t.Memory != job.Tasks[i-1].Memory) {
				remaining = len(pool)
			}
			m := -1
			for remaining > 0 {
				k := rng.IntN(remaining)
				c := pool[k]
				fits := freeCPU[c] >= t.CPU && freeMem[c] >= t.Memory && matches(machines[c].Labels, job.MatchLabels) && !used[c]
				if fits && !job.DistinctMachines {
					m = c
					break
				}
				// Full, or used by the job: out of the job's draw.
				remaining--
				pool[k], pool[remaining] = pool[remaining], pool[k]
				if fits {
					m = c
					break
				}
			}
			if m < 0 && list {
				st.NotPlaced++
				continue // fits nowhere: left out, the job's other tasks tried
			}
			if m < 0 {
				break // fits nowhere: the job keeps the tasks placed
			}
			freeCPU[m] -= t.CPU
			freeMem[m] -= t.Memory
			cpu += t.CPU
			mem += t.Memory
			on = append(on, m)
			kept = append(kept, t)
			if used != nil {
				used[m] = true
			}
		}
		if len(on) == 0 {
			misses++
			continue
		}
		misses = 0
		job.Tasks = kept // the source's slice, not changed
		if err := s.prefillJob(job, on); err != nil {
			return err
		}
		st.Jobs++
		st.Tasks += len(on)
	}
	if s.cpuTotal > 0 {
		st.CPUUtilisation = float64(cpu) / float64(s.cpuTotal)
	}
	if memTotal > 0 {
		st.MemoryUtilisation = float64(mem) / float64(memTotal)
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
	if err := s.createTasks(js); err != nil {
		return fmt.Errorf("sim: prefill: submit job %s: %w", job.ID, err)
	}
	s.jobs[js.key] = js
	plan := &framework.Plan{Placements: make([]framework.Placement, len(on))}
	for i, m := range on {
		plan.Placements[i] = framework.Placement{Task: js.ftask(int32(i)), Machine: s.view.Machine(s.cfg.Machines[m].Name)}
	}
	res, err := framework.CommitPlan(context.Background(), s.store, plan, framework.Modes{Conflict: framework.Fine, Txn: framework.Incremental},
		prefillScheduler, epoch.Add(s.now))
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

// matches reports whether labels has every key and value of want.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
