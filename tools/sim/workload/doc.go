// Package workload is the simulator's input: a cell (machines) and the
// jobs submitted to it, from a real trace or a synthetic generator.
//
//	Google 2011 trace ──ReadGoogle2011(window)──► Trace ──Source──┐
//	generic CSV file ───ReadCSV(window)─────────► Trace ──Source──┼─► Source ─► Compress ─► simulator
//	                    (OpenCSV: *CSVReader, streamed)           │
//	YAML config ────────NewGenerator────► *Generator ──► Window ──┘
//	                    (Config.Cell.Machines(), LoadCell(f).Machines() or GoogleCell(o).Machines() is the cell)
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
// A trace is read through a window [From, To) of its time (From 0: its
// first event), and the clock starts at the window: virtual time 0 is
// From. Read that way (a Trace), the cell starts as the trace shows it:
// the tasks running at From are a list Prefill (Trace.Running), placed
// at 0 before anything else, each for what remained of its run; a
// Trace's Source is a Prefiller and a Reporter, whose Report says what
// was read (events, first and last event time, window), what is
// replayed (jobs and tasks, those pending and running at the start) and
// what is left out, counted by reason (Skip). A window that starts
// before the first event read or after the last, or holds no event, is
// an ErrWindow when the trace is read.
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
//   - A window [From, To) replays the jobs whose first SUBMIT is in it,
//     Submit - From. A task of a job submitted before From is replayed
//     by where it stood at From: running (SCHEDULEd, its run not ended),
//     it is in Trace.Running, placed at 0 for what remains of its runs
//     cut at From (the rule above: the rest of the run going on at From,
//     or its last run after it; 0 if that was evicted or is still going);
//     pending (SUBMITted again or not yet scheduled), or added to the
//     job after From, it is submitted at 0 with the job's other such
//     tasks if it is scheduled later ("<job>.pending" if the job also
//     has tasks running), and left out as never scheduled if not; ended
//     (and not pending again), it is left out. Jobs submitted at or
//     after To are left out. Events after To are still read, for the
//     durations of the runs they end.
//   - A task whose first event read is not a SUBMIT existed before the
//     first event read (a trace read from a later part, whose earlier
//     parts hold its SUBMIT): its job is submitted before the window, and
//     the task was running since the first event read if that event is
//     an EVICT, FAIL, FINISH, LOST or UPDATE_RUNNING, pending if it is a
//     SCHEDULE or UPDATE_PENDING; first seen by a KILL, which ends
//     running and pending tasks alike, it is left out. (Read from part
//     4 of the sample, 99.98% of the 38,280 tasks found running at its
//     start are running then read from part 0, 98% with the same
//     remaining duration; the 102,000 that run through parts 4-7
//     without an event are not seen.)
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
// services. Its window [3 h, 4 h) starts with 133,124 tasks of 4,030
// jobs running (their requests are 103% of GoogleCell's CPU and 74% of
// its memory: the cell was overcommitted, or its mix is not quite the
// trace's) and 831 pending, and replays 887 jobs.
//
// # Generic CSV
//
// Any other trace can be converted to this format and replayed with
// ReadCSV (in memory, through a window) or OpenCSV (streamed; WriteCSV
// writes the format). One row per task, a header row naming the columns
// in any order, rows in non-decreasing submit_time, and the rows of a
// job contiguous (with the same job fields); a file ending in .gz is
// gzip-compressed; lines starting with # are comments:
//
//	submit_time        seconds from the start (decimal), job field
//	job                job ID, unique in the file: 1-200 lowercase letters,
//	                   digits, '-' and '.', each '.'-separated part starting
//	                   and ending with a letter or digit (a DNS subdomain)
//	task_index         integer >= 0, unique in the job
//	cpu                cores (decimal; 0.25 = 250 millicores)
//	memory             GiB (decimal; 0.5 = 512 MiB)
//	duration           seconds (decimal, > 0); empty: until the end
//	priority           integer in [0, 1000] on Troupe's scale, job field
//	type               batch or service, job field
//	distinct_machines  optional: true/false/1/0 (empty: false), job field
//	match_labels       optional: key=value;key=value, job field; a key is
//	                   [prefix/]name, the prefix a DNS subdomain, the name
//	                   and the value (may be empty) at most 63 letters,
//	                   digits, '-', '_' and '.', starting and ending with a
//	                   letter or digit
//
// For example:
//
//	submit_time,job,task_index,cpu,memory,duration,priority,type
//	0,web,0,2,4,,100,service
//	0,web,1,2,4,,100,service
//	12.5,etl-7,0,0.5,1.5,300,10,batch
//
// These are the cell's rules (clientlib's validation of the tasks the
// simulator writes, named <job>-<index>, and of the store runner's jobs),
// checked as each row is read. A malformed row is an error naming the
// file, the line and the column (*RowError); the reader stops there. A
// CSV trace does not say when its tasks ran: its window starts empty,
// the jobs submitted before it left out and counted. Its cell is given
// apart, as a synthetic config's cell: section (LoadCell).
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
