package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	jobcontroller "github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// cellRoom is the cell's machines as a scheduler's decision sees them,
// read once per command, to warn at apply time of a job whose tasks no
// machine takes now. The machines are built by the scheduler's own
// MachineView from the machine objects and their /alloc counters, and a
// job is checked by a decision of its scheduler's profile
// (framework.Schedule), so the check runs the production filters:
// cordons, label selectors, taints and tolerations, CEL constraints,
// resources, distinct machines.
type cellRoom struct {
	snap *framework.Snapshot
	// profiles are the decision profiles, by scheduler kind.
	profiles map[string]framework.Profile
}

// readRoom reads the machines and their allocation counters.
func readRoom(ctx context.Context, c *clientlib.Client) (*cellRoom, error) {
	machines, _, err := clientlib.List(ctx, c, clientlib.Machines, "")
	if err != nil {
		return nil, err
	}
	counters, _, err := c.List(ctx, clientlib.AllocPrefix)
	if err != nil {
		return nil, err
	}
	view := scheduler.NewMachineView()
	for _, m := range machines {
		view.SetMachine(m)
	}
	for _, kv := range counters {
		if n, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion()); err == nil {
			view.SetCounter(kv.GetKey(), n.GetValue(), kv.GetVersion())
		}
	}
	snap := view.Snapshot(nil, "")
	// Without the bound on free room, a task larger than any machine's
	// free room is filtered like any other, so the refusals say which
	// filters refused the machines rather than counting every machine as
	// too small.
	snap.MaxFree = nil
	return &cellRoom{snap: snap, profiles: map[string]framework.Profile{}}, nil
}

// profile returns the decision profile of scheduler kind, without
// preemption: the check asks where a task goes now, in free room. A kind
// this binary does not build (registered in another scheduler's binary)
// gets the filters every profile starts from (profiles.Filters).
func (r *cellRoom) profile(kind string) (framework.Profile, error) {
	if p, ok := r.profiles[kind]; ok {
		return p, nil
	}
	p, _, err := profiles.New(kind, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		fs, ferr := profiles.Filters()
		if ferr != nil {
			return framework.Profile{}, ferr
		}
		p = framework.Profile{Filters: fs}
	}
	p.Preempt = false
	r.profiles[kind] = p
	return p, nil
}

