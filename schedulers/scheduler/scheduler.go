// Package scheduler runs one scheduler instance in a cell, Omega style:
// it keeps its view of the cell in caches fed by watch, takes the pending
// tasks of the jobs it serves, decides with its framework profile, and
// commits one request per job straight to the store. What happens to a
// job after each decision (retry, wait, back off, abandon) is the Policy,
// which the simulator runs too: conflicting placements are refreshed and
// retried, a bounded number of times; tasks that fit nowhere wait, and
// are tried again when a change in the cell makes room for them.
//
//	caches (machines, tasks, counters) ──► job queue ──► decide ──► commit
//	        ▲                                              │ conflicts
//	        └───────────── watch ◄── store ◄───────────────┘
package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Config configures one scheduler instance.
type Config struct {
	// Name is the instance's name ("batch-0"), written into the bindings
	// it makes and its /schedulers/<name> record.
	Name string
	// Kind selects the jobs served: those whose spec.scheduler is Kind.
	Kind string
	// Partitions > 1 splits the jobs of Kind among instances by a hash of
	// the job; this instance takes Partition. 0 or 1: all jobs (instances
	// of one kind then compete for the same tasks).
	Partition, Partitions int
	Profile               framework.Profile
	Modes                 framework.Modes
	// Policy decides what happens to a job after each decision.
	Policy Policy
	// PublishInterval is how often the /schedulers/<name> record is
	// written (0: never).
	PublishInterval time.Duration
	// Cache is the process's shared cell cache; nil: the instance keeps
	// and runs its own.
	Cache *CellCache
	// Events records what the instance did to jobs and tasks (Scheduled,
	// Conflict, FailedScheduling, Preempted) and the values of its caches
	// it skipped as unreadable (Unreadable); nil: nothing is recorded.
	Events *clientlib.EventRecorder
	// Commits, if set, takes the instance's placement commits instead of
	// the client (a proxy, or a test's fault injection).
	Commits clientlib.Store
	// Observe, if set, is called after each commit of a job's plan, from
	// the instance's goroutine, with what was decided and what happened
	// (for traces and tests).
	Observe func(Decision)
	// Clock is the instance's time (nil: the wall clock); a test or a
	// virtual-time driver injects its own.
	Clock  cache.Clock
	Logger *zap.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	return validateInstance("scheduler", c.Name, c.Kind, c.Partition, c.Partitions, c.Policy, c.Logger)
}

// validateInstance checks what an instance and a shadow are configured
// with alike; what names the one checked in the errors.
func validateInstance(what, name, kind string, partition, partitions int, policy Policy, log *zap.Logger) error {
	var errs []error
	if name == "" || kind == "" {
		errs = append(errs, fmt.Errorf("%s: Name and Kind are required", what))
	}
	if partitions > 1 && (partition < 0 || partition >= partitions) {
		errs = append(errs, fmt.Errorf("%s: Partition %d outside [0, %d)", what, partition, partitions))
	}
	errs = append(errs, policy.Validate())
	if log == nil {
		errs = append(errs, fmt.Errorf("%s: Logger is required", what))
	}
	return errors.Join(errs...)
}

// Scheduler is one running instance.
type Scheduler struct {
	cfg   Config
	c     clientlib.Store
	cache *CellCache
	// ownCache: the instance runs its cache itself.
	ownCache bool
	tasks    *cache.Informer[*troupev1.Task] // = cache.tasks
	view     *MachineView                    // = cache.view
	queue    *cache.WorkQueue
	// committer commits the instance's plans (storeCommitter).
	committer Committer
	stats     *Stats
	clock     cache.Clock
	started   time.Time // by clock
	// changed is signalled (without blocking) whenever the caches apply
	// a change, for a retry waiting to see what a conflict reported.
	changed chan struct{}

	mu      sync.Mutex
	assumed map[string]map[string]assumed // by job and task key: placements the cache may not show yet
	jobs    map[string]*jobRecord         // jobs decided about, until they are done
	waits   uint64                        // waits begun, to wake jobs in the order they began waiting
}

