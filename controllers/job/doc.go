// Package job is the job controller: it closes the gap between what a Job
// asks for and the tasks that exist.
//
//   - It creates a job's tasks (one per index below spec.count), pending
//     for the job's scheduler.
//   - It is where the cell's ValidationPolicies bind, whatever client
//     wrote a job: it follows them (a clientlib.Validator of its own,
//     with DefaultJobLimits unless the cell stores its own job-limits)
//     and, before it creates a job's first tasks, checks the job against
//     them (and the built-in rules). A job that breaks them gets no
//     task: it stays pending, its status.admission says
//     "refused: FIELD: MESSAGE (policy/NAME)" (clientlib.AdmissionRefused),
//     and a Refused warning is recorded once per verdict. The refused
//     jobs are judged again when the policies change, and a job when it
//     is edited; once it passes, its tasks are created. A job that has
//     tasks is not judged (nor its scale-up), so a limit lowered later
//     never blocks a job already admitted; the controller's own writes
//     enforce the built-in rules alone.
//   - It follows each bound task's Run (written by the machine's agent):
//     a running task is marked RUNNING; a finished one is unbound (its
//     Binding deleted, its machine's counters given back) and marked
//     SUCCEEDED or FAILED. Only a Run of the task's current placement
//     counts (OfPlacement: its attempt and its binding's bound_at): a
//     task preempted and placed again on the same machine keeps its
//     attempt, and the Run there is the evicted placement's until the
//     agent reports the new one.
//   - Restarts are shared with the agents. A task carries its job's
//     restart policy (ALWAYS taken as ON_FAILURE for batch jobs),
//     max_retries and retry_backoff, and under ON_FAILURE or ALWAYS its
//     machine's agent restarts the process in place; a batch task whose
//     run failed under those policies has used its retries there and is
//     not replaced. Otherwise failed and lost tasks are replaced (the same
//     index, attempt+1, after spec.retry_backoff): batch jobs up to
//     spec.max_retries, service jobs always; a service job keeps
//     spec.count replicas, stopping the tasks above it.
//   - A service job's tasks are slots (service.go): count of them live
//     (pending, bound or running), a task that ended leaving its slot
//     free, a new task taking the lowest free slot. Scaling down stops
//     the highest indexes.
//   - Versions (versions.go): a job's status keeps its last versions
//     (template, constraints, tolerations, with the cause). A spec whose
//     tasks differ from the current version's starts the next version;
//     a batch job's pending tasks not yet placed take it, a service's
//     tasks are replaced in a rolling update (UpdateStrategy): old tasks
//     replaced in place, or stopped once new ones took their place,
//     while count - max_unavailable stay available (old tasks running,
//     new ones healthy: running min_healthy, passing their health check)
//     and at most count + max_surge exist; canaries first and a pause
//     until promoted; a new task that fails, restarts or is not healthy
//     within the progress deadline fails the update, which halts or,
//     with auto_revert, gives way to a new version with the stable
//     version's tasks.
//   - A stopped job's tasks are unbound and marked STOPPED; a deleted
//     job's tasks are deleted (and unbound).
//   - Quota (Controller.commit, clientlib.ChargeQuota): every write of a
//     task charges or gives back its namespace's quota counters in its
//     group. Tasks the quota refuses wait; the job's status.admission
//     says why until they are created, and the job is looked at again
//     when a task of its namespace gives its charge back or the quota
//     changes.
//   - The job's status counts its tasks; a batch job succeeds when every
//     task has, and fails when a task fails with no retries left.
//
// # A pure core, I/O outside
//
// The decisions are two pure functions, with no store, clock or logger
// inside; the Controller's sync of a job reads its caches, calls them,
// and commits what they return:
//
//	caches: the job, its tasks, their runs
//	   │
//	   ├─ each bound task ─▶ Observe(task, run) ─▶ TaskUpdate ─▶ commit
//	   │                                                    │
//	   ▼            the tasks, as written ◀─────────────────┘
//	Plan(State{job, tasks, refused}, now) ─▶ Changes ─▶ commit in order:
//	                         Delete, Status, Update, Create (batched);
//	                         requeue after RetryIn
//
// The verdict on a job without tasks under the cell's policies
// (State.Refused: the rules it breaks) is worked out by the controller,
// from its Validator, before Plan, which heeds it only while the job has
// no task and is not stopped.
//
// Each change is its own small transaction with version conditions, but
// for the creation of tasks, whose puts go in as few requests as the
// store's limits allow (one group per task, each on the condition that
// the task does not exist yet); a conflict requeues the job, which is
// synced again from fresh caches. Once a change is written its events
// are recorded (Config.Events): tasks created (TasksCreated) or stopped
// above a reduced count (ScaledDown), a task failed (Failed, with its
// exit code), retried (Retrying, n of max_retries) or, for a service,
// replaced (Replaced), the job refused under the cell's policies
// (Refused), and the job succeeded, failed or stopped.
//
// The scripts in testdata/*.txt drive Observe and Plan through these
// cases (see plan_script_test.go).
//
// A job, task or run whose stored value cannot be read (see
// clientlib.DecodeAt) is skipped, logged once and recorded as an
// Unreadable event on its job (its machine, for a run): an unreadable
// job gets no tasks and its tasks are left alone; an unreadable task is
// neither created again over nor counted in its job's status
// (State.Unreadable).
package job
