// Package workload is the simulator's input: a cell (machines) and the
// jobs submitted to it, from a real trace or a synthetic generator.
//
//	Google 2011 trace ──ReadGoogle2011──► GoogleTrace.Jobs ──FromJobs──┐
//	generic CSV file ───OpenCSV─────────► *CSVReader ──────────────────┼─► Source ─► Window ─► Compress ─► simulator
//	YAML config ────────NewGenerator────► *Generator ──────────────────┘
//	                    (Config.Cell.Machines() or GoogleCell(o).Machines() is the cell)
//
// A Source hands out Jobs in submit order, one per Next, and io.EOF at
// the end; one goroutine reads it and treats the jobs as read-only.
// Times are durations from the start of the workload; CPU is in
// millicores and memory in bytes, as TaskTemplate.requests and
// MachineSpec.capacity; priorities are on Troupe's scale
// (framework.ProductionPriority, 100, starts the production band). A task
// Duration of 0 means it runs until the end of the simulation. Window
// keeps the jobs submitted in [from, to) and moves them to start at 0;
// Compress divides submit times and durations by factors (the same
// factor for both keeps the cell's load and multiplies the schedulers').
//
// # Google cluster trace 2011
//
// ReadGoogle2011 reads the task_events table (gzip parts, streamed; a
// part's line number in errors counts decompressed lines). The job_events
// table adds nothing: every task event carries its job, priority,
// scheduling class and requests. The rules:
//
//   - A job is a job ID's tasks, submitted at the job's first task
//     SUBMIT, with that task's priority, class and different-machines
//     flag. (In the 11-hour sample, 15 jobs add 67 tasks more than a
//     second later; they are submitted with the job.)
//   - A task is replayed once, at its first SUBMIT. Later SUBMITs
//     (resubmissions after an eviction, failure or kill) are not: the
//     simulated schedulers preempt and the job controller restarts on
//     their own.
//   - A task's Duration is the length of its last run, from SCHEDULE to
//     FINISH, FAIL, KILL or LOST. If its last run was evicted, or is
//     still going when reading stops, Duration is 0 (until the end).
//     Tasks that exist when the trace starts are submitted at time 0, so
//     the simulated cell fills at once, as the trace's starts full.
//   - A task never scheduled in what was read is dropped, and so is a job
//     left without tasks: the trace gives no evidence that it could run.
//     (In the sample: 8,469 killed while pending, 9,202 pending to the
//     end, nearly all for over an hour.)
//   - Batch or service as in the Omega paper (Schwarzkopf et al., EuroSys
//     2013; its simulator's "cmb_pbb" policy in
//     google/cluster-scheduler-simulator): service if the priority is in
//     the production band (9-11) and the scheduling class is 2 or 3,
//     batch otherwise.
//   - Priority p (0-11) becomes 10(p+1): the trace's production band
//     9-11 becomes 100-120, Troupe's.
//   - Requests are fractions of the largest machine, taken as
//     GoogleOptions.LargestCPU and LargestMemory (default 32 cores and
//     128 GiB). A task whose SUBMIT lacks them takes them from its next
//     event that has them.
//   - The machine_events table is not in the sample: GoogleCell builds
//     GoogleOptions.Machines machines (default 12,500) in the published
//     mix: 93% with half the largest machine's CPU and memory, 6% with
//     all, 1% with a quarter.
//
// On the 8-part sample (11.3 hours, 540,421 SUBMITs) this gives 12,511
// jobs and 382,288 tasks (140,462 resubmissions and 17,671 tasks that
// never ran left out; 150,111 tasks run until the end), 1,473 of the jobs
// services.
//
// # Generic CSV
//
// Any other trace can be converted to this format and replayed with
// OpenCSV (WriteCSV writes it). One row per task, a header row naming
// the columns in any order, rows in non-decreasing submit_time, and the
// rows of a job contiguous (with the same job fields); a file ending in
// .gz is gzip-compressed; lines starting with # are comments:
//
//	submit_time        seconds from the start (decimal), job field
//	job                job ID, unique in the file
//	task_index         integer >= 0, unique in the job
//	cpu                cores (decimal; 0.25 = 250 millicores)
//	memory             GiB (decimal; 0.5 = 512 MiB)
//	duration           seconds (decimal, > 0); empty: until the end
//	priority           integer on Troupe's scale, job field
//	type               batch or service, job field
//	distinct_machines  optional: true/false/1/0 (empty: false), job field
//	match_labels       optional: key=value;key=value, job field
//
// For example:
//
//	submit_time,job,task_index,cpu,memory,duration,priority,type
//	0,web,0,2,4,,100,service
//	0,web,1,2,4,,100,service
//	12.5,etl-7,0,0.5,1.5,300,10,batch
//
// A malformed row is an error naming the file, the line and the column
// (*RowError); the reader stops there.
//
// # Synthetic workloads
//
// A Config (YAML, or JSON, which is YAML; see LoadConfig and
// deploy/sim/omega-cluster-c.yaml) gives the cell as machine shapes
// with counts and labels (and zones), and classes of jobs, each batch or
// service with its own arrival process (poisson or fixed interval), so
// the mix is set by their rates. A class draws per job the number of
// tasks, the tasks' CPU and memory, the priority, distinct machines (a
// fraction of jobs) and at most one label selector (each with a
// fraction), and per task the duration (or per job, duration_per: job:
// all the job's tasks run as long, as in the Omega lightweight
// simulator), from distributions (Dist: fixed, uniform, exponential,
// lognormal or an empirical choice). Whole-number fields (tasks,
// priority) round an exponential or lognormal draw to the nearest
// (default), floor or ceil (round: ceil), so the lightweight simulator's
// "ceil(exponential)" tasks are one line:
//
//	tasks: {dist: exponential, mean: 100, round: ceil}
//
// A prefill starts the cell full: before the first job, the simulator
// places long-running jobs drawn like a class (like: NAME, any of tasks,
// cpu_cores, memory_gib, priority given in its place), each task on a
// machine drawn at random among those with room, until the cell's
// allocated CPU (or memory) would pass the target, and none of it counts
// in the schedulers' measures (sim's prefill.go):
//
//	prefill: {cpu_utilisation: 0.6, like: service}
//
// The Generator is then a Prefiller: PrefillOf(src) returns the target
// and an endless source of prefill-1, prefill-2, ... (their own random
// stream; the classes' jobs are the same with or without it), kept by
// Window and ScaleArrivals, their durations divided by Compress;
// WithPrefill gives any Source one. deploy/sim/omega-lightweight.yaml is
// the lightweight simulator's example this way.
//
// Validate names the field of any problem. The Generator is seeded: the
// same config gives the same jobs, and each class has its own random
// stream.
package workload