// jobRecord is what the instance keeps of a job between decisions: the
// policy's state; while the job waits for room, the shapes of its tasks
// that fit nowhere; and what it last said of the job (see tell).
type jobRecord struct {
	st      JobState
	waiting *Waiting  // nil: not waiting
	since   uint64    // the wait's number (Scheduler.waits)
	until   time.Time // the wait's back-off ends
	// said is what the job's JobScheduling says as the instance last
	// wrote or read it (nil: none); stored, the object itself (nil: none,
	// or not known after a failed write), for the version of the next
	// write; sure, that the object still says so: false until the
	// instance knows, and again once the job gets new tasks (it may be
	// another job of the same name).
	said   *troupev1.SchedulingStatus
	stored *troupev1.JobScheduling
	sure   bool
}

// Decision is one commit of a job's plan: the attempt (from 1 in a
// decision round), the plan, the commit's result, and what the policy
// made of it.
type Decision struct {
	Job     string
	Attempt int
	Plan    *framework.Plan
	Result  *framework.Result
	Action  Action
}

// assumed is a placement this instance committed: the task's version it
// wrote and its machine.
type assumed struct {
	version uint64
	machine string
}

// New returns a scheduler over store c: a *clientlib.Client in a cell,
// a memstore in tests.
func New(c clientlib.Store, cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = cache.RealClock
	}
	cc, own := cfg.Cache, cfg.Cache == nil
	if own {
		cc = NewCellCache(c, cfg.Logger)
	}
	qc := cache.DefaultQueueConfig()
	qc.Clock = cfg.Clock
	s := &Scheduler{cfg: cfg, c: c, cache: cc, ownCache: own, tasks: cc.tasks, view: cc.view,
		queue: cache.NewWorkQueue(qc), stats: newStats(cfg.Clock.Now()), clock: cfg.Clock, started: cfg.Clock.Now(),
		changed: make(chan struct{}, 1), assumed: map[string]map[string]assumed{}, jobs: map[string]*jobRecord{}}
	s.committer = storeCommitter{store: s.commits(), modes: cfg.Modes, name: cfg.Name, clock: cfg.Clock}
	// What the shared caches skip as unreadable they log once; each
	// instance records it, as separate processes would.
	cc.tasks.AddHandler(cache.Handler[*troupev1.Task]{
		OnAdd:            func(key string, t *troupev1.Task) { s.taskChanged(key, t, true) },
		OnUpdate:         func(key string, _, t *troupev1.Task) { s.taskChanged(key, t, false) },
		UpdateIgnoresOld: true,
		OnDelete:         func(_ string, t *troupev1.Task) { s.taskDeleted(t) },
		OnUnreadable:     cfg.Events.RecordUnreadable,
	})
	machineChanged := func(m *troupev1.Machine) { s.roomChanged(m.GetMetadata().GetName()) }
	cc.machines.AddHandler(cache.Handler[*troupev1.Machine]{
		OnAdd:            func(_ string, m *troupev1.Machine) { machineChanged(m) },
		OnUpdate:         func(_ string, _, m *troupev1.Machine) { machineChanged(m) },
		UpdateIgnoresOld: true,
		OnUnreadable:     cfg.Events.RecordUnreadable,
	})
	released := func(key string) {
		if machine, _, ok := allocOf(key); ok {
			s.roomChanged(machine)
		}
	}
	cc.counters.AddHandler(cache.Handler[*troupev1.Counter]{
		OnUpdate: func(key string, old, cur *troupev1.Counter) {
			if cur.GetValue() < old.GetValue() {
				released(key)
			} else {
				s.signalChanged()
			}
		},
		OnAdd:        func(string, *troupev1.Counter) { s.signalChanged() },
		OnDelete:     func(key string, _ *troupev1.Counter) { released(key) },
		OnUnreadable: cfg.Events.RecordUnreadable,
	})
	return s, nil
}

// Stats returns the instance's counters so far.
func (s *Scheduler) Stats() Snapshot { return s.stats.snapshot(s.clock.Now()) }

// WaitForSync waits until the instance's cache is filled, or ctx ends.
func (s *Scheduler) WaitForSync(ctx context.Context) error { return s.cache.WaitForSync(ctx) }

// Run schedules until ctx ends (running the instance's cache, unless it
// shares its process's).
func (s *Scheduler) Run(ctx context.Context) error {
	if s.ownCache {
		if err := s.cache.Run(ctx); err != nil {
			return err
		}
	} else if err := s.cache.WaitForSync(ctx); err != nil {
		return err
	}
	s.wakePending()
	if s.cfg.PublishInterval > 0 {
		go s.publish(ctx, s.cfg.PublishInterval)
	}
	return s.queue.Serve(ctx, func(job string) { s.scheduleJob(ctx, job) })
}

