package framework

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Profile is how a scheduler decides: its plugins and how far it looks.
type Profile struct {
	Filters []FilterPlugin
	Scores  []WeightedScore
	// SampleFeasible stops the search for a task once this many feasible
	// machines are found (0: examine every machine); the best scoring of
	// them wins. Relaxed randomization, as in Borg and kube-scheduler.
	SampleFeasible int
	// Rand orders the machines examined; a decision is a function of the
	// snapshot, the tasks and Rand's state.
	Rand *rand.Rand
	// Redraw draws each task's machines afresh: every task's search
	// examines the machines in a new uniformly random order (drawn lazily
	// from Rand, one machine at a time, as a Fisher-Yates shuffle), where
	// by default a decision shuffles the machines once and each task's
	// search goes on from where the previous task's stopped. With
	// SampleFeasible 1 and no scores, a task so goes to a machine chosen
	// uniformly at random among those the filters pass, as the plan has
	// left them, and a machine may take several tasks of a plan. This is
	// the randomized first fit of Google's lightweight Omega simulator
	// (Scheduler.scheduleJob: "candidateIndex =
	// nextInt(remainingCandidates)" until a machine has room for the
	// task; one without room is swapped out of the candidates), which
	// draws the same distribution. It costs a random draw per machine
	// examined, and a preemption search starts afresh for every task.
	Redraw bool
	// Preempt lets a task that fits nowhere evict lower-priority tasks
	// (see CanPreempt); machines need Running filled in.
	Preempt bool
	// Cache, if set, keeps the static filters' verdicts and buffers
	// from one decision to the next (nil: each decision starts afresh).
	Cache *Cache
	// Placed, if set, is told of each placement as the plan makes it,
	// in order (no later one undoes it), so that work on it, such as
	// encoding its writes (EncodeBinding), can go on while the plan is
	// made.
	Placed func(Placement)
}

// Placement is one task put on one machine.
type Placement struct {
	Task    *Task
	Machine *Machine // as in the snapshot (before this plan)
	Score   int64
	// Victims are the tasks evicted to make room (preemption).
	Victims []*Running
	// Encoded, if set, are its writes, made ahead (EncodeBinding).
	Encoded *EncodedBinding
}

// Failure is a task the plan could not place, and why.
type Failure struct {
	Task   *Task
	Status *Status
}

// Plan is what Schedule decided.
type Plan struct {
	Placements []Placement
	Failures   []Failure
	// Examined counts the (task, machine) pairs filtered (not the
	// machines passed over for lack of room, see FitFilter), and
	// StaticHits the static verdicts answered from the equivalence-class
	// cache.
	Examined, StaticHits int
}

