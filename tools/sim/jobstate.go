package sim

import (
	"slices"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// jobState is a job the simulator follows.
type jobState struct {
	job   workload.Job
	key   string           // "<ns>/<name>"
	tasks []*troupev1.Task // changed only by set
	// ftasks are the tasks as decisions take them (nil: to be made);
	// unbound are the indexes of the pending tasks, ascending, and
	// shapes their distinct requests (nil: to be worked out); on counts
	// the tasks bound per machine, onAt the same by the machines'
	// positions in the view (nil: to be worked out; dropped when the job
	// is no longer decided about).
	ftasks  []*framework.Task
	keys    []string // the tasks' store keys ("": to be made)
	unbound []int32
	shapes  []framework.Room
	on      map[string]int
	onAt    []scheduler.MachineTasks
	// runs counts each task's placements, so that the end of a run that
	// was preempted is told apart from the end of the current one; slots
	// are where each bound task is in its machine's tasks.
	runs    []int
	slots   []int32
	sched   *simScheduler
	policy  scheduler.JobState
	queued  bool          // in its scheduler's queue
	waiting bool          // fits nowhere; tried again after its back-off or when capacity is released
	wait    uint64        // the number of its current or last wait
	first   time.Duration // first decision started (-1: none yet)
	done    bool          // every task placed, or abandoned
	placed  bool          // none of its tasks pending after a commit (its wait until placed recorded)
	// ended counts its tasks that ran to their end; measured: it is one
	// of the workload's jobs (not the prefill's), counted by Stats.
	ended    int
	measured bool
}

// clone returns a copy of task i at version to change and set:
// decisions in flight hold the task as it was. Its metadata is its own;
// the rest is shared: a binding or status is replaced, never changed in
// place.
func (js *jobState) clone(i int32, version uint64) *troupev1.Task {
	return clientlib.TaskAt(js.tasks[i], version)
}

// set makes t task i of the job, keeping what follows from the tasks.
func (js *jobState) set(i int32, t *troupev1.Task) {
	if m := js.tasks[i].GetBinding().GetMachine(); m != "" {
		if js.on[m]--; js.on[m] == 0 {
			delete(js.on, m)
		}
		js.onAt = nil
	}
	if m := t.GetBinding().GetMachine(); m != "" {
		js.on[m]++
		js.onAt = nil
	}
	at, listed := slices.BinarySearch(js.unbound, i)
	switch pending := clientlib.Pending(t); {
	case pending && !listed:
		js.unbound, js.shapes = slices.Insert(js.unbound, at, i), nil
	case !pending && listed:
		js.unbound, js.shapes = slices.Delete(js.unbound, at, at+1), nil
	}
	js.tasks[i], js.ftasks[i] = t, nil
}

// ftask returns task i as decisions take it.
func (js *jobState) ftask(i int32) *framework.Task {
	if js.ftasks[i] == nil {
		js.ftasks[i] = framework.NewTask(js.taskKey(i), js.tasks[i])
	}
	return js.ftasks[i]
}

// taskKey returns the store key of task i, which its changes keep.
func (js *jobState) taskKey(i int32) string {
	if js.keys[i] == "" {
		js.keys[i], _ = clientlib.Tasks.Key(js.tasks[i])
	}
	return js.keys[i]
}

// waitingFor returns what a machine must offer to wake the job
// (scheduler.Wakes): room for one of its pending tasks' shapes, and its
// first pending task passing the static filters.
func (js *jobState) waitingFor() scheduler.Waiting {
	if len(js.unbound) == 0 {
		return scheduler.Waiting{}
	}
	if js.shapes == nil {
		js.shapes = scheduler.Shapes(js.pending())
	}
	return scheduler.Waiting{Shapes: js.shapes, Task: js.ftask(js.unbound[0])}
}

// pending returns the job's unbound tasks, for scheduling.
func (js *jobState) pending() []*framework.Task {
	return js.appendPending(make([]*framework.Task, 0, len(js.unbound)))
}

// appendPending appends the job's unbound tasks to out.
func (js *jobState) appendPending(out []*framework.Task) []*framework.Task {
	for _, i := range js.unbound {
		out = append(out, js.ftask(i))
	}
	return out
}
