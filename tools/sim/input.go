package sim

// What the simulator writes to its store, exported so that a harness that
// drives the production loop over the in-memory store (the scheduler's
// TestLoopMatchesSimulator) writes the same objects.

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// epoch is the wall time virtual time 0 maps to, for the store's clock
// and the objects' timestamps.
var epoch = time.Date(2011, 5, 1, 0, 0, 0, 0, time.UTC)

// MachineObject returns machine m as the simulator registers it: ready,
// with its labels and its CPU and memory.
func MachineObject(m workload.Machine) *troupev1.Machine {
	return &troupev1.Machine{
		Metadata: &troupev1.ObjectMeta{Name: m.Name, Labels: m.Labels},
		Spec:     &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": m.CPU, "memory": m.Memory}},
		Status:   &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY},
	}
}

// Tasks returns the tasks the simulator submits job as, pending for
// schedulers of kind, at virtual time now, in namespace "sim". A task's
// index is its position in the job (traces may skip indices). The tasks
// share the messages they have alike (constraints, submission time,
// status, and the template of a run of tasks with the same requests): the simulator
// changes a task by copying it, never a message in place, and a job of
// thousands of tasks is made with a few maps, not thousands.
func Tasks(job workload.Job, kind string, now time.Duration) []*troupev1.Task {
	tasks := make([]*troupev1.Task, 0, len(job.Tasks))
	constraints := &troupev1.Constraints{DistinctMachines: job.DistinctMachines, MatchLabels: job.MatchLabels}
	submitted := timestampAt(now)
	pending := &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING}
	var template *troupev1.TaskTemplate
	for pos, t := range job.Tasks {
		if pos == 0 || t.CPU != job.Tasks[pos-1].CPU || t.Memory != job.Tasks[pos-1].Memory {
			template = &troupev1.TaskTemplate{Command: "sim", Requests: map[string]int64{"cpu": t.CPU, "memory": t.Memory}}
		}
		index := int32(pos)
		tasks = append(tasks, &troupev1.Task{
			Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job.ID, index), Namespace: "sim"},
			Spec: &troupev1.TaskSpec{Job: job.ID, Index: index, Type: jobType(job.Type), Priority: job.Priority, Scheduler: kind,
				Constraints: constraints, Submitted: submitted, Template: template},
			Status: pending,
		})
	}
	return tasks
}

// End writes into g the end of task t, bound to a machine: it is unbound
// (its requests given back) and leaves the store, as the cell's garbage
// collector would take it once succeeded; no reader of the simulated cell
// tells the two apart, and a delete costs no encoding.
func End(g *clientlib.Group, t *troupev1.Task) error {
	key, err := clientlib.Tasks.Key(t)
	if err != nil {
		return err
	}
	clientlib.Release(g, t)
	g.Delete(key)
	return nil
}

// Epoch is the wall time virtual time 0 maps to.
func Epoch() time.Time { return epoch }

// jobType is the object model's job type of a workload job.
func jobType(t workload.Type) troupev1.JobType {
	if t == workload.Service {
		return troupev1.JobType_JOB_TYPE_SERVICE
	}
	return troupev1.JobType_JOB_TYPE_BATCH
}

func timestampAt(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(epoch.Add(d)) }
