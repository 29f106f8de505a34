package scheduler

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// A Shadow is a scheduler that runs against a live cell without
// committing anything: it follows the cell in its own caches, decides
// about the pending tasks of its kind with its profile as an instance in
// charge would, and instead of committing, evaluates each plan against
// the cell as its cache shows it the moment the plan would have been
// committed (shadowCommit, the only Committer it has). It records what
// it would have placed where, which of its placements would have
// conflicted with what the real schedulers committed meanwhile, where the
// real schedulers placed the same tasks, and how long it took to decide;
// its Collector exports them and Report sums them up.
//
// It holds no way to write: NewShadow takes a Reader (list and watch),
// never a clientlib.Store, and nothing of a Shadow publishes a record,
// records an event or writes a job's JobScheduling. Run it with a viewer
// identity, which the store's default rules let read and watch every key
// and write none.
//
// Its plans are never committed, so the tasks it decides about stay
// pending in its view until a real scheduler binds them. It decides
// about each version of a pending task once (a job's tasks that become
// pending together are one decision; a task is decided about again only
// once it is pending at a new version: evicted, restarted, replaced),
// and it keeps, per job, only its tasks pending or decided about and not
// yet bound or gone, so its memory follows the cell's pending tasks.
//
// A real scheduler may bind the tasks before the shadow gets to them. The
// shadow then still decides, as if it were in charge: on the cell without
// those placements (their requests given back to their machines in its
// snapshot), and a change to a machine that the real scheduler's
// placements of the same tasks account for is not a conflict: had the
// shadow been in charge, they would have been its own.
type Shadow struct {
	cfg      ShadowConfig
	cache    *CellCache
	ownCache bool
	tasks    *cache.Informer[*troupev1.Task] // = cache.tasks
	view     *MachineView                    // = cache.view
	queue    *cache.WorkQueue
	clock    cache.Clock
	stats    *shadowStats
	// beforeCommit, if set, runs between a decision and its evaluation
	// (tests: a rival commits meanwhile).
	beforeCommit func(job string)

	mu   sync.Mutex
	jobs map[string]*shadowJob // jobs with tasks pending or decided about, not yet bound or gone
}

// ShadowConfig configures a Shadow.
type ShadowConfig struct {
	// Name is the shadow's name in its metrics and report
	// ("shadow-batch-0").
	Name string
	// Kind selects the tasks decided about: those whose spec.scheduler is
	// Kind; Partition of Partitions (if > 1) a hash partition of its jobs,
	// as Config's.
	Kind                  string
	Partition, Partitions int
	// Profile, Modes and Policy are the instance's it stands in for:
	// Modes say what would have conflicted (fine: no room left; coarse:
	// the counters changed; coarse-claims: another placement on the
	// machine) and how a plan commits (incremental, gang, atomic); the
	// Policy's verdict on each decision is recorded, never acted upon.
	Profile framework.Profile
	Modes   framework.Modes
	Policy  Policy
	// Cache is a cell cache shared with other shadows of the process; nil:
	// the shadow keeps and runs its own.
	Cache *CellCache
	// Clock times decisions (nil: the wall clock).
	Clock cache.Clock
	// Keep is how many of the latest decisions the report lists (0:
	// DefaultShadowKeep; negative: none).
	Keep int
	// Observe, if set, is called with each decision, from the shadow's
	// goroutine, once it is evaluated.
	Observe func(ShadowDecision)
	Logger  *zap.Logger
}

// DefaultShadowKeep is how many decisions a shadow's report lists by
// default.
const DefaultShadowKeep = 1000

// Validate checks the configuration.
func (c ShadowConfig) Validate() error {
	return validateInstance("shadow", c.Name, c.Kind, c.Partition, c.Partitions, c.Policy, c.Logger)
}

// ShadowDecision is one decision of a shadow: the job, when it was made
// (by the shadow's clock) and how long it took, the pending tasks decided
// about, where each was placed (or why none fit), what the placements
// would have met at commit, and the policy's verdict.
type ShadowDecision struct {
	Job      string        `json:"job"`
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"decision_seconds"`
	Tasks    int           `json:"tasks"`
	// Placements are the plan's, in its order.
	Placements []ShadowPlacement `json:"placements,omitempty"`
	// Unplaced are the tasks that fit nowhere (all of a gang that does
	// not fit whole), and Reason why the first did not.
	Unplaced []ShadowPlacement `json:"unplaced,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	// Conflicts counts the placements that would have conflicted.
	Conflicts int `json:"conflicts"`
	// Action is what the policy would have done next (done, retry,
	// wait, back-off, abandon).
	Action string `json:"action"`
	// Plan is the plan itself, for Observe (not kept for reports).
	Plan *framework.Plan `json:"-"`
}

