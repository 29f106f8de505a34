package storerun

import (
	"context"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// instance is a real scheduler instance of the experiment, and the
// model of its decision time. A scheduler decides in the wall time its
// code takes (microseconds on a small cell) and has no decision time to
// inject, so the instance's placement commits come through here
// (scheduler.Config.Commits) and wait the modelled time first, t_job +
// t_task per placement: as in the simulator, a decision reads its
// snapshot, and commits against the cell as it is once the decision time
// has passed. The tasks that fit nowhere are known only when the
// decision is reported (scheduler.Config.Observe), after its commit:
// their t_task, and t_job if nothing was committed, are waited then, so
// that the instance is busy for the whole modelled time, but its commit
// came that much earlier than the simulator's.
type instance struct {
	r        *run
	index    int
	decision framework.DecisionTime
	sched    *scheduler.Scheduler
	// Store is the instance's client, which commits after the wait.
	clientlib.Store

	// The decision in progress, touched only by the instance's goroutine:
	// when its first commit came (zero: none yet), and the decision time
	// waited so far.
	start  time.Time
	waited time.Duration
}

// Commit waits the decision time of the placements in req, then commits.
func (in *instance) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	d := in.decision.Task * time.Duration(placements(req))
	if in.start.IsZero() {
		in.start, d = time.Now(), d+in.decision.Job
		in.r.begin()
	}
	in.waited += d
	err := in.r.sleep(ctx, d)
	var resp *storev1.CommitResponse
	if err == nil {
		resp, err = in.Store.Commit(ctx, req)
	}
	if err != nil {
		in.start, in.waited = time.Time{}, 0 // the instance gives up the decision: no report follows
		in.r.end()
	}
	return resp, err
}

// placements counts the placements in a commit request: each creates its
// task's Binding (a preemption's victims lose theirs).
func placements(req *storev1.CommitRequest) int {
	n := 0
	for _, g := range req.GetGroups() {
		for _, op := range g.GetOps() {
			if strings.HasPrefix(op.GetPut().GetKey(), clientlib.Bindings.Prefix) {
				n++
			}
		}
	}
	return n
}

// observe takes the report of a decision, just after its commit: the
// rest of its modelled time is waited, and it is recorded from its first
// commit (or now, without one) to the end of the wait.
func (in *instance) observe(d scheduler.Decision) {
	committed := time.Now()
	began := !in.start.IsZero()
	if !began {
		in.start = committed
	}
	in.r.sleep(in.r.ctx, in.decision.For(len(d.Plan.Placements)+len(d.Plan.Failures))-in.waited)
	in.r.decided(in.index, d, in.start, committed, time.Now())
	in.start, in.waited = time.Time{}, 0
	if began {
		in.r.end()
	}
}

// decided records decision d of scheduler i, from start to end, committed
// at committed: the workload job's wait (its first decision), the
// decision's time and outcome, the tasks it preempted, the workload
// job's wait until none of its tasks was pending (the first commit after
// which every task had been placed and not preempted since), and the
// workload job's abandoning (the scheduler's policy gives its Job up and
// stops its pending tasks).
func (r *run) decided(i int, d scheduler.Decision, start, committed, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	js := r.jobs[d.Job]
	if !js.of.decided {
		js.of.decided = true
		r.rec.Waited(i, r.virtual(start)-js.of.submit)
	}
	r.rec.Decided(i, r.virtual(start), r.virtual(end), scheduler.Outcome{Placed: len(d.Result.Committed),
		Conflicted: len(d.Result.Conflicted), Stopped: len(d.Result.Stopped), Unfit: len(d.Plan.Failures)})
	for _, p := range d.Result.Committed {
		js.of.placed[p.Task.Key] = true
		for _, v := range p.Victims {
			victim := r.jobs[v.Job]
			r.rec.Preempted(victim.sched)
			delete(victim.of.placed, v.Key)
		}
	}
	if !js.of.allPlaced && len(js.of.placed) == js.of.tasks {
		js.of.allPlaced = true
		r.rec.Placed(i, r.virtual(committed)-js.of.submit)
	}
	if d.Action.Step == scheduler.Abandon && !js.of.abandoned {
		js.of.abandoned = true
		r.rec.Abandoned(i)
	}
}
