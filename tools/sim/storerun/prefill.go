package storerun

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// prefillJobs bounds the prefill's Jobs written in one request (the
// store takes 1,024 groups; a Job's write is one), but for a workload
// job of more request shapes.
const prefillJobs = 256

// prefill fills the cell with p's jobs (nil: nothing) before the run's
// clock starts, as the in-memory simulator does at time 0: the machines
// are those sim.PlanPrefill chooses, with the experiment's seed (the
// same as in memory), and the jobs are written as the submitter writes
// any (putJobs: one Job per request shape, for the scheduler serving
// their type, which places again a task preempted or lost). Once the job
// controller has created their tasks, pending, they are bound by
// framework.CommitPlan (fine-grained, incremental), as a scheduler
// commits, in bindings that name sim.PrefillScheduler; no scheduler runs
// yet, so none decides them, and none of it counts in a scheduler's
// measures: the Jobs count in none of jobs, tasks, waits or unscheduled
// jobs. The hollow agents start the tasks at once; a task's first run
// ends its duration after virtual time 0 (hollow.Start). It returns
// what was placed.
func (r *run) prefill(ctx context.Context, p *workload.Prefill) (*sim.PrefillStats, error) {
	if p == nil {
		return nil, nil
	}
	machines := make([]*framework.Machine, len(r.cfg.Machines))
	for n, m := range r.cfg.Machines {
		machines[n] = &framework.Machine{Name: m.Name, Capacity: map[string]int64{framework.CPU: m.CPU, framework.Memory: m.Memory},
			Allocated: map[string]int64{}}
	}
	on := map[string]*framework.Machine{} // by task reference
	var txs []*clientlib.Txn
	groups := 0 // in the last of txs
	created := timestamppb.Now()
	st, err := sim.PlanPrefill(ctx, p, r.cfg.Machines, r.cfg.Seed, func(job workload.Job, at []int) error {
		i, err := r.schedulerFor(job)
		if err != nil {
			return fmt.Errorf("storerun: prefill: %w, to place its tasks again if they are preempted or lost", err)
		}
		if n := len(byShape(job.Tasks)); len(txs) == 0 || groups+n > prefillJobs {
			txs, groups = append(txs, clientlib.NewTxn(r.c)), n
		} else {
			groups += n
		}
		// Decided and placed: its waits are not measured.
		sub := &submission{decided: true, allPlaced: true, prefill: true, tasks: len(job.Tasks), placed: map[string]bool{}}
		r.mu.Lock()
		refs := r.putJobs(txs[len(txs)-1], job, i, sub, created)
		r.mu.Unlock()
		for t, ref := range refs {
			on[ref] = machines[at[t]]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, tx := range txs {
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("storerun: prefill: write the jobs: %w", err)
		}
	}
	if len(on) == 0 {
		return &st, nil
	}
	if err := await(r, clientlib.Tasks, namespace+"/", len(on), "the job controller to create the prefill's tasks"); err != nil {
		return nil, err
	}
	tasks, _, err := clientlib.List(ctx, r.c, clientlib.Tasks, namespace+"/")
	if err != nil {
		return nil, fmt.Errorf("storerun: prefill: read the tasks: %w", err)
	}
	plan := &framework.Plan{}
	for _, t := range tasks {
		ref := clientlib.TaskRef(t.GetMetadata().GetNamespace(), t.GetSpec().GetJob(), t.GetSpec().GetIndex())
		m := on[ref]
		if m == nil {
			return nil, fmt.Errorf("storerun: prefill: the store holds task %s, which is not the prefill's", ref)
		}
		if !clientlib.Pending(t) {
			return nil, fmt.Errorf("storerun: prefill: task %s is %s before the prefill binds it", ref, t.GetStatus().GetPhase())
		}
		key, err := clientlib.Tasks.Key(t)
		if err != nil {
			return nil, fmt.Errorf("storerun: prefill: %w", err)
		}
		plan.Placements = append(plan.Placements, framework.Placement{Task: framework.NewTask(key, t), Machine: m})
	}
	res, err := framework.CommitPlan(ctx, r.c, plan, framework.Modes{Conflict: framework.Fine, Txn: framework.Incremental},
		sim.PrefillScheduler, time.Now())
	if err == nil && len(res.Committed) != len(plan.Placements) {
		err = fmt.Errorf("%d of %d placements did not commit", len(plan.Placements)-len(res.Committed), len(plan.Placements))
		if len(res.Conflicted) > 0 {
			c := res.Conflicted[0]
			err = fmt.Errorf("%w (task %s on %s: %v)", err, c.Placement.Task.Key, c.Placement.Machine.Name, c.Conflict)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("storerun: prefill: bind the tasks: %w", err)
	}
	return &st, nil
}

// afterStart is the hollow machines' timer of a task's first run from
// the prefill: it fires d after virtual time 0, whenever the task
// started (before the clock did). It gives up when the run ends.
func (r *run) afterStart(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		select {
		case <-r.started:
		case <-r.ctx.Done():
			return
		}
		r.mu.Lock()
		end := r.t0.Add(d)
		r.mu.Unlock()
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		select {
		case now := <-t.C:
			ch <- now
		case <-r.ctx.Done():
		}
	}()
	return ch
}