// ShadowPlacement is one task of a decision: the machine the shadow chose
// ("" for a task that fit nowhere), why committing it would have
// conflicted ("" if it would not), whether its task was gone by then,
// and, once known, where a real scheduler placed the task and what the
// two make (Agreement outcomes: same_machine, elsewhere, only_shadow,
// only_real, neither).
type ShadowPlacement struct {
	Task     string `json:"task"`
	Machine  string `json:"machine,omitempty"`
	Conflict string `json:"conflict,omitempty"`
	Stopped  bool   `json:"stopped,omitempty"`
	Real     string `json:"real,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
}

// shadowJob is what a shadow keeps of a job: its tasks seen pending and
// not decided about yet, those decided about whose real outcome is not
// known yet, and the policy's state.
type shadowJob struct {
	st          JobState
	undecided   map[string]*seenTask
	outstanding map[string]*tracked
}

// seenTask is a task seen pending: as last seen so, and where a real
// scheduler has bound it since ("": not yet; a task bound so stays until
// it is decided about, even if it is gone meanwhile, for the comparison).
type seenTask struct {
	task *troupev1.Task
	real string
}

// tracked is a task decided about whose real outcome is awaited: the
// version decided about, the machine chosen ("": none fit), and the
// decision record to complete.
type tracked struct {
	version uint64
	machine string
	rec     *ShadowDecision
	unfit   bool
	idx     int
}

// NewShadow returns a shadow scheduler over the cell that r reads (a
// *clientlib.Client with a viewer identity in a cell, a memstore in
// tests): r is only listed and watched.
func NewShadow(r Reader, cfg ShadowConfig) (*Shadow, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = cache.RealClock
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultShadowKeep
	}
	cc, own := cfg.Cache, cfg.Cache == nil
	if own {
		cc = NewCellCache(r, cfg.Logger)
	}
	// The queue delays nothing (a shadow never waits for a job): it keeps
	// the wall clock, and cfg.Clock times decisions alone.
	s := &Shadow{cfg: cfg, cache: cc, ownCache: own, tasks: cc.tasks, view: cc.view, queue: cache.NewWorkQueue(cache.DefaultQueueConfig()),
		clock: cfg.Clock, stats: newShadowStats(cfg.Clock.Now(), max(cfg.Keep, 0)), jobs: map[string]*shadowJob{}}
	cc.tasks.AddHandler(cache.Handler[*troupev1.Task]{
		OnAdd:    func(key string, t *troupev1.Task) { s.taskChanged(key, t) },
		OnUpdate: func(key string, _, t *troupev1.Task) { s.taskChanged(key, t) },
		OnDelete: func(key string, t *troupev1.Task) { s.taskGone(key, t) },
	})
	return s, nil
}

// WaitForSync waits until the shadow's cache is filled, or ctx ends.
func (s *Shadow) WaitForSync(ctx context.Context) error { return s.cache.WaitForSync(ctx) }

// Run decides until ctx ends (running the shadow's cache, unless it
// shares its process's).
func (s *Shadow) Run(ctx context.Context) error {
	if s.ownCache {
		if err := s.cache.Run(ctx); err != nil {
			return err
		}
	} else if err := s.cache.WaitForSync(ctx); err != nil {
		return err
	}
	// A shared cache may have been filled before the shadow's handler
	// was added.
	for _, key := range s.tasks.Indexer().IndexKeys(clientlib.IndexScheduler, s.cfg.Kind) {
		if t, ok := s.tasks.Indexer().Get(key); ok {
			s.taskChanged(key, t)
		}
	}
	return s.queue.Serve(ctx, func(job string) { s.decideJob(ctx, job) })
}

// serves reports whether the shadow decides about task t.
func (s *Shadow) serves(t *troupev1.Task) bool {
	return t.GetSpec().GetScheduler() == s.cfg.Kind && inPartition(jobOf(t), s.cfg.Partition, s.cfg.Partitions)
}

// taskChanged is told of task t at key, added or updated.
func (s *Shadow) taskChanged(key string, t *troupev1.Task) {
	if !s.serves(t) {
		return
	}
	job := jobOf(t)
	s.mu.Lock()
	r := s.jobs[job]
	machine := t.GetBinding().GetMachine()
	queue := false
	switch {
	case clientlib.Pending(t):
		if r == nil {
			r = &shadowJob{undecided: map[string]*seenTask{}, outstanding: map[string]*tracked{}}
			s.jobs[job] = r
		}
		if seen, ok := r.undecided[key]; ok && seen.task.GetMetadata().GetVersion() >= t.GetMetadata().GetVersion() {
			break // an older event (a relist)
		}
		if tr, ok := r.outstanding[key]; ok {
			if tr.version >= t.GetMetadata().GetVersion() {
				break
			}
			delete(r.outstanding, key) // pending again at a new version before the real outcome was seen: decided about afresh
		}
		r.undecided[key] = &seenTask{task: t}
		queue = true
	case r == nil:
	case machine != "":
		if seen, ok := r.undecided[key]; ok {
			seen.real = machine // compared once decided about
			queue = true
		} else if tr, ok := r.outstanding[key]; ok {
			delete(r.outstanding, key)
			s.resolve(tr, machine)
		}
	default: // finished unbound: stopped, abandoned
		s.goneLocked(r, key)
	}
	s.forgetIfDone(job, r)
	s.mu.Unlock()
	if queue {
		s.queue.Add(job)
	}
}

// taskGone is told that task t at key is deleted.
func (s *Shadow) taskGone(key string, t *troupev1.Task) {
	if !s.serves(t) {
		return
	}
	job := jobOf(t)
	s.mu.Lock()
	if r := s.jobs[job]; r != nil {
		s.goneLocked(r, key)
		s.forgetIfDone(job, r)
	}
	s.mu.Unlock()
}

// goneLocked settles task key of r, deleted or finished without a
// binding: not to be decided about unless a real scheduler placed it
// first (then it is, to compare); a decision awaiting the real outcome
// has it: the real schedulers never placed the task. s.mu is held.
func (s *Shadow) goneLocked(r *shadowJob, key string) {
	if seen, ok := r.undecided[key]; ok && seen.real == "" {
		delete(r.undecided, key)
	}
	if tr, ok := r.outstanding[key]; ok {
		delete(r.outstanding, key)
		s.resolve(tr, "")
	}
}

// forgetIfDone drops r, job's record, once nothing of it is left. s.mu
// is held.
func (s *Shadow) forgetIfDone(job string, r *shadowJob) {
	if r != nil && len(r.undecided) == 0 && len(r.outstanding) == 0 {
		delete(s.jobs, job)
	}
}

// resolve counts what became of a task decided about: real is where a
// real scheduler placed it ("": nowhere, the task is gone). s.mu is held.
func (s *Shadow) resolve(tr *tracked, real string) {
	out := agreementOf(tr.machine, real)
	s.stats.agreed(out)
	if tr.rec != nil {
		s.stats.complete(tr.rec, tr.unfit, tr.idx, real, out)
	}
}

// agreementOf is the outcome of a task the shadow placed on shadow ("":
// nowhere) and a real scheduler on real ("": nowhere, and it is gone).
func agreementOf(shadow, real string) Agreement {
	switch {
	case shadow != "" && shadow == real:
		return SameMachine
	case shadow != "" && real != "":
		return Elsewhere
	case shadow != "":
		return OnlyShadow
	case real != "":
		return OnlyReal
	}
	return Neither
}

// episode is the tasks of a job the shadow decides about at once: those
// seen pending and not decided about yet, each as last seen pending, in
// index order.
type episode struct {
	tasks []*framework.Task
}

// decideJob decides about the job's tasks seen pending and not decided
// about yet, once: evaluates the plan, records it, and awaits the real
// outcome of each task.
func (s *Shadow) decideJob(ctx context.Context, job string) {
	ep, ok := s.episode(job)
	if !ok {
		return
	}
	s.mu.Lock()
	r := s.jobs[job]
	s.mu.Unlock()
	if r == nil || s.cfg.Policy.Begin(&r.st, len(ep.tasks), s.gangComplete(job, ep)) != Decide {
		return // Hold: the gang's other members are not there yet; their creation queues the job
	}
	start := s.clock.Now()
	snap, own := s.snapshot(job, ep)
	plan := framework.Schedule(s.cfg.Profile, snap, ep.tasks)
	if s.cfg.Modes.Txn.GangRule() && len(plan.Failures) > 0 {
		gang := &framework.Plan{Failures: make([]framework.Failure, len(ep.tasks)), Examined: plan.Examined, StaticHits: plan.StaticHits}
		for i, t := range ep.tasks {
			gang.Failures[i] = framework.Failure{Task: t, Status: plan.Failures[0].Status}
		}
		plan = gang
	}
	end := s.clock.Now()
	if s.beforeCommit != nil {
		s.beforeCommit(job)
	}
	var c Committer = shadowCommit{s: s, own: own}
	res, err := c.Commit(ctx, plan)
	if err != nil { // a shadow's commit does not fail; as a commit's error if it did
		s.cfg.Logger.Warn("shadow evaluation failed", zap.String("job", job), zap.Error(err))
		res = &framework.Result{}
	}
	a := s.cfg.Policy.After(&r.st, Outcome{Placed: len(res.Committed), Conflicted: len(res.Conflicted), Stopped: len(res.Stopped),
		Unfit: len(plan.Failures)})
	rec := s.record(job, ep, plan, res, a, end, end.Sub(start))
	s.settle(job, ep, rec)
	if s.cfg.Observe != nil {
		d := s.stats.copyOf(rec)
		d.Plan = plan
		s.cfg.Observe(d)
	}
}

// episode returns the job's tasks to decide about; false if none.
func (s *Shadow) episode(job string) (episode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[job]
	if r == nil || len(r.undecided) == 0 {
		return episode{}, false
	}
	var ep episode
	for key, seen := range r.undecided {
		ep.tasks = append(ep.tasks, framework.NewTask(key, seen.task))
	}
	slices.SortFunc(ep.tasks, func(a, b *framework.Task) int {
		return cmp.Or(cmp.Compare(a.Task.GetSpec().GetIndex(), b.Task.GetSpec().GetIndex()), cmp.Compare(a.Key, b.Key))
	})
	return ep, true
}

// gangComplete reports whether a gang job has at least gang_min members
// pending or bound (as Scheduler.gangComplete, the episode's tasks
// counting as pending).
func (s *Shadow) gangComplete(job string, ep episode) bool {
	min := ep.tasks[0].Task.GetSpec().GetGangMin()
	if min <= 0 {
		return true
	}
	members := len(ep.tasks)
	in := map[string]bool{}
	for _, t := range ep.tasks {
		in[t.Key] = true
	}
	for _, key := range s.tasks.Indexer().IndexKeys(clientlib.IndexJob, job) {
		if t, ok := s.tasks.Indexer().Get(key); ok && !in[key] && t.GetBinding().GetMachine() != "" {
			members++
		}
	}
	return int32(members) >= min
}

// snapshot builds the decision's view of the cell as if the shadow were
// in charge: the machines from the cell view, the job's tasks per
// machine, and, on the machines where a real scheduler has bound tasks of
// the episode already, the cell without them: their requests are given
// back, and they count neither as the job's tasks nor as tasks to
// preempt. own is what they take, by machine and counter ("claims": how
// many), as the cache shows them now.
func (s *Shadow) snapshot(job string, ep episode) (*framework.Snapshot, map[string]map[string]int64) {
	in := map[string]bool{}
	for _, t := range ep.tasks {
		in[t.Key] = true
	}
	jobTasks := map[string]int{}
	for _, key := range s.tasks.Indexer().IndexKeys(clientlib.IndexJob, job) {
		if t, ok := s.tasks.Indexer().Get(key); ok && t.GetBinding().GetMachine() != "" && !in[key] {
			jobTasks[t.GetBinding().GetMachine()]++
		}
	}
	snap := s.view.Snapshot(jobTasks, job)
	own := s.ownPlacements(ep.tasks)
	if len(own) > 0 {
		snap.MaxFree = nil // room given back: the bound is no longer one
		for _, m := range slices.Sorted(maps.Keys(own)) {
			i, ok := s.view.Index(m)
			if !ok || i >= len(snap.Machines) || snap.Machines[i].Name != m {
				continue
			}
			c := *snap.Machines[i]
			c.Allocated = withoutOwn(c.Allocated, own[m])
			c.Flatten()
			snap.Machines[i] = &c
			snap.Rooms[i] = framework.RoomOf(&c)
		}
	}
	if s.cfg.Profile.Preempt {
		snap.Running = func(machine string) []*framework.Running {
			var out []*framework.Running
			for _, t := range s.tasks.Indexer().ByIndex(clientlib.IndexMachine, machine) {
				key, err := clientlib.Tasks.Key(t)
				if err != nil || in[key] {
					continue
				}
				ft := framework.NewTask(key, t)
				out = append(out, &framework.Running{Key: key, Task: t, Job: ft.Job, Priority: ft.Priority, Requests: ft.Requests})
			}
			return out
		}
	}
	return snap, own
}

// ownPlacements returns what those of tasks that the cache shows bound
// take, by machine and counter: their requests, and under "claims" how
// many they are.
func (s *Shadow) ownPlacements(tasks []*framework.Task) map[string]map[string]int64 {
	own := map[string]map[string]int64{}
	for _, t := range tasks {
		cur, ok := s.tasks.Indexer().Get(t.Key)
		m := cur.GetBinding().GetMachine()
		if !ok || m == "" {
			continue
		}
		if own[m] == nil {
			own[m] = map[string]int64{}
		}
		for r, q := range cur.GetSpec().GetTemplate().GetRequests() {
			own[m][r] += q
		}
		own[m][clientlib.ClaimsCounter]++
	}
	return own
}

// withoutOwn returns alloc less own, never below zero (the counters and
// the tasks come by separate watches: the cache may show a task bound
// before the counters it took), for the counters alloc has.
func withoutOwn(alloc, own map[string]int64) map[string]int64 {
	out := maps.Clone(alloc)
	for r, q := range own {
		if v, ok := out[r]; ok {
			out[r] = max(v-q, 0)
		}
	}
	return out
}

// record makes the decision's record and counts it.
func (s *Shadow) record(job string, ep episode, plan *framework.Plan, res *framework.Result, a Action, at time.Time,
	took time.Duration) *ShadowDecision {
	rec := &ShadowDecision{Job: job, Time: at, Duration: took, Seconds: took.Seconds(), Tasks: len(ep.tasks), Action: a.Step.String()}
	conflicts := map[string]string{}
	for _, c := range res.Conflicted {
		conflicts[c.Placement.Task.Key] = c.Conflict.Message
	}
	stopped := map[string]bool{}
	for _, p := range res.Stopped {
		stopped[p.Task.Key] = true
	}
	for _, p := range plan.Placements {
		rec.Placements = append(rec.Placements, ShadowPlacement{Task: p.Task.Key, Machine: p.Machine.Name,
			Conflict: conflicts[p.Task.Key], Stopped: stopped[p.Task.Key]})
	}
	for _, f := range plan.Failures {
		rec.Unplaced = append(rec.Unplaced, ShadowPlacement{Task: f.Task.Key})
	}
	if len(plan.Failures) > 0 {
		rec.Reason = explanation(plan.Failures[0].Status)
	}
	rec.Conflicts = len(res.Conflicted)
	s.stats.decided(rec, len(res.Stopped))
	return rec
}

// settle moves the episode's tasks from undecided to awaiting their real
// outcome, or compares at once those a real scheduler has bound already.
// A task changed meanwhile (pending at a new version) stays undecided,
// for the next decision.
func (s *Shadow) settle(job string, ep episode, rec *ShadowDecision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[job]
	if r == nil {
		return
	}
	version := map[string]uint64{}
	for _, t := range ep.tasks {
		version[t.Key] = t.Task.GetMetadata().GetVersion()
	}
	track := func(key, machine string, unfit bool, idx int, stopped bool) {
		seen, ok := r.undecided[key]
		if !ok || seen.task.GetMetadata().GetVersion() != version[key] {
			return // gone meanwhile (settled by goneLocked), or pending anew
		}
		delete(r.undecided, key)
		tr := &tracked{version: version[key], machine: machine, rec: rec, unfit: unfit, idx: idx}
		switch {
		case seen.real != "":
			s.resolve(tr, seen.real)
		case stopped:
			s.resolve(tr, "")
		default:
			r.outstanding[key] = tr
		}
	}
	for i, p := range rec.Placements {
		track(p.Task, p.Machine, false, i, p.Stopped)
	}
	for i, p := range rec.Unplaced {
		track(p.Task, "", true, i, false)
	}
	s.forgetIfDone(job, r)
}

// Outstanding is how many tasks the shadow decided about whose real
// outcome it has not seen yet (still pending in the cell).
func (s *Shadow) Outstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.jobs {
		n += len(r.outstanding)
	}
	return n
}

// tracking is how many jobs and tasks the shadow keeps records of.
func (s *Shadow) tracking() (jobs, tasks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.jobs {
		tasks += len(r.outstanding) + len(r.undecided)
	}
	return len(s.jobs), tasks
}