// unfit returns a warning ("" for none) when job's tasks cannot be placed
// now: when no machine takes one of them, or, for a gang job, when its
// gang_min tasks do not fit at once. The job is accepted all the same
// (machines may join or free up) and its tasks wait. The warning says
// how many machines pass the job's static filters (those whose verdict
// depends only on the job and the machine: framework.Static) and the
// one of them with the most free room, or, when none does, which filter
// refused how many machines, as the scheduler would say it.
func (r *cellRoom) unfit(job *troupev1.Job) (string, error) {
	job = proto.CloneOf(job)
	clientlib.Default(job)
	spec := job.GetSpec()
	p, err := r.profile(spec.GetScheduler())
	if err != nil {
		return "", err
	}
	p.Rand = rand.New(rand.NewPCG(1, 2)) // the same machine order, and words, on every run
	gang := max(min(spec.GetGangMin(), spec.GetCount()), 1)
	tasks := make([]*framework.Task, gang)
	for i := range tasks {
		t := jobcontroller.NewTask(job, int32(i), time.Now())
		key, err := clientlib.Tasks.Key(t)
		if err != nil {
			return "", err
		}
		tasks[i] = framework.NewTask(key, t)
	}
	plan := framework.Schedule(p, r.snap, tasks)
	if len(plan.Failures) == 0 {
		return "", nil
	}
	st := plan.Failures[0].Status
	req := spec.GetTemplate().GetRequests()
	name := displayName(job)
	machines := r.snap.Machines
	if len(machines) == 0 {
		return fmt.Sprintf("warning: job %s: the cell has no machines (its tasks ask for %s): they wait until one joins", name, asks(req)), nil
	}
	if st.Code == framework.Error {
		return fmt.Sprintf("warning: job %s: its scheduler cannot decide where its tasks go: %s: %s", name, st.Plugin, explanation(st)), nil
	}

	// The machines the job's static filters admit, decided as the
	// framework decides them: the profile's Static filters in order,
	// the first refusal counting.
	var static []framework.FilterPlugin
	for _, f := range p.Filters {
		if _, ok := f.(framework.Static); ok {
			static = append(static, f)
		}
	}
	var admitted []*framework.Machine
	for _, m := range machines {
		if passes(static, tasks[0], m) {
			admitted = append(admitted, m)
		}
	}
	if len(admitted) == 0 {
		// The decision's refusals are the static filters' alone.
		return fmt.Sprintf("warning: job %s: no machine may run its tasks: %s; they wait until a machine they may use joins",
			name, explanation(st)), nil
	}

	most := slices.MaxFunc(admitted, func(a, b *framework.Machine) int {
		return cmp.Or(cmp.Compare(a.Free(framework.CPU), b.Free(framework.CPU)),
			cmp.Compare(a.Free(framework.Memory), b.Free(framework.Memory)), strings.Compare(b.Name, a.Name))
	})
	free := map[string]int64{framework.CPU: most.Free(framework.CPU), framework.Memory: most.Free(framework.Memory)}
	for r := range req {
		free[r] = most.Free(r)
	}
	var what, wait string
	if fit := len(plan.Placements); gang > 1 && fit > 0 {
		what = fmt.Sprintf("its gang of %d tasks does not fit at once (each asks for %s; there is room for %d now)", gang, asks(req), fit)
		wait = "its tasks wait until machines can hold the gang"
	} else {
		what = fmt.Sprintf("no machine has room for one of its tasks (it asks for %s)", asks(req))
		wait = "its tasks wait until a machine can hold them"
	}
	return fmt.Sprintf("warning: job %s: %s; %s, and the most any of them has free is %s (%s): %s",
		name, what, admits(len(admitted), len(machines), staticRefusals(st, static)), quantities(free), most.Name, wait), nil
}

// passes reports whether m passes every one of the static filters for t.
func passes(static []framework.FilterPlugin, t *framework.Task, m *framework.Machine) bool {
	for _, f := range static {
		if !f.Filter(t, m).IsSuccess() {
			return false
		}
	}
	return true
}

// staticRefusals returns, from a decision's status st, how many machines
// each of the static filters refused, most first ("19× TaintToleration,
// 1× Schedulable").
func staticRefusals(st *framework.Status, static []framework.FilterPlugin) string {
	counts := map[string]int{}
	for _, f := range static {
		if n := st.Refused[f.Name()]; n > 0 {
			counts[f.Name()] = n
		}
	}
	names := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d× %s", counts[n], n)
	}
	return strings.Join(parts, ", ")
}

// admits says how many of the cell's machines pass a job's static
// filters, and which filters refused the others.
func admits(n, of int, refused string) string {
	noun, verb := "machines", "pass"
	if of == 1 {
		noun = "machine"
	}
	if n == 1 {
		verb = "passes"
	}
	s := fmt.Sprintf("%d of %d %s %s its filters", n, of, noun, verb)
	if refused != "" {
		s += " (refused: " + refused + ")"
	}
	return s
}

// explanation is st's reasons in words.
func explanation(st *framework.Status) string { return strings.Join(st.Explain(), "; ") }

// asks writes a task's requests ("500m cpu, 1Gi memory"; "nothing").
func asks(req map[string]int64) string {
	if len(req) == 0 {
		return "nothing"
	}
	return quantities(req)
}

// quantities writes amounts of resources in name order ("500m cpu, 1Gi
// memory").
func quantities(q map[string]int64) string {
	names := make([]string, 0, len(q))
	for r := range q {
		names = append(names, r)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, r := range names {
		parts[i] = clientlib.FormatQuantity(r, q[r]) + " " + r
	}
	return strings.Join(parts, ", ")
}
