package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// getOptions are what get prints and how.
type getOptions struct {
	selector clientlib.Selector
	output   string // "" (a table), "wide", "yaml" or "json"
	now      time.Time
	errOut   io.Writer // where warnings go
}

// getKinds are the kinds get and describe complete.
var getKinds = []string{"machines", "jobs", "tasks", "schedulers", "quota"}

// getCommand is `troupe get KIND [NAME...]`: the objects of a kind (of
// one namespace with -n), or those named, as a table (more columns with
// -o wide), or manifests with -o yaml or json; -l selects by label.
func (a *app) getCommand() *cobra.Command {
	var (
		output, selector, ns string
		cf                   *connFlags
	)
	cmd := &cobra.Command{
		Use:   "get machines|jobs|tasks|schedulers [NAME...]",
		Short: "List machines, jobs, tasks or schedulers, or get some by name",
		Long: `List the machines, jobs, tasks or schedulers of the cell, or those named:
a table (more columns with -o wide), or manifests with -o yaml or -o json.
Jobs and tasks are listed in every namespace unless -n names one; a named
job or task is in -n's namespace (default "default"), or written
NAMESPACE/NAME. A task is named <job>-<index>. A name that does not exist
is an error (exit status 1), after the objects that do are printed.`,
		Example: `  troupe get jobs
  troupe get jobs web -o yaml
  troupe get tasks -l app=web -o wide
  troupe get tasks web-0 team-a/api-3`,
		Args:              minArgs(1, "machines, jobs, tasks or schedulers"),
		ValidArgsFunction: completeKinds(getKinds),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := getOptions{output: output, now: time.Now(), errOut: a.errOut}
			var err error
			if o.selector, err = clientlib.ParseSelector(selector); err != nil {
				return err
			}
			if !slices.Contains([]string{"", "wide", "yaml", "json"}, o.output) {
				return usagef("unknown output %q (wide, yaml or json)", o.output)
			}
			what, names := args[0], args[1:]
			if len(names) > 0 && selector != "" {
				return usagef("give names or -l, not both")
			}
			if what == "quota" || what == "quotas" {
				return a.getQuotas(cmd, cf, o, ns, names) // quota.go
			}
			var within string // listed namespace
			if cmd.Flags().Changed("namespace") {
				within = ns + "/"
			}
			if !slices.Contains([]string{"machines", "machine", "jobs", "job", "tasks", "task", "schedulers", "scheduler"}, what) {
				return usagef("unknown kind %q (machines, jobs, tasks, schedulers)", what)
			}
			c, _, ctx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			wide := o.output == "wide"
			switch what {
			case "machines", "machine":
				return getObjects(ctx, c, a.out, o, clientlib.Machines, "", namedKeys(clientlib.Machines, "machine", names, plainKey),
					func() ([]column[*troupev1.Machine], error) { return machineColumns(ctx, c, o.now, wide) })
			case "jobs", "job":
				return getObjects(ctx, c, a.out, o, clientlib.Jobs, within, namedKeys(clientlib.Jobs, "job", names, namespacedKey(ns)),
					func() ([]column[*troupev1.Job], error) {
						says, err := jobSchedulings(ctx, c, within, o.errOut)
						return jobColumns(o.now, says), err
					})
			case "tasks", "task":
				return getObjects(ctx, c, a.out, o, clientlib.Tasks, within, namedKeys(clientlib.Tasks, "task", names, taskKey(ns)),
					func() ([]column[*troupev1.Task], error) { return taskColumns(o.now), nil })
			default:
				return getObjects(ctx, c, a.out, o, clientlib.Schedulers, "", namedKeys(clientlib.Schedulers, "scheduler", names, plainKey),
					func() ([]column[*troupev1.SchedulerInfo], error) { return schedulerColumns(o.now), nil })
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&output, "output", "o", "", "output: wide, yaml or json (default: a table)")
	fs.StringVarP(&selector, "selector", "l", "", "label selector: a=b, a!=b, 'a in (x,y)', 'a notin (x)', a, !a; commas AND them")
	fs.StringVarP(&ns, "namespace", "n", defaultNamespace, "namespace of named jobs and tasks; given, the only namespace listed")
	cf = a.addConnFlags(cmd, 10*time.Second, "request timeout")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "yaml", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// completeKinds completes a command's first argument from kinds.
func completeKinds(kinds []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return kinds, cobra.ShellCompDirectiveNoFileComp
	}
}

// objectKey is a named object's key, and how messages name it ("job
// default/web"); err says why the name is not one of the kind.
type objectKey struct {
	key, display string
	err          error
}

// namedKeys are the keys of kind k's objects names, which key turns into
// their keys below k.Prefix and their displayed names.
func namedKeys[T clientlib.Object](k clientlib.Kind[T], noun string, names []string, key func(string) (string, string, error)) []objectKey {
	var out []objectKey
	for _, n := range names {
		rel, display, err := key(n)
		out = append(out, objectKey{key: k.Prefix + rel, display: noun + " " + display, err: err})
	}
	return out
}

// plainKey is the key of an object keyed by its name alone.
func plainKey(name string) (string, string, error) { return name, name, nil }

// namespacedKey keys a job, "NAME" (in ns) or "NAMESPACE/NAME".
func namespacedKey(ns string) func(string) (string, string, error) {
	return func(name string) (string, string, error) {
		if n, rest, ok := strings.Cut(name, "/"); ok {
			ns, name = n, rest
		}
		return ns + "/" + name, ns + "/" + name, nil
	}
}

// taskKey keys a task: "<job>-<index>" (in ns), "NAMESPACE/<job>-<index>"
// or "<namespace>/<job>/<index>".
func taskKey(ns string) func(string) (string, string, error) {
	return func(name string) (string, string, error) {
		if strings.Count(name, "/") == 2 {
			return name, name, nil
		}
		if n, rest, ok := strings.Cut(name, "/"); ok {
			ns, name = n, rest
		}
		job, index, err := clientlib.ParseTaskName(name)
		if err != nil {
			return "", ns + "/" + name, err
		}
		return clientlib.TaskRef(ns, job, index), ns + "/" + name, nil
	}
}

// getObjects prints the objects of kind k: those of keys, or, with none,
// those within (see clientlib.List) that the selector matches. Tasks
// match with their own labels, which the job controller copies from their
// job when it creates them. Keys of no object are an error, returned
// after the others are printed.
func getObjects[T clientlib.Object](ctx context.Context, c *clientlib.Client, out io.Writer, o getOptions, k clientlib.Kind[T],
	within string, keys []objectKey, columns func() ([]column[T], error)) error {
	var (
		objs    []T
		missing []error
	)
	if len(keys) == 0 {
		all, err := list(ctx, c, k, within, o.errOut)
		if err != nil {
			return err
		}
		objs = slices.DeleteFunc(all, func(obj T) bool { return !o.selector.Matches(obj.GetMetadata().GetLabels()) })
	}
	for _, key := range keys {
		if key.err != nil {
			missing = append(missing, key.err)
			continue
		}
		obj, err := clientlib.Get(ctx, c, k, key.key)
		switch {
		case errors.Is(err, clientlib.ErrNotFound):
			missing = append(missing, errNotFound(key.display))
		case err != nil:
			return err
		default:
			objs = append(objs, obj)
		}
	}
	if err := printObjects(out, o, k, objs, len(keys) > 0, columns); err != nil {
		return err
	}
	return errors.Join(missing...)
}

// printObjects prints objs as o says; named says whether they were asked
// for by name (then none found prints nothing: the error says why).
func printObjects[T clientlib.Object](out io.Writer, o getOptions, k clientlib.Kind[T], objs []T, named bool, columns func() ([]column[T], error)) error {
	switch o.output {
	case "json":
		return writeJSON(out, objs)
	case "yaml":
		return writeYAML(out, k.Name, objs)
	}
	if len(objs) == 0 {
		if !named {
			fmt.Fprintf(out, "No %s found.\n", strings.ToLower(k.Name)+"s")
		}
		return nil
	}
	cols, err := columns()
	if err != nil {
		return err
	}
	return writeTable(out, "", cols, objs, o.output == "wide")
}

// list lists the objects of kind k within (see clientlib.List), and
// warns on errOut about the values it left out because they could not be
// read.
func list[T clientlib.Object](ctx context.Context, c *clientlib.Client, k clientlib.Kind[T], within string, errOut io.Writer) ([]T, error) {
	objs, _, err := clientlib.List(ctx, c, k, within)
	var skipped clientlib.Unreadables
	if errors.As(err, &skipped) {
		warnUnreadable(errOut, k.Name, skipped...)
		return objs, nil
	}
	return objs, err
}

// warnUnreadable says on errOut which values of kind could not be read.
func warnUnreadable(errOut io.Writer, kind string, errs ...*clientlib.UnreadableError) {
	noun := strings.ToLower(kind)
	if len(errs) != 1 {
		noun += "s"
	}
	fmt.Fprintf(errOut, "Warning: %d %s could not be read; left out:\n", len(errs), noun)
	for _, e := range errs {
		fmt.Fprintf(errOut, "  %v\n", e)
	}
}

func machineColumns(ctx context.Context, c *clientlib.Client, now time.Time, wide bool) ([]column[*troupev1.Machine], error) {
	var alloc map[string]map[string]int64
	if wide {
		var err error
		if alloc, err = allocations(ctx, c, ""); err != nil {
			return nil, err
		}
	}
	allocated := func(resource string) func(m *troupev1.Machine) string {
		return func(m *troupev1.Machine) string {
			name := m.GetMetadata().GetName()
			return share(resource, alloc[name][resource], m.GetSpec().GetCapacity()[resource])
		}
	}
	return []column[*troupev1.Machine]{
		{header: "NAME", value: func(m *troupev1.Machine) string { return m.GetMetadata().GetName() }},
		{header: "STATUS", value: machineStatus},
		{header: "CPU", value: func(m *troupev1.Machine) string {
			return clientlib.FormatQuantity("cpu", m.GetSpec().GetCapacity()["cpu"])
		}},
		{header: "MEMORY", value: func(m *troupev1.Machine) string {
			return clientlib.FormatQuantity("memory", m.GetSpec().GetCapacity()["memory"])
		}},
		{header: "CPU-ALLOCATED", wide: true, value: allocated("cpu")},
		{header: "MEMORY-ALLOCATED", wide: true, value: allocated("memory")},
		{header: "TAINTS", wide: true, value: func(m *troupev1.Machine) string { return taints(m.GetSpec().GetTaints()) }},
		{header: "AGE", value: func(m *troupev1.Machine) string { return age(now, m.GetMetadata().GetCreated()) }},
		{header: "LABELS", value: func(m *troupev1.Machine) string { return labels(m.GetMetadata().GetLabels()) }},
	}, nil
}

func machineStatus(m *troupev1.Machine) string {
	st := phase(m.GetStatus().GetPhase(), "MACHINE_PHASE_")
	if m.GetSpec().GetUnschedulable() {
		st += ",CORDONED"
	}
	return st
}

func taints(ts []*troupev1.Taint) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, taint(t.GetKey(), t.GetValue(), t.GetEffect()))
	}
	return dash(strings.Join(parts, ","))
}

