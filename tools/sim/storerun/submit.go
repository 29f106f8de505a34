package storerun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

const (
	// perRequest bounds the tasks written in one request (the store takes
	// 4,096 conditions and operations; a task's write is one of each).
	perRequest = 1000
	// never is a service task's retry back-off: the workload's services
	// that end are not replaced, as in the simulator.
	never = 100 * 365 * 24 * time.Hour
)

// submitAll submits the workload's jobs at their submission times, then
// says that the workload is exhausted.
func (r *run) submitAll(ctx context.Context, src workload.Source) error {
	for {
		job, err := src.Next()
		if errors.Is(err, io.EOF) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.submitted = true
			r.checkDone()
			return nil
		}
		if err != nil {
			return err
		}
		if err := r.sleep(ctx, job.Submit-r.now()); err != nil {
			return err
		}
		if err := r.submit(ctx, job); err != nil {
			return fmt.Errorf("submit job %s: %w", job.ID, err)
		}
	}
}

// submit writes job for the scheduler the simulator would give it; the
// job controller creates its tasks, as in a cell.
func (r *run) submit(ctx context.Context, job workload.Job) error {
	i, err := r.schedulerFor(job)
	if err != nil {
		return err
	}
	tx := clientlib.NewTxn(r.c)
	r.mu.Lock()
	sub := &submission{submit: job.Submit, tasks: len(job.Tasks), placed: map[string]bool{}}
	r.putJobs(tx, job, i, sub, timestamppb.New(r.t0.Add(r.wall(job.Submit))))
	r.rec.Submitted(i, len(job.Tasks))
	r.mu.Unlock()
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	return err
}

// putJobs puts in tx, a group each, the Jobs that workload job becomes
// for scheduler i, created at created, and records them as sub and the
// durations of their tasks; the tasks of job join those expected. A Job
// has one task template, so a job whose tasks request different amounts
// (1.6% of the Google trace's jobs, with 19% of its tasks) becomes one
// Job per request shape, named <id>.<k> and decided apart; the durations
// of the tasks, one each, go to the hollow agents' runtime by task. It
// returns each task's reference (clientlib.TaskRef), in job's order.
// r.mu is held.
func (r *run) putJobs(tx *clientlib.Txn, job workload.Job, i int, sub *submission, created *timestamppb.Timestamp) []string {
	typ, restart, backoff := troupev1.JobType_JOB_TYPE_BATCH, troupev1.RestartPolicy_RESTART_POLICY_NEVER, time.Duration(0)
	if job.Type == workload.Service {
		// A service's tasks must be restarted; ON_FAILURE leaves one that
		// ends (exit 0) ended, and the back-off puts its replacement off
		// past the run.
		typ, restart, backoff = troupev1.JobType_JOB_TYPE_SERVICE, troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE, never
	}
	shapes := byShape(job.Tasks)
	refs := make([]string, len(job.Tasks))
	for k, tasks := range shapes {
		name := job.ID
		if len(shapes) > 1 {
			name = fmt.Sprintf("%s.%d", job.ID, k+1)
		}
		r.jobs[namespace+"/"+name] = &jobState{sched: i, of: sub}
		for index, t := range tasks {
			refs[t] = clientlib.TaskRef(namespace, name, int32(index))
			if d := job.Tasks[t].Duration; d > 0 {
				r.durations[refs[t]] = max(r.wall(d), 1)
			}
		}
		first := job.Tasks[tasks[0]]
		clientlib.PutObject(tx.Group(), clientlib.Jobs, &troupev1.Job{
			Metadata: &troupev1.ObjectMeta{Name: name, Namespace: namespace, Created: created},
			Spec: &troupev1.JobSpec{Type: typ, Priority: job.Priority, Scheduler: r.cfg.Schedulers[i].Name, Count: int32(len(tasks)),
				Template:      &troupev1.TaskTemplate{Command: "sim", Requests: map[string]int64{"cpu": first.CPU, "memory": first.Memory}},
				Constraints:   &troupev1.Constraints{DistinctMachines: job.DistinctMachines, MatchLabels: job.MatchLabels},
				RestartPolicy: restart, RetryBackoff: durationpb.New(backoff)}})
	}
	r.expected += len(job.Tasks)
	return refs
}

// byShape splits tasks by their requests, in the order of their first
// task: the indexes in tasks of each shape's.
func byShape(tasks []workload.Task) [][]int {
	var out [][]int
	at := map[[2]int64]int{}
	for i, t := range tasks {
		shape := [2]int64{t.CPU, t.Memory}
		k, ok := at[shape]
		if !ok {
			k, at[shape] = len(out), len(out)
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}
