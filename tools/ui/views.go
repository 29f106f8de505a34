package ui

import (
	"cmp"
	"fmt"
	"html/template"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// A view is what one page shows, built from the aggregator at a moment
// and rendered by the page's templates. Builders hold the aggregator's
// lock only to copy aggregates out; lists come from the informers'
// caches a page (or a bounded number of objects) at a time.

// eventLimit is how many events a page lists, the latest first.
const eventLimit = 50

// staleAfter is how old a scheduler's heartbeat may be before the pages
// mark it stale.
const staleAfter = time.Minute

// recentSpan is the span of the schedulers' "recent" figures.
const recentSpan = time.Minute

// machineTotals count the machines and what they hold.
type machineTotals struct {
	Total, Ready, Lost, Cordoned, NotReady, Expired int
	CPUCap, CPUAlloc, MemCap, MemAlloc              int64
}

// pager is where a list is and the links to the pages beside it.
type pager struct {
	Page, Pages, Total, From, To int
	Prev, Next                   string
}

// paginate cuts n items into pages of size and returns the bounds of
// page (from 1; out of range: the nearest), with links that set param
// in q.
func paginate(n, size, page int, q url.Values, param string) pager {
	pages := max((n+size-1)/size, 1)
	page = min(max(page, 1), pages)
	p := pager{Page: page, Pages: pages, Total: n, From: (page - 1) * size, To: min(page*size, n)}
	link := func(to int) string {
		v := url.Values{}
		maps.Copy(v, q)
		v.Set(param, strconv.Itoa(to))
		return "?" + v.Encode()
	}
	if page > 1 {
		p.Prev = link(page - 1)
	}
	if page < pages {
		p.Next = link(page + 1)
	}
	return p
}

// pageParam is the page a query asks for (1 if none).
func pageParam(q url.Values, name string) int {
	n, err := strconv.Atoi(q.Get(name))
	if err != nil {
		return 1
	}
	return n
}

// cellView is the cell page.
type cellView struct {
	Synced              bool
	Machines            machineTotals
	JobParts, TaskParts []part
	JobsBar, TasksBar   template.HTML
	Tasks               int
	// Status filters the jobs by phase ("" for all); Find keeps those
	// whose namespace/name contains it, and Sort orders them (jobSorts).
	Status, Find, Sort string
	// AllHref and StatusHrefs (by JobParts' labels) are the status chips'
	// links, which keep Find and Sort.
	AllHref     string
	StatusHrefs map[string]string
	Jobs        []jobRow
	JobsPager   pager
	Schedulers  []schedulerRow
	Window      string
}

// jobRow is a job in a list.
type jobRow struct {
	Namespace, Name, ID, URL, Type, Scheduler, Phase string
	Count, Pending, Running, Succeeded, Failed       int32
	Reason, Age                                      string
}

// schedulerRow is a scheduler's figures and charts.
type schedulerRow struct {
	Name, Kind, URL, Heartbeat string
	Stale                      bool
	// Totals since the instance started, from its record.
	Attempts, Conflicts, Placements, Unschedulable uint64
	Busyness, Fraction                             string
	// Recent figures: over the last minute of records.
	RecentRate, RecentFraction string
	Recent                     bool
	RateChart, FractionChart   template.HTML
	BusyChart                  template.HTML
	WaitMedian, WaitP90        string
	Waits                      int
}

// jobPhases in the order the pages list them, with their classes.
var jobPhases = []troupev1.JobPhase{troupev1.JobPhase_JOB_PHASE_PENDING, troupev1.JobPhase_JOB_PHASE_RUNNING,
	troupev1.JobPhase_JOB_PHASE_SUCCEEDED, troupev1.JobPhase_JOB_PHASE_FAILED, troupev1.JobPhase_JOB_PHASE_STOPPED}

var taskPhases = []troupev1.TaskPhase{troupev1.TaskPhase_TASK_PHASE_PENDING, troupev1.TaskPhase_TASK_PHASE_BOUND,
	troupev1.TaskPhase_TASK_PHASE_RUNNING, troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED,
	troupev1.TaskPhase_TASK_PHASE_LOST, troupev1.TaskPhase_TASK_PHASE_PREEMPTED, troupev1.TaskPhase_TASK_PHASE_STOPPED}

func jobWord(p troupev1.JobPhase) string   { return word(p.String(), "JOB_PHASE_") }
func taskWord(p troupev1.TaskPhase) string { return word(p.String(), "TASK_PHASE_") }

// phaseParts counts phases in order, classed by their words.
func phaseParts[P comparable](order []P, counts map[P]int, words func(P) string) ([]part, int) {
	var out []part
	total := 0
	for _, p := range order {
		w := words(p)
		out = append(out, part{Label: w, Class: "ph-" + strings.ToLower(w), Count: counts[p]})
		total += counts[p]
	}
	return out, total
}

// cellView builds the cell page, its jobs filtered by q's status and
// paged by its jobs parameter.
func (a *Aggregator) cellView(q url.Values) cellView {
	now := a.cfg.Now()
	v := cellView{Window: short(a.cfg.Window)}
	a.mu.Lock()
	v.Synced = a.synced
	slots, _ := a.sortedSlots()
	for _, s := range slots {
		v.Machines.Total++
		switch {
		case s.phase == troupev1.MachinePhase_MACHINE_PHASE_LOST:
			v.Machines.Lost++
		case s.phase == troupev1.MachinePhase_MACHINE_PHASE_READY:
			v.Machines.Ready++
		default:
			v.Machines.NotReady++
		}
		if s.cordoned {
			v.Machines.Cordoned++
		}
		if !s.leaseEnd.IsZero() && now.After(s.leaseEnd) && s.phase != troupev1.MachinePhase_MACHINE_PHASE_LOST {
			v.Machines.Expired++
		}
		v.Machines.CPUCap += s.cpuCap
		v.Machines.MemCap += s.memCap
		v.Machines.CPUAlloc += s.cpuAlloc
		v.Machines.MemAlloc += s.memAlloc
	}
	v.JobParts, _ = phaseParts(jobPhases, a.jobPhases, jobWord)
	v.TaskParts, v.Tasks = phaseParts(taskPhases, a.taskPhases, taskWord)
	v.Schedulers = a.schedulerRows(now, 140, 28)
	a.mu.Unlock()
	v.JobsBar, v.TasksBar = stackedBar(v.JobParts, 320, 12), stackedBar(v.TaskParts, 320, 12)

	var keys []string
	if st := strings.ToUpper(q.Get("status")); st != "" {
		if p, ok := troupev1.JobPhase_value["JOB_PHASE_"+st]; ok {
			v.Status = st
			keys = a.jobs.Indexer().IndexKeys(indexPhase, troupev1.JobPhase(p).String())
		}
	}
	if v.Status == "" {
		keys = a.jobs.Indexer().Keys()
	}
	v.Find = strings.TrimSpace(q.Get("find"))
	keys = jobsFound(keys, v.Find)
	if order := jobSortBy(q.Get("sort")); order != nil {
		v.Sort = q.Get("sort")
		type fact struct {
			key string
			jobFacts
		}
		facts := make([]fact, len(keys))
		a.mu.Lock()
		for i, k := range keys {
			facts[i] = fact{k, a.jobFacts[k]}
		}
		a.mu.Unlock()
		slices.SortStableFunc(facts, func(x, y fact) int { return order(x.jobFacts, y.jobFacts) })
		for i, f := range facts {
			keys[i] = f.key
		}
	}
	keep := url.Values{}
	if v.Find != "" {
		keep.Set("find", v.Find)
	}
	if v.Sort != "" {
		keep.Set("sort", v.Sort)
	}
	v.AllHref = "?" + keep.Encode()
	v.StatusHrefs = map[string]string{}
	for _, p := range v.JobParts {
		keep.Set("status", p.Label)
		v.StatusHrefs[p.Label] = "?" + keep.Encode()
	}
	v.JobsPager = paginate(len(keys), a.cfg.JobsPerPage, pageParam(q, "jobs"), q, "jobs")
	for _, key := range keys[v.JobsPager.From:v.JobsPager.To] {
		if j, ok := a.jobs.Indexer().Get(key); ok {
			v.Jobs = append(v.Jobs, a.jobRow(now, j))
		}
	}
	return v
}

// jobSorts are the orders the cell page lists jobs in, in the form's
// order: the value of its sort parameter, the form's label, and the order
// (nil: by name). Jobs that tie stay in name order.
var jobSorts = []struct {
	value, label string
	order        func(x, y jobFacts) int
}{
	{"", "name", nil},
	{"newest", "newest first", func(x, y jobFacts) int { return y.created.Compare(x.created) }},
	{"pending", "most tasks pending", func(x, y jobFacts) int { return cmp.Compare(y.pending, x.pending) }},
	{"failed", "most tasks failed", func(x, y jobFacts) int { return cmp.Compare(y.failed, x.failed) }},
}

// jobSortBy is the order of sort parameter value (nil: by name, also for
// a value it does not know).
func jobSortBy(value string) func(x, y jobFacts) int {
	for _, o := range jobSorts {
		if o.value == value {
			return o.order
		}
	}
	return nil
}

// jobsFound keeps the job keys whose namespace/name contains find, case
// aside (all of them when find is "").
func jobsFound(keys []string, find string) []string {
	if find == "" {
		return keys
	}
	find = strings.ToLower(find)
	return slices.DeleteFunc(keys, func(k string) bool {
		return !strings.Contains(strings.ToLower(strings.TrimPrefix(k, clientlib.Jobs.Prefix)), find)
	})
}

// jobRow is job j as a list shows it: its REASON is, as `troupe get
// jobs` says, OverQuota while admission holds tasks back, else its
// scheduler's reason while tasks are pending.
func (a *Aggregator) jobRow(now time.Time, j *troupev1.Job) jobRow {
	m, spec, st := j.GetMetadata(), j.GetSpec(), j.GetStatus()
	r := jobRow{Namespace: m.GetNamespace(), Name: m.GetName(), ID: "job-" + m.GetNamespace() + "-" + m.GetName(),
		URL: "/ui/job/" + url.PathEscape(m.GetNamespace()) + "/" + url.PathEscape(m.GetName()), Type: strings.ToLower(word(spec.GetType().String(), "JOB_TYPE_")),
		Scheduler: spec.GetScheduler(), Phase: jobWord(jobPhase(j)), Count: spec.GetCount(), Pending: st.GetPending(), Running: st.GetRunning(),
		Succeeded: st.GetSucceeded(), Failed: st.GetFailed(), Age: ago(now, m.GetCreated())}
	switch {
	case st.GetAdmission() != "":
		r.Reason = "OverQuota"
		if strings.HasPrefix(st.GetAdmission(), "refused") {
			r.Reason = "Refused"
		}
	case st.GetPending() > 0:
		if says, ok := a.says.Indexer().Get(clientlib.JobSchedulings.Prefix + m.GetNamespace() + "/" + m.GetName()); ok {
			r.Reason = says.GetStatus().GetReason()
		}
	}
	return r
}

// schedulerRows are the schedulers with a record, by name, with charts
// of w×h pixels; a.mu is held.
func (a *Aggregator) schedulerRows(now time.Time, w, h int) []schedulerRow {
	var rows []schedulerRow
	for _, name := range sortedKeys(a.schedulers) {
		if tr := a.schedulers[name]; tr.info != nil {
			rows = append(rows, a.schedulerRow(now, name, tr, w, h))
		}
	}
	return rows
}

// schedulerRow is scheduler name's figures; a.mu is held.
func (a *Aggregator) schedulerRow(now time.Time, name string, tr *track, w, h int) schedulerRow {
	r := schedulerRow{Name: name, URL: "/ui/scheduler/" + url.PathEscape(name), Heartbeat: "-"}
	if info := tr.info; info != nil {
		c := info.GetCounters()
		r.Kind, r.Heartbeat = info.GetKind(), ago(now, info.GetHeartbeat())
		r.Stale = now.Sub(info.GetHeartbeat().AsTime()) > staleAfter
		r.Attempts, r.Conflicts, r.Placements, r.Unschedulable = c.GetAttempts(), c.GetConflicts(), c.GetPlacements(), c.GetUnschedulable()
		r.Busyness, r.Fraction = ratio(c.GetBusyness()), ratio(conflictFraction(c.GetConflicts(), c.GetPlacements()))
	}
	if ch, ok := tr.samples.recent(recentSpan); ok {
		r.Recent, r.RecentRate, r.RecentFraction = true, rate(ch.rate), ratio(ch.fraction)
	}
	// The charts span the window, or the records kept if they cover
	// less of it (a scheduler that started a minute ago).
	from := now.Add(-a.cfg.Window)
	if len(tr.samples) > 0 && tr.samples[0].at.After(from) {
		from = tr.samples[0].at
	}
	s := tr.samples.series()
	r.RateChart = sparkline(s.rate, from, now, 0, w, h, "placements per second, between records")
	r.FractionChart = sparkline(s.fraction, from, now, 0.1, w, h, "conflicts per placement, between records")
	r.BusyChart = sparkline(s.busyness, from, now, 0.1, w, h, "busyness as published: the fraction of its time deciding since it started")
	med, p90, n := tr.waits.quantiles()
	r.WaitMedian, r.WaitP90, r.Waits = wait(med), wait(p90), n
	return r
}

// eventRow is an event in a list.
type eventRow struct {
	Type, Reason, Object, Message, From, FromURL, Age string
	Count                                             int32
	Warning                                           bool
}

// eventRows are the latest eventLimit events at keys (in time order of
// first occurrence, as events are named), the last seen first; only the
// last few hundred keys are read.
func (a *Aggregator) eventRows(now time.Time, get func(string) (*troupev1.Event, bool), keys []string) []eventRow {
	keys = keys[max(len(keys)-4*eventLimit, 0):]
	var evs []*troupev1.Event
	for _, k := range keys {
		if e, ok := get(k); ok {
			evs = append(evs, e)
		}
	}
	slices.SortStableFunc(evs, func(x, y *troupev1.Event) int {
		return y.GetLastSeen().AsTime().Compare(x.GetLastSeen().AsTime())
	})
	var rows []eventRow
	for _, e := range evs[:min(len(evs), eventLimit)] {
		r := eventRow{Type: e.GetType(), Reason: e.GetReason(), Object: strings.ToLower(e.GetInvolvedKind()) + "/" + e.GetInvolvedName(),
			Message: e.GetMessage(), From: e.GetSource(), Age: ago(now, e.GetLastSeen()), Count: e.GetCount(), Warning: e.GetType() == clientlib.EventWarning}
		a.mu.Lock()
		if _, ok := a.schedulers[e.GetSource()]; ok {
			r.FromURL = "/ui/scheduler/" + url.PathEscape(e.GetSource())
		}
		a.mu.Unlock()
		rows = append(rows, r)
	}
	return rows
}

// byEventName sorts event keys by their last segment, the events' names,
// which order them by first occurrence.
func byEventName(keys []string) []string {
	slices.SortFunc(keys, func(x, y string) int {
		return strings.Compare(x[strings.LastIndex(x, "/")+1:], y[strings.LastIndex(y, "/")+1:])
	})
	return keys
}

// taskRow is a task in a list.
type taskRow struct {
	Name, URL, Phase, Machine, MachineURL, Scheduler, SchedulerURL string
	Requests, Exit, Reason, Age                                    string
	Attempt, Restarts                                              int32
}

func taskRowOf(now time.Time, t *troupev1.Task) taskRow {
	st, b := t.GetStatus(), t.GetBinding()
	r := taskRow{Name: t.GetMetadata().GetName(), Phase: taskWord(taskPhase(t)), Machine: b.GetMachine(), Scheduler: b.GetScheduler(),
		Requests: resources(t.GetSpec().GetTemplate().GetRequests()), Reason: st.GetReason(), Attempt: t.GetSpec().GetAttempt(),
		Restarts: st.GetRestarts(), Age: ago(now, t.GetSpec().GetSubmitted())}
	if r.Machine == "" {
		r.Machine = st.GetMachine() // where it ran, once it ended
	}
	if r.Machine != "" {
		r.MachineURL = "/ui/machine/" + url.PathEscape(r.Machine)
	}
	if r.Scheduler != "" {
		r.SchedulerURL = "/ui/scheduler/" + url.PathEscape(r.Scheduler)
	}
	if st.GetFinished().IsValid() {
		r.Exit = strconv.Itoa(int(st.GetExitCode()))
	}
	return r
}

// jobView is a job's page.
type jobView struct {
	Found                     bool
	Namespace, Name           string
	Row                       jobRow
	Priority, GangMin         int32
	Stopped                   bool
	Command, Requests         string
	Message, Admission        string
	Retries                   int32
	Version, StableVersion    int32
	Rollout                   *rolloutView
	Scheduling                *schedulingView
	TaskParts                 []part
	TasksBar                  template.HTML
	Tasks                     []taskRow
	TasksPager                pager
	Conflicts                 int32
	ConflictEvents, Events    []eventRow
	SchedulerURL, SchedulerOf string
}

// rolloutView is a service job's update.
type rolloutView struct {
	State, Message, Started  string
	From, To, Updated, Count int32
	Healthy                  int32
	Bar                      template.HTML
	Promoted                 bool
}

// schedulingView is a job's JobScheduling: its scheduler's last word on
// its pending tasks.
type schedulingView struct {
	Reason, Message, Scheduler, SchedulerURL, Time string
	Unplaced, Machines                             int32
	Refused                                        []refusal
}

// refusal is how many machines a filter refused.
type refusal struct {
	Filter   string
	Machines int32
}

func schedulingOf(now time.Time, says *troupev1.JobScheduling) *schedulingView {
	st := says.GetStatus()
	v := &schedulingView{Reason: st.GetReason(), Message: st.GetMessage(), Scheduler: st.GetScheduler(),
		SchedulerURL: "/ui/scheduler/" + url.PathEscape(st.GetScheduler()), Time: ago(now, st.GetTime()), Unplaced: st.GetUnplaced(), Machines: st.GetMachines()}
	for f, n := range st.GetRefused() {
		v.Refused = append(v.Refused, refusal{f, n})
	}
	slices.SortFunc(v.Refused, func(x, y refusal) int {
		return cmp.Or(cmp.Compare(y.Machines, x.Machines), strings.Compare(x.Filter, y.Filter))
	})
	return v
}

// jobView builds job ns/name's page, its tasks paged by q's page.
func (a *Aggregator) jobView(ns, name string, q url.Values) jobView {
	now := a.cfg.Now()
	v := jobView{Namespace: ns, Name: name}
	j, ok := a.jobs.Indexer().Get(clientlib.Jobs.Prefix + ns + "/" + name)
	if !ok {
		return v
	}
	v.Found = true
	v.Row = a.jobRow(now, j)
	spec, st := j.GetSpec(), j.GetStatus()
	v.Priority, v.GangMin, v.Stopped = spec.GetPriority(), spec.GetGangMin(), spec.GetStopped()
	v.Command = strings.TrimSpace(spec.GetTemplate().GetCommand() + " " + strings.Join(spec.GetTemplate().GetArgs(), " "))
	v.Requests = resources(spec.GetTemplate().GetRequests())
	v.Message, v.Admission, v.Retries = st.GetMessage(), st.GetAdmission(), st.GetRetries()
	v.Version, v.StableVersion = st.GetVersion(), st.GetStableVersion()
	if ro := st.GetRollout(); ro != nil {
		v.Rollout = &rolloutView{State: word(ro.GetState().String(), "ROLLOUT_STATE_"), Message: ro.GetMessage(), Started: ago(now, ro.GetStarted()),
			From: ro.GetFromVersion(), To: ro.GetToVersion(), Updated: ro.GetUpdated(), Healthy: ro.GetHealthy(), Count: spec.GetCount(),
			Promoted: ro.GetPromoted()}
		v.Rollout.Bar = stackedBar([]part{{"healthy", "ph-running", int(ro.GetHealthy())}, {"new, not yet healthy", "ph-bound", int(max(ro.GetUpdated()-ro.GetHealthy(), 0))},
			{"old", "ph-pending", int(max(spec.GetCount()-ro.GetUpdated(), 0))}}, 320, 12)
	}
	if says, ok := a.says.Indexer().Get(clientlib.JobSchedulings.Prefix + ns + "/" + name); ok {
		v.Scheduling = schedulingOf(now, says)
	}

	keys := byTaskIndex(a.tasks.Indexer().IndexKeys(clientlib.IndexJob, ns+"/"+name))
	v.TasksPager = paginate(len(keys), a.cfg.TasksPerPage, pageParam(q, "page"), q, "page")
	for _, key := range keys[v.TasksPager.From:v.TasksPager.To] {
		if t, ok := a.tasks.Indexer().Get(key); ok {
			v.Tasks = append(v.Tasks, taskRowOf(now, t))
		}
	}
	v.TaskParts, _ = phaseParts(taskPhases, map[troupev1.TaskPhase]int{
		troupev1.TaskPhase_TASK_PHASE_PENDING: int(st.GetPending()), troupev1.TaskPhase_TASK_PHASE_RUNNING: int(st.GetRunning()),
		troupev1.TaskPhase_TASK_PHASE_SUCCEEDED: int(st.GetSucceeded()), troupev1.TaskPhase_TASK_PHASE_FAILED: int(st.GetFailed()),
	}, taskWord)
	v.TasksBar = stackedBar(v.TaskParts, 320, 12)

	v.Events = a.eventRows(now, a.events.Indexer().Get, a.events.Indexer().IndexKeys(clientlib.IndexJob, ns+"/"+name))
	conflicts := a.events.Indexer().IndexKeys(indexConflicts, ns+"/"+name)
	for _, k := range conflicts {
		if e, ok := a.events.Indexer().Get(k); ok {
			v.Conflicts += e.GetCount()
		}
	}
	v.ConflictEvents = a.eventRows(now, a.events.Indexer().Get, conflicts)
	return v
}

// byTaskIndex sorts the keys of a job's tasks by the index that ends
// them.
func byTaskIndex(keys []string) []string {
	type indexed struct {
		i   int
		key string
	}
	xs := make([]indexed, len(keys))
	for j, k := range keys {
		n, err := strconv.Atoi(k[strings.LastIndex(k, "/")+1:])
		if err != nil {
			n = -1
		}
		xs[j] = indexed{n, k}
	}
	slices.SortFunc(xs, func(x, y indexed) int { return cmp.Or(cmp.Compare(x.i, y.i), strings.Compare(x.key, y.key)) })
	for j, x := range xs {
		keys[j] = x.key
	}
	return keys
}

// machineView is a machine's page.
type machineView struct {
	Found                          bool
	Name, Phase, Message           string
	Cordoned, Lost                 bool
	Labels, Taints, Agent, Created string
	Lease                          *leaseView
	Resources                      []resourceRow
	Tasks                          []taskRow
	TasksTotal                     int
	Events                         []eventRow
}

// leaseView is a machine's heartbeat lease.
type leaseView struct {
	Holder, Renewed, Duration, Expires string
	Expired                            bool
}

// resourceRow is a resource of a machine: its capacity and what its
// counter says is allocated.
type resourceRow struct {
	Name, Capacity, Allocated, Free, Percent string
	Bar                                      template.HTML
}

// machineView builds machine name's page.
func (a *Aggregator) machineView(name string) machineView {
	now := a.cfg.Now()
	v := machineView{Name: name}
	m, ok := a.machines.Indexer().Get(clientlib.Machines.Prefix + name)
	if !ok {
		return v
	}
	v.Found = true
	v.Phase, v.Message = word(m.GetStatus().GetPhase().String(), "MACHINE_PHASE_"), m.GetStatus().GetMessage()
	v.Cordoned, v.Lost = m.GetSpec().GetUnschedulable(), m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST
	var labels, taints []string
	for _, k := range sortedKeys(m.GetMetadata().GetLabels()) {
		labels = append(labels, k+"="+m.GetMetadata().GetLabels()[k])
	}
	for _, t := range m.GetSpec().GetTaints() {
		taints = append(taints, fmt.Sprintf("%s=%s:%s", t.GetKey(), t.GetValue(), word(t.GetEffect().String(), "TAINT_EFFECT_")))
	}
	v.Labels, v.Taints = cmp.Or(strings.Join(labels, ", "), "-"), cmp.Or(strings.Join(taints, ", "), "-")
	v.Agent, v.Created = cmp.Or(m.GetSpec().GetAgentAddress(), "-"), ago(now, m.GetMetadata().GetCreated())
	if l, ok := a.leases.Indexer().Get(clientlib.Leases.Prefix + name); ok {
		end := l.GetRenewed().AsTime().Add(l.GetDuration().AsDuration())
		v.Lease = &leaseView{Holder: l.GetHolder(), Renewed: ago(now, l.GetRenewed()), Duration: l.GetDuration().AsDuration().String(),
			Expires: short(end.Sub(now)), Expired: now.After(end)}
		if v.Lease.Expired {
			v.Lease.Expires = short(now.Sub(end)) + " ago"
		}
	}
	a.mu.Lock()
	alloc := maps.Clone(a.alloc[name])
	a.mu.Unlock()
	capacity := m.GetSpec().GetCapacity()
	for _, r := range sortedKeys(capacity) {
		c, used := capacity[r], alloc[r]
		v.Resources = append(v.Resources, resourceRow{Name: r, Capacity: quantity(r, c), Allocated: quantity(r, used), Free: quantity(r, c-used),
			Percent: percent(used, c), Bar: usageBar(used, c, 200, 10)})
	}
	keys := a.tasks.Indexer().IndexKeys(clientlib.IndexMachine, name)
	v.TasksTotal = len(keys)
	for _, key := range keys[:min(len(keys), a.cfg.ListLimit)] {
		if t, ok := a.tasks.Indexer().Get(key); ok {
			v.Tasks = append(v.Tasks, taskRowOf(now, t))
		}
	}
	v.Events = a.eventRows(now, a.mevents.Indexer().Get, a.mevents.Indexer().IndexKeys(clientlib.IndexMachine, name))
	return v
}

// schedulerView is a scheduler's page.
type schedulerView struct {
	Found bool
	Row   schedulerRow
	// Recent is what it did over the last minute of records.
	Recent                    counts
	RecentSpan                string
	HasRecent                 bool
	Pending                   []pendingRow
	PendingTotal, Says        int
	Events                    []eventRow
	Window, DecisionsPerSec   string
	Samples, AttemptsInWindow int
}

// counts are what a scheduler did over a time.
type counts struct{ Attempts, Conflicts, Placements, Unschedulable uint64 }

// pendingRow is a job with pending tasks of a scheduler's kind, and what
// the scheduler that decided about it last said.
type pendingRow struct {
	Job, URL, Reason, Message, By, ByURL, Time string
	Pending, Unplaced                          int32
	Mine                                       bool
}

// schedulerView builds scheduler name's page.
func (a *Aggregator) schedulerView(name string) schedulerView {
	now := a.cfg.Now()
	v := schedulerView{Window: short(a.cfg.Window), RecentSpan: short(recentSpan)}
	a.mu.Lock()
	tr, ok := a.schedulers[name]
	if ok {
		v.Found = true
		v.Row = a.schedulerRow(now, name, tr, 260, 60)
		var ch change
		if ch, v.HasRecent = tr.samples.recent(recentSpan); v.HasRecent {
			v.Recent = counts{ch.attempts, ch.conflicts, ch.placements, ch.uns}
		}
		v.Samples = len(tr.samples)
		if n := len(tr.samples); n > 1 {
			if ch, ok := delta(tr.samples[0], tr.samples[n-1]); ok {
				v.AttemptsInWindow, v.DecisionsPerSec = int(ch.attempts), rate(float64(ch.attempts)/ch.span.Seconds())
			}
		}
	}
	a.mu.Unlock()
	if !ok {
		return v
	}
	v.Says = len(a.says.Indexer().IndexKeys(indexSays, name))
	if v.Row.Kind != "" {
		keys := a.jobs.Indexer().IndexKeys(indexPending, v.Row.Kind)
		v.PendingTotal = len(keys)
		for _, key := range keys[:min(len(keys), a.cfg.ListLimit)] {
			j, ok := a.jobs.Indexer().Get(key)
			if !ok {
				continue
			}
			r := a.jobRow(now, j)
			p := pendingRow{Job: r.Namespace + "/" + r.Name, URL: r.URL, Pending: r.Pending, Reason: cmp.Or(r.Reason, "-")}
			if says, ok := a.says.Indexer().Get(clientlib.JobSchedulings.Prefix + r.Namespace + "/" + r.Name); ok {
				s := schedulingOf(now, says)
				p.Message, p.By, p.ByURL, p.Time, p.Unplaced, p.Mine = s.Message, s.Scheduler, s.SchedulerURL, s.Time, s.Unplaced, s.Scheduler == name
			}
			v.Pending = append(v.Pending, p)
		}
	}
	v.Events = a.eventRows(now, a.events.Indexer().Get, byEventName(a.events.Indexer().IndexKeys(indexSource, name)))
	return v
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
