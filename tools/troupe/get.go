package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

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

// runGet lists the objects of a kind: a table (more columns with -o
// wide), or manifests with -o yaml or json; -l selects by label.
func runGet(args []string) error { return get(args, os.Stdout, os.Stderr) }

func get(args []string, out, errOut io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("get: give machines, jobs, tasks or schedulers")
	}
	what := args[0]
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	output := fs.String("o", "", "output: wide, yaml or json")
	selector := fs.String("l", "", "label selector: a=b, a!=b, 'a in (x,y)', 'a notin (x)', a, !a; commas AND them")
	c, ctx, cancel, err := cliClient(fs, args[1:])
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	o := getOptions{output: *output, now: time.Now(), errOut: errOut}
	if o.selector, err = clientlib.ParseSelector(*selector); err != nil {
		return err
	}
	if !slices.Contains([]string{"", "wide", "yaml", "json"}, o.output) {
		return fmt.Errorf("get: unknown output %q (wide, yaml or json)", o.output)
	}
	wide := o.output == "wide"
	switch what {
	case "machines", "machine":
		return getObjects(ctx, c, out, o, clientlib.Machines, func() ([]column[*troupev1.Machine], error) {
			return machineColumns(ctx, c, o.now, wide)
		})
	case "jobs", "job":
		return getObjects(ctx, c, out, o, clientlib.Jobs, func() ([]column[*troupev1.Job], error) { return jobColumns(o.now), nil })
	case "tasks", "task":
		return getObjects(ctx, c, out, o, clientlib.Tasks, func() ([]column[*troupev1.Task], error) { return taskColumns(o.now), nil })
	case "schedulers", "scheduler":
		return getObjects(ctx, c, out, o, clientlib.Schedulers, func() ([]column[*troupev1.SchedulerInfo], error) {
			return schedulerColumns(o.now), nil
		})
	}
	return fmt.Errorf("get: unknown kind %q (machines, jobs, tasks, schedulers)", what)
}

// getObjects prints the objects of kind k that the selector matches.
// Tasks match with their own labels, which the job controller copies
// from their job when it creates them.
func getObjects[T clientlib.Object](ctx context.Context, c *clientlib.Client, out io.Writer, o getOptions, k clientlib.Kind[T],
	columns func() ([]column[T], error)) error {
	all, err := list(ctx, c, k, "", o.errOut)
	if err != nil {
		return err
	}
	objs := slices.DeleteFunc(all, func(obj T) bool { return !o.selector.Matches(obj.GetMetadata().GetLabels()) })
	switch o.output {
	case "json":
		return writeJSON(out, objs)
	case "yaml":
		return writeYAML(out, k.Name, objs)
	}
	if len(objs) == 0 {
		fmt.Fprintf(out, "No %s found.\n", strings.ToLower(k.Name)+"s")
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
		{header: "CPU", value: func(m *troupev1.Machine) string { return quantity("cpu", m.GetSpec().GetCapacity()["cpu"]) }},
		{header: "MEMORY", value: func(m *troupev1.Machine) string { return quantity("memory", m.GetSpec().GetCapacity()["memory"]) }},
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
		return quantity(resource, allocated)
	}
	return fmt.Sprintf("%s (%d%%)", quantity(resource, allocated), allocated*100/capacity)
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

func jobColumns(now time.Time) []column[*troupev1.Job] {
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
	}
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
		{header: "EXIT", value: func(t *troupev1.Task) string { return fmt.Sprint(t.GetStatus().GetExitCode()) }},
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