// share prints an amount allocated of a capacity: "1200m (7%)".
func share(resource string, allocated, capacity int64) string {
	if capacity <= 0 {
		return clientlib.FormatQuantity(resource, allocated)
	}
	return fmt.Sprintf("%s (%d%%)", clientlib.FormatQuantity(resource, allocated), allocated*100/capacity)
}

// allocations reads the counters of machine ("": of every machine): the
// requests of the tasks bound there, by machine and resource.
func allocations(ctx context.Context, c *clientlib.Client, machine string) (map[string]map[string]int64, error) {
	prefix := clientlib.AllocPrefix
	if machine != "" {
		prefix += machine + "/"
	}
	kvs, _, err := c.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int64{}
	for _, kv := range kvs {
		m, resource, _ := strings.Cut(strings.TrimPrefix(kv.GetKey(), clientlib.AllocPrefix), "/")
		ctr, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if err != nil {
			return nil, err
		}
		if out[m] == nil {
			out[m] = map[string]int64{}
		}
		out[m][resource] = ctr.GetValue()
	}
	return out, nil
}

// jobSchedulings lists the JobSchedulings within (see clientlib.List),
// by job ("<namespace>/<name>"): one request, however many jobs.
func jobSchedulings(ctx context.Context, c *clientlib.Client, within string, errOut io.Writer) (map[string]*troupev1.SchedulingStatus, error) {
	all, err := list(ctx, c, clientlib.JobSchedulings, within, errOut)
	if err != nil {
		return nil, err
	}
	says := make(map[string]*troupev1.SchedulingStatus, len(all))
	for _, js := range all {
		says[js.GetMetadata().GetNamespace()+"/"+js.GetMetadata().GetName()] = js.GetStatus()
	}
	return says, nil
}

