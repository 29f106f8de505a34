package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

const (
	// prefillMisses: the prefill stops after this many jobs in a row
	// place no task (the cell has no room left for their shapes).
	prefillMisses = 100
	// prefillStream is the random stream of the prefill's placements
	// (the schedulers' are 0, 1, ..., the machines' failures
	// failureStreams + i, below 1<<33).
	prefillStream = 1 << 33
	// PrefillScheduler is the scheduler the prefill's bindings name, in
	// memory and against a store (tools/sim/storerun).
	PrefillScheduler = "prefill"
)

// PlanPrefill chooses where p's jobs go (nil: nowhere) in a cell of
// machines, empty at first, as the Omega lightweight simulator
// (google/cluster-scheduler-simulator) prefills its cell: each task goes
// on a machine chosen uniformly at random among those with room for it
// (its scheduleJob: random first fit, machines found full taken out of
// the draw). A job's tasks are placed in order until one fits nowhere,
// and the job keeps those placed (partial placement); the prefill stops
// before the first task that would take the cell's allocated CPU (or
// memory) past its target, so it ends within one task's requests below
// the target, or earlier when p.Jobs ends or prefillMisses jobs in a
// row place nothing. A prefill without targets is a list (a trace's
// tasks running at its window's start, with what remains of their
// runs): every task of every job of p.Jobs is placed, as far as it fits,
// until p.Jobs ends; a task that fits nowhere is left out (NotPlaced)
// and the job's next tasks are tried. Distinct machines and label
// selectors hold.
//
// Each job of which a task was placed goes to place, in order, with its
// Tasks those placed (in order; the source's slice is not changed) and
// on[i] the index in machines of task i's machine; an error from place
// ends the plan and is returned as it is. The draws come from a random
// stream of their own under seed (the experiment's, Config.Seed), so one
// seed places a prefill the same way in memory (Simulator.Run) and
// against a store (tools/sim/storerun). The stats returned say what was
// placed.
func PlanPrefill(ctx context.Context, p *workload.Prefill, machines []workload.Machine, seed uint64,
	place func(job workload.Job, on []int) error) (PrefillStats, error) {
	if p == nil {
		return PrefillStats{}, nil
	}
	if !(p.CPU >= 0 && p.CPU <= 1 && p.Memory >= 0 && p.Memory <= 1) || p.Jobs == nil {
		return PrefillStats{}, fmt.Errorf("sim: prefill: targets cpu %v, memory %v: fractions in [0, 1] (both 0: a list), and jobs needed", p.CPU, p.Memory)
	}
	list := p.CPU == 0 && p.Memory == 0 // every job, as far as it fits
	freeCPU, freeMem := make([]int64, len(machines)), make([]int64, len(machines))
	pool := make([]int, len(machines)) // machine indexes, in the order of the draw
	var cpuTotal, memTotal int64
	for n, m := range machines {
		freeCPU[n], freeMem[n], pool[n] = m.CPU, m.Memory, n
		cpuTotal += m.CPU
		memTotal += m.Memory
	}
	limit := func(target float64, total int64) int64 {
		if target == 0 {
			return math.MaxInt64
		}
		return int64(math.Floor(target * float64(total)))
	}
	cpuLimit, memLimit := limit(p.CPU, cpuTotal), limit(p.Memory, memTotal)
	var cpu, mem int64
	rng := rand.New(rand.NewPCG(seed, prefillStream))
	st := PrefillStats{TargetCPU: p.CPU, TargetMemory: p.Memory}
	for full, misses := false, 0; !full && (list || misses < prefillMisses); {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("sim: prefill: %w", err)
		}
		job, err := p.Jobs.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("sim: prefill: %w", err)
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
		if err := place(job, on); err != nil {
			return st, err
		}
		st.Jobs++
		st.Tasks += len(on)
	}
	if cpuTotal > 0 {
		st.CPUUtilisation = float64(cpu) / float64(cpuTotal)
	}
	if memTotal > 0 {
		st.MemoryUtilisation = float64(mem) / float64(memTotal)
	}
	return st, nil
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
