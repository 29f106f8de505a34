package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// At most this many tasks and events are listed by describe; the rest
// are counted.
const (
	describeTasks  = 20
	describeEvents = 30
)

// describeCommand is `troupe describe job|task|machine NAME`: one object
// in detail, as kubectl describe prints it: metadata, spec, status,
// related objects and its Events.
func (a *app) describeCommand() *cobra.Command {
	var (
		ns string
		cf *connFlags
	)
	cmd := &cobra.Command{
		Use:   "describe job|task|machine NAME",
		Short: "Show a job, task or machine in detail, with its events",
		Long: `Show a job, task or machine in detail, as kubectl describe does: metadata,
spec, status, related objects (a job's tasks and schedulers, a task's
attempts, a machine's resources and bound tasks) and its Events. A task is
named <job>-<index>; a job or task is in -n's namespace, or written
NAMESPACE/NAME.`,
		Example: `  troupe describe job web
  troupe describe task team-a/web-3
  troupe describe machine rack1-hollow-0000`,
		Args:              exactArgs(2, "job|task|machine NAME (a task is <job>-<index>; NAMESPACE/NAME or -n for jobs and tasks)"),
		ValidArgsFunction: completeKinds([]string{"job", "task", "machine"}),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name := args[0], args[1]
			if !slices.Contains([]string{"job", "jobs", "task", "tasks", "machine", "machines", "quota", "quotas"}, kind) {
				return usagef("unknown kind %q (job, task, machine, quota)", kind)
			}
			c, _, ctx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			return describe(ctx, c, a.out, a.errOut, kind, ns, name)
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", defaultNamespace, "namespace of a job or task")
	cf = a.addConnFlags(cmd, 10*time.Second, "request timeout")
	return cmd
}

// describe prints the object of kind named name (in namespace ns, unless
// name is NAMESPACE/NAME) to out, warnings to errOut.
func describe(ctx context.Context, c *clientlib.Client, out, errOut io.Writer, kind, ns, name string) error {
	if n, rest, ok := strings.Cut(name, "/"); ok && kind != "machine" && kind != "machines" {
		ns, name = n, rest
	}
	d := &describer{out: out, w: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0), now: time.Now(), errOut: errOut}
	var err error
	switch kind {
	case "job", "jobs":
		err = describeJob(ctx, c, d, ns, name)
	case "task", "tasks":
		err = describeTask(ctx, c, d, ns, name)
	case "quota", "quotas": // name is the namespace (quota.go)
		err = describeQuota(ctx, c, d, name)
	default:
		err = describeMachine(ctx, c, d, name)
	}
	if ferr := d.w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// describer writes "Key:  value" lines aligned like kubectl describe's,
// nested by indentation, and tables.
type describer struct {
	out    io.Writer
	w      *tabwriter.Writer // over out; flushed before each table
	now    time.Time
	errOut io.Writer // where warnings go
}

func (d *describer) field(indent int, key string, value any) {
	fmt.Fprintf(d.w, "%s%s:\t%v\n", strings.Repeat("  ", indent), key, value)
}

func (d *describer) section(indent int, title string) {
	fmt.Fprintf(d.w, "%s%s:\n", strings.Repeat("  ", indent), title)
}

// table prints objs under the current section, at most limit of them.
func table[T any](d *describer, cols []column[T], objs []T, limit int) error {
	if err := d.w.Flush(); err != nil {
		return err
	}
	more := len(objs) - limit
	if more > 0 {
		objs = objs[:limit]
	}
	if err := writeTable(d.out, "  ", cols, objs, false); err != nil {
		return err
	}
	if more > 0 {
		fmt.Fprintf(d.out, "  ... and %d more\n", more)
	}
	return nil
}

func (d *describer) meta(m *troupev1.ObjectMeta) {
	d.field(0, "Name", m.GetName())
	if ns := m.GetNamespace(); ns != "" {
		d.field(0, "Namespace", ns)
	}
	d.field(0, "Labels", labels(m.GetLabels()))
	d.field(0, "Annotations", labels(m.GetAnnotations()))
	if m.GetCreated() != nil { // tasks have none: see Submitted
		d.field(0, "Created", timestamp(d.now, m.GetCreated()))
		d.field(0, "UID", m.GetUid())
	}
}

func (d *describer) template(t *troupev1.TaskTemplate) {
	d.section(0, "Template")
	cmd := []string{t.GetCommand()}
	for _, a := range t.GetArgs() {
		if strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		cmd = append(cmd, a)
	}
	d.field(1, "Command", strings.Join(cmd, " "))
	d.field(1, "Env", labels(t.GetEnv()))
	d.field(1, "Requests", resources(t.GetRequests()))
	d.field(1, "Limits", resources(t.GetLimits()))
	if wd := t.GetWorkingDir(); wd != "" {
		d.field(1, "Working dir", wd)
	}
	if sd := t.GetSimDuration(); sd != nil {
		d.field(1, "Sim duration", sd.AsDuration())
	}
}

// events prints the Events section: the newest describeEvents of es,
// oldest first.
func (d *describer) events(es []*troupev1.Event) error {
	if len(es) == 0 {
		d.field(0, "Events", "<none>")
		return nil
	}
	d.section(0, "Events")
	es = sortedEvents(es)
	if n := len(es) - describeEvents; n > 0 {
		fmt.Fprintf(d.w, "  (%d older events not shown)\n", n)
		es = es[n:]
	}
	return table(d, eventColumns(d.now), es, len(es))
}

func describeJob(ctx context.Context, c *clientlib.Client, d *describer, ns, name string) error {
	job, err := clientlib.Get(ctx, c, clientlib.Jobs, clientlib.Jobs.Prefix+ns+"/"+name)
	if errors.Is(err, clientlib.ErrNotFound) {
		return errNotFound("job " + ns + "/" + name)
	}
	if err != nil {
		return err
	}
	tasks, err := list(ctx, c, clientlib.Tasks, ns+"/"+name+"/", d.errOut)
	if err != nil {
		return err
	}
	scheds, err := list(ctx, c, clientlib.Schedulers, "", d.errOut)
	if err != nil {
		return err
	}
	events, err := list(ctx, c, clientlib.Events, ns+"/"+name+"/", d.errOut)
	if err != nil {
		return err
	}
	says, err := clientlib.Get(ctx, c, clientlib.JobSchedulings, clientlib.JobSchedulings.Prefix+ns+"/"+name)
	var unreadable *clientlib.UnreadableError
	switch {
	case errors.As(err, &unreadable):
		warnUnreadable(d.errOut, clientlib.JobSchedulings.Name, unreadable)
		says = nil
	case err != nil && !errors.Is(err, clientlib.ErrNotFound):
		return err
	}
	d.meta(job.GetMetadata())
	spec, st := job.GetSpec(), job.GetStatus()
	d.field(0, "Type", strings.ToLower(phase(spec.GetType(), "JOB_TYPE_")))
	d.field(0, "Scheduler", spec.GetScheduler())
	d.field(0, "Priority", spec.GetPriority())
	d.field(0, "Count", spec.GetCount())
	if spec.GetGangMin() > 0 {
		d.field(0, "Gang min", spec.GetGangMin())
	}
	d.field(0, "Restart policy", fmt.Sprintf("%s, max retries %d, backoff %v", strings.ToLower(phase(spec.GetRestartPolicy(), "RESTART_POLICY_")),
		spec.GetMaxRetries(), spec.GetRetryBackoff().AsDuration()))
	d.field(0, "Stopped", spec.GetStopped())
	d.template(spec.GetTemplate())
	d.field(0, "Constraints", constraints(spec.GetConstraints(), spec.GetTolerations()))
	d.field(0, "Status", phase(st.GetPhase(), "JOB_PHASE_"))
	d.field(1, "Tasks", fmt.Sprintf("%d pending, %d running, %d succeeded, %d failed", st.GetPending(), st.GetRunning(), st.GetSucceeded(), st.GetFailed()))
	d.field(1, "Retries", st.GetRetries())
	d.field(1, "Finished", timestamp(d.now, st.GetFinished()))
	d.field(1, "Message", dash(st.GetMessage()))
	d.field(1, "Admission", dash(st.GetAdmission()))
	if err := d.scheduling(says.GetStatus()); err != nil {
		return err
	}

	slices.SortFunc(tasks, func(a, b *troupev1.Task) int { return int(a.GetSpec().GetIndex() - b.GetSpec().GetIndex()) })
	phases := map[troupev1.TaskPhase]int{}
	for _, t := range tasks {
		phases[t.GetStatus().GetPhase()]++
	}
	var counts []string
	for _, p := range slices.Sorted(maps.Keys(phases)) {
		counts = append(counts, fmt.Sprintf("%d %s", phases[p], phase(p, "TASK_PHASE_")))
	}
	if len(tasks) == 0 {
		d.field(0, "Tasks", "<none>")
	} else {
		d.field(0, "Tasks", strings.Join(counts, ", "))
		if err := table(d, taskColumns(d.now)[1:], tasks, describeTasks); err != nil { // without NAMESPACE
			return err
		}
	}
	mine := slices.DeleteFunc(scheds, func(s *troupev1.SchedulerInfo) bool { return s.GetKind() != spec.GetScheduler() })
	if len(mine) == 0 {
		d.field(0, "Schedulers", fmt.Sprintf("<none of kind %q>", spec.GetScheduler()))
	} else {
		d.field(0, "Schedulers", fmt.Sprintf("of kind %q, conflicts per placement over all their jobs", spec.GetScheduler()))
		if err := table(d, schedulerColumns(d.now), mine, len(mine)); err != nil {
			return err
		}
	}
	return d.events(events)
}

// refusal is one row of a job's Scheduling section: the machines a
// filter refused.
type refusal struct {
	filter   string
	machines int32
}

// scheduling prints a job's Scheduling section: its scheduler's last
// word on its pending tasks (its JobScheduling), with the machines each
// filter refused, most first.
func (d *describer) scheduling(sc *troupev1.SchedulingStatus) error {
	if sc == nil {
		d.field(0, "Scheduling", "<none>")
		return nil
	}
	d.section(0, "Scheduling")
	d.field(1, "Reason", sc.GetReason())
	d.field(1, "Scheduler", sc.GetScheduler())
	d.field(1, "Time", timestamp(d.now, sc.GetTime()))
	d.field(1, "Unplaced", fmt.Sprintf("%d task(s)", sc.GetUnplaced()))
	d.field(1, "Message", dash(sc.GetMessage()))
	if len(sc.GetRefused()) == 0 {
		return nil
	}
	d.field(1, "Refused", fmt.Sprintf("by filter, of %d machine(s)", sc.GetMachines()))
	var rows []refusal
	for f, n := range sc.GetRefused() {
		rows = append(rows, refusal{f, n})
	}
	slices.SortFunc(rows, func(a, b refusal) int {
		return cmp.Or(cmp.Compare(b.machines, a.machines), strings.Compare(a.filter, b.filter))
	})
	return table(d, []column[refusal]{
		{header: "FILTER", value: func(r refusal) string { return r.filter }},
		{header: "MACHINES", value: func(r refusal) string { return fmt.Sprint(r.machines) }},
	}, rows, len(rows))
}

func describeTask(ctx context.Context, c *clientlib.Client, d *describer, ns, name string) error {
	job, index, err := clientlib.ParseTaskName(name)
	if err != nil {
		return err
	}
	ref := clientlib.TaskRef(ns, job, index)
	task, err := clientlib.Get(ctx, c, clientlib.Tasks, clientlib.Tasks.Prefix+ref)
	if errors.Is(err, clientlib.ErrNotFound) {
		return errNotFound("task " + ns + "/" + name)
	}
	if err != nil {
		return err
	}
	runs, err := list(ctx, c, clientlib.Runs, "", d.errOut)
	if err != nil {
		return err
	}
	events, err := list(ctx, c, clientlib.Events, ns+"/"+job+"/", d.errOut)
	if err != nil {
		return err
	}
	runs = slices.DeleteFunc(runs, func(r *troupev1.Run) bool { return r.GetMetadata().GetName() != ref })
	slices.SortFunc(runs, func(a, b *troupev1.Run) int {
		if a.GetAttempt() != b.GetAttempt() {
			return int(a.GetAttempt() - b.GetAttempt())
		}
		return a.GetStarted().AsTime().Compare(b.GetStarted().AsTime())
	})
	events = slices.DeleteFunc(events, func(e *troupev1.Event) bool {
		return e.GetInvolvedKind() != clientlib.Tasks.Name || e.GetInvolvedName() != name
	})

	d.meta(task.GetMetadata())
	spec := task.GetSpec()
	d.field(0, "Job", spec.GetJob())
	d.field(0, "Index", spec.GetIndex())
	d.field(0, "Attempt", spec.GetAttempt())
	d.field(0, "Submitted", timestamp(d.now, spec.GetSubmitted()))
	d.field(0, "Type", strings.ToLower(phase(spec.GetType(), "JOB_TYPE_")))
	d.field(0, "Scheduler", spec.GetScheduler())
	d.field(0, "Priority", spec.GetPriority())
	d.template(spec.GetTemplate())
	d.field(0, "Constraints", constraints(spec.GetConstraints(), spec.GetTolerations()))
	if b := task.GetBinding(); b != nil {
		d.section(0, "Binding")
		d.field(1, "Machine", b.GetMachine())
		d.field(1, "Scheduler", b.GetScheduler())
		d.field(1, "Bound", timestamp(d.now, b.GetBoundAt()))
	} else {
		d.field(0, "Binding", "<none>")
	}
	st := task.GetStatus()
	d.field(0, "Status", phase(st.GetPhase(), "TASK_PHASE_"))
	d.field(1, "Reason", dash(st.GetReason()))
	d.field(1, "Exit code", dash(taskExit(task)))
	d.field(1, "Restarts", st.GetRestarts())
	d.field(1, "Finished", timestamp(d.now, st.GetFinished()))
	d.field(1, "Last machine", dash(st.GetMachine()))

	machine := taskMachine(task)
	i := slices.IndexFunc(runs, func(r *troupev1.Run) bool { return r.GetMachine() == machine && r.GetAttempt() == spec.GetAttempt() })
	if i < 0 {
		d.field(0, "Run", "<none>")
	} else {
		r := runs[i]
		d.field(0, "Run", clientlib.Runs.Prefix+machine+"/"+ref)
		d.field(1, "Phase", phase(r.GetPhase(), "RUN_PHASE_"))
		d.field(1, "Started", timestamp(d.now, r.GetStarted()))
		d.field(1, "Finished", timestamp(d.now, r.GetFinished()))
		d.field(1, "Exit code", dash(runExit(r)))
		d.field(1, "Reason", dash(r.GetReason()))
		d.field(1, "Restarts", r.GetRestarts())
	}
	if len(runs) == 0 {
		d.field(0, "Attempts", "<none>")
	} else {
		d.section(0, "Attempts")
		if err := table(d, runColumns(d.now), runs, len(runs)); err != nil {
			return err
		}
	}
	return d.events(events)
}

// runColumns are the columns of a task's attempt history.
func runColumns(now time.Time) []column[*troupev1.Run] {
	return []column[*troupev1.Run]{
		{header: "ATTEMPT", value: func(r *troupev1.Run) string { return fmt.Sprint(r.GetAttempt()) }},
		{header: "MACHINE", value: func(r *troupev1.Run) string { return r.GetMachine() }},
		{header: "PHASE", value: func(r *troupev1.Run) string { return phase(r.GetPhase(), "RUN_PHASE_") }},
		{header: "EXIT", value: runExit},
		{header: "STARTED", value: func(r *troupev1.Run) string { return age(now, r.GetStarted()) }},
		{header: "FINISHED", value: func(r *troupev1.Run) string { return age(now, r.GetFinished()) }},
		{header: "REASON", value: func(r *troupev1.Run) string { return r.GetReason() }},
	}
}

// runExit is a run's exit code once its process ended (succeeded, failed
// or killed), empty before.
func runExit(r *troupev1.Run) string {
	switch r.GetPhase() {
	case troupev1.RunPhase_RUN_PHASE_SUCCEEDED, troupev1.RunPhase_RUN_PHASE_FAILED, troupev1.RunPhase_RUN_PHASE_KILLED:
		return fmt.Sprint(r.GetExitCode())
	}
	return ""
}

// resourceUse is one row of a machine's resources.
type resourceUse struct {
	name                string
	capacity, allocated int64
}

func describeMachine(ctx context.Context, c *clientlib.Client, d *describer, name string) error {
	m, err := clientlib.Get(ctx, c, clientlib.Machines, clientlib.Machines.Prefix+name)
	if errors.Is(err, clientlib.ErrNotFound) {
		return errNotFound("machine " + name)
	}
	if err != nil {
		return err
	}
	lease, err := clientlib.Get(ctx, c, clientlib.Leases, clientlib.Leases.Prefix+name)
	var unreadable *clientlib.UnreadableError
	switch {
	case errors.As(err, &unreadable):
		warnUnreadable(d.errOut, clientlib.Leases.Name, unreadable)
	case err != nil && !errors.Is(err, clientlib.ErrNotFound):
		return err
	}
	alloc, err := allocations(ctx, c, name)
	if err != nil {
		return err
	}
	bindings, err := list(ctx, c, clientlib.Bindings, name+"/", d.errOut)
	if err != nil {
		return err
	}
	events, err := list(ctx, c, clientlib.MachineEvents, name+"/", d.errOut)
	if err != nil {
		return err
	}
	d.meta(m.GetMetadata())
	d.field(0, "Status", machineStatus(m))
	d.field(1, "Message", dash(m.GetStatus().GetMessage()))
	d.field(0, "Agent address", dash(m.GetSpec().GetAgentAddress()))
	d.field(0, "Taints", taints(m.GetSpec().GetTaints()))
	switch {
	case unreadable != nil:
		d.field(0, "Lease", "<unreadable>")
	case lease == nil:
		d.field(0, "Lease", "<none>")
	default:
		expires := lease.GetRenewed().AsTime().Add(lease.GetDuration().AsDuration())
		d.field(0, "Lease", fmt.Sprintf("held by %s, renewed %s ago for %v (expires in %v)", lease.GetHolder(), age(d.now, lease.GetRenewed()),
			lease.GetDuration().AsDuration(), expires.Sub(d.now).Round(time.Second)))
	}
	capacity := m.GetSpec().GetCapacity()
	var rows []resourceUse
	for _, r := range slices.Sorted(maps.Keys(capacity)) {
		rows = append(rows, resourceUse{r, capacity[r], alloc[name][r]})
	}
	d.section(0, "Resources")
	if err := table(d, []column[resourceUse]{
		{header: "RESOURCE", value: func(u resourceUse) string { return u.name }},
		{header: "CAPACITY", value: func(u resourceUse) string { return clientlib.FormatQuantity(u.name, u.capacity) }},
		{header: "ALLOCATED", value: func(u resourceUse) string { return share(u.name, u.allocated, u.capacity) }},
		{header: "FREE", value: func(u resourceUse) string { return clientlib.FormatQuantity(u.name, u.capacity-u.allocated) }},
	}, rows, len(rows)); err != nil {
		return err
	}
	if len(bindings) == 0 {
		d.field(0, "Bound tasks", "<none>")
	} else {
		d.section(0, "Bound tasks")
		if err := table(d, []column[*troupev1.Binding]{
			{header: "TASK", value: func(b *troupev1.Binding) string {
				ns, _, _ := strings.Cut(b.GetMetadata().GetName(), "/") // <namespace>/<job>/<index>
				return ns + "/" + clientlib.TaskName(b.GetTask().GetJob(), b.GetTask().GetIndex())
			}},
			{header: "ATTEMPT", value: func(b *troupev1.Binding) string { return fmt.Sprint(b.GetTask().GetAttempt()) }},
			{header: "SCHEDULER", value: func(b *troupev1.Binding) string { return b.GetScheduler() }},
			{header: "REQUESTS", value: func(b *troupev1.Binding) string { return resources(b.GetTask().GetTemplate().GetRequests()) }},
			{header: "BOUND", value: func(b *troupev1.Binding) string { return age(d.now, b.GetBoundAt()) }},
		}, bindings, describeTasks); err != nil {
			return err
		}
	}
	return d.events(events)
}