// jobColumns are the columns of jobs; says holds their JobSchedulings,
// by job.
func jobColumns(now time.Time, says map[string]*troupev1.SchedulingStatus) []column[*troupev1.Job] {
	count := func(f func(*troupev1.JobStatus) int32) func(*troupev1.Job) string {
		return func(j *troupev1.Job) string { return fmt.Sprint(f(j.GetStatus())) }
	}
	return []column[*troupev1.Job]{
		{header: "NAMESPACE", value: func(j *troupev1.Job) string { return j.GetMetadata().GetNamespace() }},
		{header: "NAME", value: func(j *troupev1.Job) string { return j.GetMetadata().GetName() }},
		{header: "TYPE", value: func(j *troupev1.Job) string { return strings.ToLower(phase(j.GetSpec().GetType(), "JOB_TYPE_")) }},
		{header: "SCHEDULER", value: func(j *troupev1.Job) string { return j.GetSpec().GetScheduler() }},
		{header: "STATUS", value: func(j *troupev1.Job) string { return phase(j.GetStatus().GetPhase(), "JOB_PHASE_") }},
		{header: "TASKS", value: func(j *troupev1.Job) string { return fmt.Sprint(j.GetSpec().GetCount()) }},
		{header: "PENDING", value: count((*troupev1.JobStatus).GetPending)},
		{header: "RUNNING", value: count((*troupev1.JobStatus).GetRunning)},
		{header: "SUCCEEDED", value: count((*troupev1.JobStatus).GetSucceeded)},
		{header: "FAILED", value: count((*troupev1.JobStatus).GetFailed)},
		{header: "RETRIES", wide: true, value: count((*troupev1.JobStatus).GetRetries)},
		{header: "PRIORITY", wide: true, value: func(j *troupev1.Job) string { return fmt.Sprint(j.GetSpec().GetPriority()) }},
		{header: "REQUESTS", wide: true, value: func(j *troupev1.Job) string { return resources(j.GetSpec().GetTemplate().GetRequests()) }},
		{header: "CONSTRAINTS", wide: true, value: func(j *troupev1.Job) string {
			return constraints(j.GetSpec().GetConstraints(), j.GetSpec().GetTolerations())
		}},
		{header: "AGE", value: func(j *troupev1.Job) string { return age(now, j.GetMetadata().GetCreated()) }},
		{header: "REASON", value: func(j *troupev1.Job) string {
			return jobReason(j, says[j.GetMetadata().GetNamespace()+"/"+j.GetMetadata().GetName()])
		}},
	}
}