// serves reports whether this instance takes task t.
func (s *Scheduler) serves(t *troupev1.Task) bool {
	return t.GetSpec().GetScheduler() == s.cfg.Kind && s.servesJob(jobOf(t))
}

// servesJob reports whether job falls in this instance's partition.
func (s *Scheduler) servesJob(job string) bool {
	return inPartition(job, s.cfg.Partition, s.cfg.Partitions)
}

// inPartition reports whether job falls in partition of partitions
// (partitions <= 1: every job does), by a hash of the job.
func inPartition(job string, partition, partitions int) bool {
	if partitions <= 1 {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(job))
	return int(h.Sum32()%uint32(partitions)) == partition
}

func jobOf(t *troupev1.Task) string {
	return t.GetMetadata().GetNamespace() + "/" + t.GetSpec().GetJob()
}

// taskChanged is told of task t at key, added or updated.
func (s *Scheduler) taskChanged(key string, t *troupev1.Task, added bool) {
	job := jobOf(t) // for lookups only, so a short one stays on the stack; queued as a copy
	if !s.servesJob(job) {
		// Another partition's: never decided about nor placed here, so
		// nothing to forget or queue, and s.mu (held while a decision
		// reads its job's tasks) is left alone.
		s.signalChanged()
		return
	}
	s.mu.Lock()
	if a, ok := s.assumed[job][key]; ok && t.GetMetadata().GetVersion() >= a.version {
		s.forget(job, key) // the cache caught up with our placement (or what followed it)
	}
	pending := clientlib.Pending(t) && t.GetSpec().GetScheduler() == s.cfg.Kind // and in the partition (above)
	if r := s.jobs[job]; pending && r != nil {
		r.waiting = nil // a change of its tasks ends a job's wait
		r.sure = r.sure && !added
	}
	s.mu.Unlock()
	if pending {
		s.queue.Add(jobOf(t))
	}
	s.signalChanged()
}

// taskDeleted is told that task t is gone. A pending task's job that
// the instance keeps a record of is decided about again, its wait ended:
// once none of its tasks is pending, its JobScheduling goes (settled),
// without waiting for the back-off.
func (s *Scheduler) taskDeleted(t *troupev1.Task) {
	if !clientlib.Pending(t) || !s.serves(t) {
		return
	}
	s.mu.Lock()
	r := s.jobs[jobOf(t)]
	if r != nil {
		r.waiting = nil
	}
	s.mu.Unlock()
	if r != nil {
		s.queue.Add(jobOf(t))
	}
}

// signalChanged tells a retry waiting for the caches that they changed.
func (s *Scheduler) signalChanged() {
	select {
	case s.changed <- struct{}{}:
	default: // a signal is already due
	}
}

// forget drops an assumed placement; s.mu is held.
func (s *Scheduler) forget(job, key string) {
	delete(s.assumed[job], key)
	if len(s.assumed[job]) == 0 {
		delete(s.assumed, job)
	}
}

// roomChanged queues the waiting jobs that machine's change could make
// room for (Wakes), ahead of their back-off.
func (s *Scheduler) roomChanged(machine string) {
	m := s.view.Machine(machine)
	type woken struct {
		job   string
		since uint64
	}
	var wake []woken
	s.mu.Lock()
	for job, r := range s.jobs {
		if r.waiting != nil && Wakes(s.cfg.Profile, *r.waiting, m) {
			r.waiting = nil
			wake = append(wake, woken{job, r.since})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(wake, func(a, b woken) int { return cmp.Compare(a.since, b.since) })
	for _, w := range wake {
		s.queue.Add(w.job)
	}
	s.signalChanged()
}

// wakePending queues every job with pending tasks this instance serves.
func (s *Scheduler) wakePending() {
	for _, key := range s.tasks.Indexer().IndexKeys(clientlib.IndexScheduler, s.cfg.Kind) {
		// /tasks/<namespace>/<job>/<index>
		parts := strings.Split(strings.TrimPrefix(key, clientlib.Tasks.Prefix), "/")
		if len(parts) == 3 {
			if job := parts[0] + "/" + parts[1]; s.servesJob(job) {
				s.queue.Add(job)
			}
		}
	}
}