// Schedule places tasks, in order, on the snapshot's machines. Each
// placement is assumed before the next task is decided (its requests count
// as allocated, its job's task count grows), so a plan never overcommits
// the snapshot. Tasks with the same requirements form an equivalence
// class whose static filter results are computed once per machine.
//
// A task that fits nowhere (even by preemption) fails the identical tasks
// after it in the plan without another search, until an eviction frees
// room: in a full cell a job's hundreds of tasks cost one scan, not
// hundreds.
func Schedule(p Profile, snap *Snapshot, tasks []*Task) *Plan {
	s := &scheduling{p: p, snap: snap, cache: p.Cache, assumed: map[int]*Machine{}, evicted: map[string]bool{},
		failed: map[string]*Status{}, preemptions: map[string]*preemptSearch{}}
	if p.Rand == nil {
		s.p.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if s.cache == nil {
		s.cache = NewCache()
	}
	for _, f := range p.Filters {
		if _, ok := f.(Static); ok {
			s.staticFilters = append(s.staticFilters, f)
			continue
		}
		if ff, ok := f.(FitFilter); ok && len(s.dynamics) == 0 {
			s.fit = ff
		}
		s.dynamics = append(s.dynamics, f)
	}
	if p.Redraw {
		s.order = s.cache.identity(len(snap.Machines)) // each task shuffles it
	} else {
		s.order = s.cache.perm(s.p.Rand, len(snap.Machines))
	}
	plan := &Plan{}
	var keys taskKeys
	for n, t := range tasks {
		class, fit := keys.of(t)
		if st, ok := s.failed[fit]; ok {
			plan.fail(Failure{Task: t, Status: st}, len(tasks)-n)
			continue
		}
		idx, score, st := s.place(class, t)
		var victims []*Running
		if idx < 0 && st.Code == Unschedulable && p.Preempt {
			idx, victims = s.preempt(class, fmt.Sprintf("%s\x00%d\x00%s", fit, t.Priority, t.Job), t)
		}
		if idx < 0 {
			s.failed[fit] = st
			plan.fail(Failure{Task: t, Status: st}, len(tasks)-n)
			continue
		}
		plan.Placements = append(plan.Placements, Placement{Task: t, Machine: s.snap.Machines[idx], Score: score, Victims: victims})
		if p.Placed != nil {
			p.Placed(plan.Placements[len(plan.Placements)-1])
		}
		s.evict(idx, victims)
		s.assume(t, idx)
	}
	plan.Examined, plan.StaticHits = s.examined, s.staticHits
	return plan
}

// fail adds f to the plan's failures, with room for rest of them (the
// tasks left, f's among them) at the first: in a full cell most fail.
func (p *Plan) fail(f Failure, rest int) {
	if p.Failures == nil {
		p.Failures = make([]Failure, 0, rest)
	}
	p.Failures = append(p.Failures, f)
}

type scheduling struct {
	p                       Profile
	staticFilters, dynamics []FilterPlugin
	// fit is the first dynamic filter if it is a FitFilter: machines
	// without room are then passed over, by rooms.
	fit        FitFilter
	snap       *Snapshot
	cache      *Cache
	order      []int              // machine indexes in the order examined
	next       int                // where the next task starts in order
	assumed    map[int]*Machine   // machines changed by this plan so far, by index
	rooms      []Room             // with fit: each machine's room as the plan has left it (nil until needed)
	scorers    []jobScorers       // score plugins prepared for a job's tasks (see preScore)
	touched    []int              // the machines the plan placed on or evicted from, in turn
	positions  []int32            // where each machine is in order (nil until needed)
	evicted    map[string]bool    // victims of this plan's preemptions
	failed     map[string]*Status // by fitKey: tasks that fit nowhere
	evictedAny bool               // the plan has evicted tasks
	// preemptions are preemption's searches, by fitKey, priority and job.
	preemptions map[string]*preemptSearch
	// clean are the classes (by verdicts) whose static filters pass
	// every machine (staticClean), and those that do not.
	clean map[*classVerdicts]bool
	// blocks, once built, bound the rooms by runs of the order
	// (blocksFor); passedOne counts the machines passed over one by one
	// until then.
	blocks      roomBlocks
	blocksBuilt bool
	passedOne   int
	// trial is preemption's machine as it would be without victims.
	trial *Machine

	examined, staticHits int
}

// jobScorers are the score plugins a job's tasks of one class are scored
// with, PreScorePlugins prepared, kept while the plan places them.
type jobScorers struct {
	job, class string
	scores     []WeightedScore
}

// fitKey identifies the tasks of a class with the same requests: if one
// fits nowhere in a plan, neither does the next.
func fitKey(class string, t *Task) string {
	b := []byte(class)
	var buf [4]string
	for _, r := range resources(t.Requests, buf[:]) {
		b = append(append(append(b, 0), r...), '=')
		b = strconv.AppendInt(b, t.Requests[r], 10)
	}
	return string(b)
}

// view returns machine i as the plan so far has left it.
func (s *scheduling) view(i int) *Machine {
	if a, ok := s.assumed[i]; ok {
		return a
	}
	return s.snap.Machines[i]
}

// place finds the machine for t: the best scoring of the first
// SampleFeasible feasible machines, starting where the previous task
// stopped (with Redraw: in an order drawn afresh). It returns the
// machine's index (-1: none fits).
func (s *scheduling) place(class string, t *Task) (int, int64, *Status) {
	n := len(s.order)
	if n == 0 {
		return -1, 0, NewStatus(Unschedulable, "Schedule", "the cell has no machines")
	}
	if st := s.tooLarge(t, n); st != nil {
		return -1, 0, st
	}
	scores := s.preScore(class, t)
	cv := s.cache.class(class, len(s.snap.Machines))
	rooms := s.roomsFor()
	cpu, memory := t.Requests[CPU], t.Requests[Memory]
	// A machine whose room holds a task asking only for CPU and Memory
	// passes the FitFilter (it refuses exactly the machines where a
	// request does not fit), which is then not run.
	skipFit := 0
	if rooms != nil && roomCovers(t.Requests) {
		skipFit = 1
	}
	var (
		best      *Machine
		bestIdx   = -1
		bestScore int64
		feasible  int
		refused   = refusals{by: map[string]reason{}, errAt: -1}
		// passed counts the machines passed over for lack of room,
		// firstPassed is the first's position in the search.
		passed, firstPassed int
	)
	start := s.next
	if s.p.Redraw {
		s.redraw()
		start = 0
	}
	blocks := s.blocksFor(rooms)
	i := 0
	for ; i < n; i++ {
		if s.p.Redraw { // draw position i's machine among those not examined yet
			j := i + s.p.Rand.IntN(n-i)
			s.order[i], s.order[j] = s.order[j], s.order[i]
		}
		at := (start + i) % n
		if blocks != nil {
			if k := blocks.pass(at, n-i, cpu, memory); k > 0 { // a run of machines without room
				if passed == 0 {
					firstPassed = i
				}
				passed += k
				i += k - 1
				continue
			}
		}
		idx := s.order[at]
		if rooms != nil && !rooms[idx].Fits(cpu, memory) {
			if passed == 0 {
				firstPassed = i
			}
			passed++
			if blocks == nil {
				s.passedOne++
				blocks = s.blocksFor(rooms)
			}
			continue
		}
		m := s.view(idx)
		st := s.filterFrom(cv, t, idx, m, skipFit)
		if !st.IsSuccess() {
			refused.add(i, st)
			continue
		}
		feasible++
		score := score(scores, t, m)
		if best == nil || score > bestScore {
			best, bestIdx, bestScore = m, idx, score
		}
		if s.p.SampleFeasible > 0 && feasible >= s.p.SampleFeasible {
			i++
			break
		}
	}
	s.next = (start + i) % n
	if best != nil {
		return bestIdx, bestScore, nil
	}
	if passed > 0 {
		s.passedOver(&refused, cv, t, start, rooms, passed, firstPassed)
	}
	if refused.lastErr != nil {
		return -1, 0, refused.lastErr
	}
	return -1, 0, unschedulable(refused.by, n)
}

// redraw readies the order for a task's search to shuffle it again:
// preemption's positions in the order, and its searches resumed from
// them, no longer hold.
func (s *scheduling) redraw() {
	s.positions = nil
	clear(s.preemptions)
}

// blocksFor returns the roomBlocks of rooms (non-nil: see roomsFor),
// built once the decision's searches have passed over as many machines
// one by one as a quarter of the cell has (building them visits every
// machine once, which a decision whose searches find room near where
// they start does not repay); nil until then, without rooms, or with
// Redraw, whose order changes with every search.
func (s *scheduling) blocksFor(rooms []Room) *roomBlocks {
	if s.blocksBuilt {
		return &s.blocks
	}
	if rooms == nil || s.p.Redraw || 4*s.passedOne < len(s.order) {
		return nil
	}
	s.blocks.bounds = s.cache.bounds
	s.blocks.build(rooms, s.order)
	s.cache.bounds, s.blocksBuilt = s.blocks.bounds, true
	return &s.blocks
}

// roomsFor returns the machines' rooms as the plan has left them, when
// the profile passes over machines without room (nil otherwise).
func (s *scheduling) roomsFor() []Room {
	if s.fit == nil || s.rooms != nil {
		return s.rooms
	}
	s.rooms = resize(s.cache.rooms, len(s.snap.Machines))
	s.cache.rooms = s.rooms
	if s.snap.Rooms != nil {
		copy(s.rooms, s.snap.Rooms)
	} else {
		for i, m := range s.snap.Machines {
			s.rooms[i] = RoomOf(m)
		}
	}
	for i, m := range s.assumed {
		s.rooms[i] = RoomOf(m)
	}
	return s.rooms
}

// passedOver adds to refused, for a task that fits nowhere, what the
// filters would have said of the machines passed over for lack of room
// (from position start of the order; passed of them, the first at
// position first): the static filters' refusal, or else the
// FitFilter's, which runs only for the first. When no machine of the
// snapshot has a static refusal for the task's class (staticClean),
// they are all the FitFilter's, found without visiting them.
func (s *scheduling) passedOver(refused *refusals, cv *classVerdicts, t *Task, start int, rooms []Room, passed, first int) {
	n := len(s.order)
	if s.staticClean(cv, t) {
		refused.count(first, passed, s.fit.Name(), func() *Status { return s.fit.Filter(t, s.view(s.order[(start+first)%n])) })
		return
	}
	cpu, memory := t.Requests[CPU], t.Requests[Memory]
	fits := 0 // the FitFilter's refusals, the first at position first
	for i := range n {
		idx := s.order[(start+i)%n]
		if rooms[idx].Fits(cpu, memory) {
			continue
		}
		if st := s.static(cv, t, idx); st != staticPass {
			refused.add(i, st)
			continue
		}
		if fits == 0 {
			first = i
		}
		fits++
	}
	if fits > 0 {
		refused.count(first, fits, s.fit.Name(), func() *Status { return s.fit.Filter(t, s.view(s.order[(start+first)%n])) })
	}
}

// staticClean reports whether the static filters pass every machine of
// the snapshot for the tasks of class verdicts cv (t one of them),
// worked out once per decision and class (the machines in index order,
// which is cheaper than in the search's shuffled order), and once per
// class for the snapshots of one Snapshot.Fixed.
func (s *scheduling) staticClean(cv *classVerdicts, t *Task) bool {
	fixed := s.snap.Fixed
	if fixed != 0 && cv.cleanOf == fixed {
		return cv.clean
	}
	clean, ok := s.clean[cv]
	if ok {
		return clean
	}
	clean = true
	for idx := range s.snap.Machines {
		if s.static(cv, t, idx) != staticPass {
			clean = false
			break
		}
	}
	if s.clean == nil {
		s.clean = map[*classVerdicts]bool{}
	}
	s.clean[cv] = clean
	if fixed != 0 {
		cv.cleanOf, cv.clean = fixed, clean
	}
	return clean
}

// refusals collects why the machines refused a task, by plugin, with
// one reason each (of the first machine in the order of the search),
// and the last Error met.
type refusals struct {
	by      map[string]reason
	lastErr *Status
	errAt   int
}

// add records refusal st of the machine at position at of the search.
func (r *refusals) add(at int, st *Status) {
	if st.Code == Error && at > r.errAt {
		r.lastErr, r.errAt = st, at
	}
	r.count(at, 1, st.Plugin, func() *Status { return st })
}

// count records n refusals by plugin, the first of the machine at
// position at of the search; status is asked for only if its reason is
// the example.
func (r *refusals) count(at, n int, plugin string, status func() *Status) {
	x := r.by[plugin]
	if x.count == 0 || at < x.at {
		x.example, x.at = strings.Join(status().Explain(), "; "), at
	}
	x.count += n
	r.by[plugin] = x
}

// tooLarge fails t at once when it requests more of a resource than any
// machine has free (Snapshot.MaxFree); evictions in the plan may have
// freed more, so it answers only before the first.
func (s *scheduling) tooLarge(t *Task, machines int) *Status {
	if s.snap.MaxFree == nil || s.evictedAny {
		return nil
	}
	var buf [4]string
	for _, r := range resources(t.Requests, buf[:]) {
		if q := t.Requests[r]; q > 0 && q > s.snap.MaxFree[r] {
			st := NewStatus(Unschedulable, "Schedule", fmt.Sprintf("0/%d machines fit: none has %s %s free", machines, clientlib.FormatQuantity(r, q), r))
			st.Machines = machines
			if s.fit != nil {
				st.Refused = map[string]int{s.fit.Name(): machines}
			}
			return st
		}
	}
	return nil
}

// filter runs the filters on machine idx as m (its view), answering the
// static ones from the class's verdicts cv: they look only at what never
// changes in a plan (labels, taints, the machine object), so one verdict
// per class and machine serves every task of the class.
func (s *scheduling) filter(cv *classVerdicts, t *Task, idx int, m *Machine) *Status {
	return s.filterFrom(cv, t, idx, m, 0)
}

// filterFrom is filter without the first skip dynamic filters.
func (s *scheduling) filterFrom(cv *classVerdicts, t *Task, idx int, m *Machine, skip int) *Status {
	s.examined++
	if len(s.staticFilters) > 0 {
		if v := s.static(cv, t, idx); v != staticPass {
			return v
		}
	}
	for _, f := range s.dynamics[skip:] {
		if st := f.Filter(t, m); !st.IsSuccess() {
			return st
		}
	}
	return nil
}

// preScore returns the task's score plugins, with PreScorePlugins
// replaced by what they return for this task. When each of those is an
// AssumingScore, they serve the following tasks of the job and class
// too, told of each placement of the job (assume) instead of prepared
// again.
func (s *scheduling) preScore(class string, t *Task) []WeightedScore {
	for _, js := range s.scorers {
		if js.job == t.Job && js.class == class {
			return js.scores
		}
	}
	scores, cloned, assuming := s.p.Scores, false, true
	for i, w := range scores {
		ps, ok := w.Plugin.(PreScorePlugin)
		if !ok {
			continue
		}
		if !cloned {
			scores, cloned = slices.Clone(scores), true
		}
		views := slices.Clone(s.snap.Machines) // as the plan has left them (view)
		for j, a := range s.assumed {
			views[j] = a
		}
		scores[i] = WeightedScore{Plugin: ps.PreScore(t, views), Weight: w.Weight}
		if _, ok := scores[i].Plugin.(AssumingScore); !ok {
			assuming = false
		}
	}
	if cloned && assuming {
		s.scorers = append(s.scorers, jobScorers{job: t.Job, class: class, scores: scores})
	}
	return scores
}

func score(scores []WeightedScore, t *Task, m *Machine) int64 {
	var total int64
	for _, w := range scores {
		total += w.Weight * w.Plugin.Score(t, m)
	}
	return total
}

// assume records t on machine idx in the plan's overlay.
func (s *scheduling) assume(t *Task, idx int) {
	a, ok := s.assumed[idx]
	if !ok {
		m := s.snap.Machines[idx]
		c := *m
		c.Allocated = maps.Clone(m.Allocated)
		if c.Allocated == nil {
			c.Allocated = map[string]int64{}
		}
		c.JobTasks = maps.Clone(m.JobTasks)
		if c.JobTasks == nil {
			c.JobTasks = map[string]int{}
		}
		c.FlattenAs(m)
		a = &c
		s.assumed[idx] = a
	}
	a.allocate(t)
	a.JobTasks[t.Job]++
	s.touched = append(s.touched, idx)
	if s.rooms != nil {
		s.rooms[idx] = RoomOf(a)
	}
	for _, js := range s.scorers {
		if js.job != t.Job {
			continue
		}
		for _, w := range js.scores {
			if as, ok := w.Plugin.(AssumingScore); ok {
				as.Assume(a)
			}
		}
	}
}

// reason counts the machines one plugin refused, with the reason of the
// first in the search (at: its position).
type reason struct {
	count, at int
	example   string
}

// unschedulable summarizes why no machine fit, by plugin, most common
// first: "0/3 machines fit: 2× ResourceFit (insufficient cpu: ...), ...",
// with the counts in Refused and Machines as well.
func unschedulable(reasons map[string]reason, machines int) *Status {
	plugins := slices.Collect(maps.Keys(reasons))
	slices.SortFunc(plugins, func(a, b string) int {
		if reasons[a].count != reasons[b].count {
			return reasons[b].count - reasons[a].count
		}
		return strings.Compare(a, b)
	})
	out := make([]string, 0, len(plugins))
	refused := make(map[string]int, len(plugins))
	for _, p := range plugins {
		out = append(out, fmt.Sprintf("%d× %s (%s)", reasons[p].count, p, reasons[p].example))
		refused[p] = reasons[p].count
	}
	st := NewStatus(Unschedulable, "Schedule", fmt.Sprintf("0/%d machines fit: %s", machines, strings.Join(out, ", ")))
	st.Refused, st.Machines = refused, machines
	return st
}

// taskKeys are the classKey and fitKey of the last task of a decision
// and what they were made of: the next task with the same constraints,
// tolerations and requests (the same messages and map, not copies) has
// the same keys. A job's tasks share them (a run of them their
// requests), and a decision in a full cell fails thousands of tasks by
// their fitKey alone, so building them is much of its work.
type taskKeys struct {
	constraints *troupev1.Constraints
	tolerations []*troupev1.Toleration
	requests    uintptr // the map's
	class, fit  string
	made        bool
}

// of returns t's classKey and fitKey. A decision changes none of the
// messages or maps of its tasks, so equal pointers mean equal keys.
func (k *taskKeys) of(t *Task) (class, fit string) {
	spec := t.Task.GetSpec()
	constraints, tolerations := spec.GetConstraints(), spec.GetTolerations()
	requests := reflect.ValueOf(t.Requests).Pointer()
	if !k.made || constraints != k.constraints || requests != k.requests || !sameSlice(tolerations, k.tolerations) {
		class := k.class
		if !k.made || constraints != k.constraints || !sameSlice(tolerations, k.tolerations) {
			class = classKey(t)
		}
		*k = taskKeys{constraints: constraints, tolerations: tolerations, requests: requests,
			class: class, fit: fitKey(class, t), made: true}
	}
	return k.class, k.fit
}

// sameSlice reports whether a and b are the same elements of the same
// array.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// classKey identifies a task's equivalence class for static filters:
// everything they may look at (constraints and tolerations). The tasks of
// a job share it, and so do identical tasks of different jobs.
func classKey(t *Task) string {
	spec := t.Task.GetSpec()
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&troupev1.TaskSpec{
		Constraints: spec.GetConstraints(), Tolerations: spec.GetTolerations()})
	return string(b)
}