// jobReason is why a job's tasks wait, as a word: Refused while the
// cell's policies refuse it (no task is created), OverQuota while its
// quota holds their creation back, else its scheduler's last reason
// (its JobScheduling, sc: "Unschedulable") while some are pending.
func jobReason(j *troupev1.Job, sc *troupev1.SchedulingStatus) string {
	st := j.GetStatus()
	switch {
	case clientlib.JobRefused(j):
		return "Refused"
	case st.GetAdmission() != "":
		return "OverQuota"
	case st.GetPending() > 0:
		return dash(sc.GetReason())
	}
	return "-"
}

// taskExit is a task's exit code once its process exited (SUCCEEDED or
// FAILED), empty before and for tasks that ended otherwise (stopped,
// preempted, lost).
func taskExit(t *troupev1.Task) string {
	switch t.GetStatus().GetPhase() {
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED:
		return fmt.Sprint(t.GetStatus().GetExitCode())
	}
	return ""
}

// taskMachine is the machine a task runs on, or last ran on.
func taskMachine(t *troupev1.Task) string {
	if m := t.GetBinding().GetMachine(); m != "" {
		return m
	}
	return t.GetStatus().GetMachine()
}

func taskColumns(now time.Time) []column[*troupev1.Task] {
	return []column[*troupev1.Task]{
		{header: "NAMESPACE", value: func(t *troupev1.Task) string { return t.GetMetadata().GetNamespace() }},
		{header: "NAME", value: func(t *troupev1.Task) string { return t.GetMetadata().GetName() }},
		{header: "STATUS", value: func(t *troupev1.Task) string { return phase(t.GetStatus().GetPhase(), "TASK_PHASE_") }},
		{header: "MACHINE", value: func(t *troupev1.Task) string { return dash(taskMachine(t)) }},
		{header: "ATTEMPT", value: func(t *troupev1.Task) string { return fmt.Sprint(t.GetSpec().GetAttempt()) }},
		{header: "RESTARTS", value: func(t *troupev1.Task) string { return fmt.Sprint(t.GetStatus().GetRestarts()) }},
		{header: "EXIT", value: taskExit},
		{header: "SCHEDULER", wide: true, value: func(t *troupev1.Task) string { return dash(t.GetBinding().GetScheduler()) }},
		{header: "BOUND", wide: true, value: func(t *troupev1.Task) string { return age(now, t.GetBinding().GetBoundAt()) }},
		{header: "REQUESTS", wide: true, value: func(t *troupev1.Task) string { return resources(t.GetSpec().GetTemplate().GetRequests()) }},
		{header: "AGE", value: func(t *troupev1.Task) string { return age(now, t.GetSpec().GetSubmitted()) }}, // of the attempt
		{header: "REASON", value: func(t *troupev1.Task) string { return t.GetStatus().GetReason() }},
	}
}

// conflictFraction is conflicts per placement, as schedulers count it
// (Omega's measure of interference).
func conflictFraction(k *troupev1.SchedulerCounters) string {
	if k.GetPlacements() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(k.GetConflicts())/float64(k.GetPlacements()))
}

func schedulerColumns(now time.Time) []column[*troupev1.SchedulerInfo] {
	counter := func(f func(*troupev1.SchedulerCounters) uint64) func(*troupev1.SchedulerInfo) string {
		return func(s *troupev1.SchedulerInfo) string { return fmt.Sprint(f(s.GetCounters())) }
	}
	return []column[*troupev1.SchedulerInfo]{
		{header: "NAME", value: func(s *troupev1.SchedulerInfo) string { return s.GetMetadata().GetName() }},
		{header: "KIND", value: func(s *troupev1.SchedulerInfo) string { return s.GetKind() }},
		{header: "ATTEMPTS", wide: true, value: counter((*troupev1.SchedulerCounters).GetAttempts)},
		{header: "PLACEMENTS", value: counter((*troupev1.SchedulerCounters).GetPlacements)},
		{header: "CONFLICTS", value: counter((*troupev1.SchedulerCounters).GetConflicts)},
		{header: "CONFLICT-FRACTION", value: func(s *troupev1.SchedulerInfo) string { return conflictFraction(s.GetCounters()) }},
		{header: "UNSCHEDULABLE", value: counter((*troupev1.SchedulerCounters).GetUnschedulable)},
		{header: "BUSYNESS", value: func(s *troupev1.SchedulerInfo) string { return fmt.Sprintf("%.2f", s.GetCounters().GetBusyness()) }},
		{header: "HEARTBEAT", value: func(s *troupev1.SchedulerInfo) string { return age(now, s.GetHeartbeat()) + " ago" }},
		{header: "AGE", wide: true, value: func(s *troupev1.SchedulerInfo) string { return age(now, s.GetMetadata().GetCreated()) }},
	}
}
