package ui

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// Reader is what the aggregator needs of a store: lists and watches, as
// a scheduler's cell cache or a shadow does. A client with a viewer's
// certificate is enough.
type Reader = scheduler.Reader

// topic is a part of the cell a page may show; each has a version that
// moves on every change to it.
type topic int

const (
	topicMachines   topic = iota // machines and their counters
	topicLeases                  // machines' leases
	topicJobs                    // jobs and their JobSchedulings
	topicTasks                   // tasks
	topicSchedulers              // schedulers' records
	topicEvents                  // jobs' and machines' events
	numTopics
)

// versions are the topics' versions.
type versions [numTopics]uint64

// Index names of the aggregator's informers.
const (
	indexPhase     = "phase"     // jobs by phase
	indexPending   = "pending"   // jobs with pending tasks, by scheduler kind
	indexSource    = "source"    // events by source
	indexSays      = "says"      // JobSchedulings by scheduler instance
	indexConflicts = "conflicts" // schedulers' Conflict events, by job
)

// Aggregator follows the cell through informers and keeps what the
// pages show: the informers' caches (tasks without their commands) and
// compact aggregates kept up to date by the informers' handlers. Its
// methods may be called concurrently.
type Aggregator struct {
	cfg      Config
	machines *cache.Informer[*troupev1.Machine]
	leases   *cache.Informer[*troupev1.Lease]
	counters *cache.Informer[*troupev1.Counter]
	jobs     *cache.Informer[*troupev1.Job]
	tasks    *cache.Informer[*troupev1.Task]
	scheds   *cache.Informer[*troupev1.SchedulerInfo]
	says     *cache.Informer[*troupev1.JobScheduling]
	events   *cache.Informer[*troupev1.Event]
	mevents  *cache.Informer[*troupev1.Event]

	mu      sync.Mutex
	ver     versions
	changed chan struct{} // closed at the next change
	synced  bool
	// syncedCh is closed once every informer has listed.
	syncedCh chan struct{}
	// slots are the machines by name; order is them sorted by name, the
	// grid's order, rebuilt when one comes or goes (gen counts that).
	slots      map[string]*slot
	order      []*slot
	orderDirty bool
	gen        uint64
	// alloc are the machines' counters: machine → resource → amount.
	alloc map[string]map[string]int64
	// leaseEnds are when the machines' leases run out.
	leaseEnds map[string]time.Time
	jobPhases map[troupev1.JobPhase]int
	// jobFacts are what the cell page sorts jobs by, by key: sorting by
	// them reads no job from the informer, which decodes on every read.
	jobFacts   map[string]jobFacts
	taskPhases map[troupev1.TaskPhase]int
	schedulers map[string]*track
}

// jobFacts is what the cell page's job list sorts by (jobSorts).
type jobFacts struct {
	created         time.Time
	pending, failed int32
}

// slot is what the grid knows of a machine: the grid and the cell's
// totals read every machine's, and copying its counters and lease here
// spares them three map lookups a machine.
type slot struct {
	name               string
	cpuCap, memCap     int64
	cpuAlloc, memAlloc int64
	leaseEnd           time.Time
	phase              troupev1.MachinePhase
	cordoned           bool
}

// NewAggregator returns the aggregator of the cell s holds; Run it.
func NewAggregator(s Reader, cfg Config) (*Aggregator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Aggregator{cfg: cfg, changed: make(chan struct{}), syncedCh: make(chan struct{}), slots: map[string]*slot{}, alloc: map[string]map[string]int64{},
		leaseEnds: map[string]time.Time{}, jobPhases: map[troupev1.JobPhase]int{}, jobFacts: map[string]jobFacts{}, taskPhases: map[troupev1.TaskPhase]int{},
		schedulers: map[string]*track{}}
	a.machines = follow(s, cfg, clientlib.Machines.Prefix, decodeAs(clientlib.Machines), nil)
	a.leases = follow(s, cfg, clientlib.Leases.Prefix, decodeAs(clientlib.Leases), nil)
	a.counters = follow(s, cfg, clientlib.AllocPrefix, clientlib.DecodeCounter, nil)
	a.jobs = follow(s, cfg, clientlib.Jobs.Prefix, decodeAs(clientlib.Jobs), map[string]cache.IndexFunc[*troupev1.Job]{
		indexPhase: func(j *troupev1.Job) []string { return []string{jobPhase(j).String()} },
		indexPending: func(j *troupev1.Job) []string {
			if j.GetStatus().GetPending() == 0 {
				return nil
			}
			return []string{j.GetSpec().GetScheduler()}
		},
	})
	a.tasks = follow(s, cfg, clientlib.Tasks.Prefix, decodeTask, clientlib.TaskIndexes())
	a.scheds = follow(s, cfg, clientlib.Schedulers.Prefix, decodeAs(clientlib.Schedulers), nil)
	a.says = follow(s, cfg, clientlib.JobSchedulings.Prefix, decodeAs(clientlib.JobSchedulings), map[string]cache.IndexFunc[*troupev1.JobScheduling]{
		indexSays: func(j *troupev1.JobScheduling) []string { return []string{j.GetStatus().GetScheduler()} },
	})
	bySource := func(e *troupev1.Event) []string { return []string{e.GetSource()} }
	a.events = follow(s, cfg, clientlib.Events.Prefix, decodeAs(clientlib.Events), map[string]cache.IndexFunc[*troupev1.Event]{
		clientlib.IndexJob: func(e *troupev1.Event) []string { return []string{e.GetMetadata().GetNamespace() + "/" + e.GetJob()} },
		indexSource:        bySource,
		indexConflicts: func(e *troupev1.Event) []string {
			if e.GetReason() != "Conflict" {
				return nil
			}
			return []string{e.GetMetadata().GetNamespace() + "/" + e.GetJob()}
		},
	})
	a.mevents = follow(s, cfg, clientlib.MachineEvents.Prefix, decodeAs(clientlib.MachineEvents), map[string]cache.IndexFunc[*troupev1.Event]{
		clientlib.IndexMachine: func(e *troupev1.Event) []string { return []string{e.GetInvolvedName()} },
	})
	a.handle()
	return a, nil
}

// follow is an informer of the keys under prefix, decoded by decode.
func follow[T cache.Object](s Reader, cfg Config, prefix string, decode func(string, []byte, uint64) (T, error), indexes map[string]cache.IndexFunc[T]) *cache.Informer[T] {
	return cache.NewInformer(cache.InformerConfig[T]{Prefix: prefix, List: s.List, Watch: s.WatchStream, IsCompacted: clientlib.IsCompacted,
		Decode: decode, Indexes: indexes, Logger: cfg.Logger})
}

// decodeAs decodes values of kind k as every reader does (DecodeAt).
func decodeAs[T clientlib.Object](k clientlib.Kind[T]) func(string, []byte, uint64) (T, error) {
	return func(key string, value []byte, version uint64) (T, error) {
		return clientlib.DecodeAt(k, key, value, version)
	}
}

// decodeTask decodes a task, keeping of its template only the requests
// and dropping its constraints: no page shows them, and the handlers and
// pages handle smaller objects.
func decodeTask(key string, value []byte, version uint64) (*troupev1.Task, error) {
	t, err := clientlib.DecodeAt(clientlib.Tasks, key, value, version)
	if err != nil {
		return nil, err
	}
	if spec := t.GetSpec(); spec != nil {
		spec.Template = &troupev1.TaskTemplate{Requests: spec.GetTemplate().GetRequests()}
		spec.Constraints, spec.Tolerations = nil, nil
	}
	return t, nil
}

// on registers the same change handler for adds, updates and deletes
// (old is nil for an add, cur for a delete) under the aggregator's lock,
// bumping t.
func on[T cache.Object](a *Aggregator, inf *cache.Informer[T], t topic, f func(key string, old, cur T)) {
	var zero T
	locked := func(key string, old, cur T) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if f != nil {
			f(key, old, cur)
		}
		a.bump(t)
	}
	inf.AddHandler(cache.Handler[T]{
		OnAdd:    func(key string, obj T) { locked(key, zero, obj) },
		OnUpdate: func(key string, old, cur T) { locked(key, old, cur) },
		OnDelete: func(key string, old T) { locked(key, old, zero) },
	})
}

// handle wires the informers' handlers to the aggregates.
func (a *Aggregator) handle() {
	on(a, a.machines, topicMachines, func(_ string, old, cur *troupev1.Machine) {
		if cur == nil {
			delete(a.slots, old.GetMetadata().GetName())
			a.orderDirty = true
			return
		}
		name := cur.GetMetadata().GetName()
		s, ok := a.slots[name]
		if !ok {
			s = &slot{name: name, cpuAlloc: a.alloc[name]["cpu"], memAlloc: a.alloc[name]["memory"], leaseEnd: a.leaseEnds[name]}
			a.slots[name] = s
			a.orderDirty = true
		}
		capacity := cur.GetSpec().GetCapacity()
		s.cpuCap, s.memCap = capacity["cpu"], capacity["memory"]
		s.phase, s.cordoned = cur.GetStatus().GetPhase(), cur.GetSpec().GetUnschedulable()
	})
	on(a, a.counters, topicMachines, func(key string, _, cur *troupev1.Counter) {
		machine, resource, _ := strings.Cut(strings.TrimPrefix(key, clientlib.AllocPrefix), "/")
		if clientlib.IsClaimsKey(key) {
			return
		}
		var v int64
		if cur == nil {
			delete(a.alloc[machine], resource)
			if len(a.alloc[machine]) == 0 {
				delete(a.alloc, machine)
			}
		} else {
			if a.alloc[machine] == nil {
				a.alloc[machine] = map[string]int64{}
			}
			v = cur.GetValue()
			a.alloc[machine][resource] = v
		}
		if s, ok := a.slots[machine]; ok {
			switch resource {
			case "cpu":
				s.cpuAlloc = v
			case "memory":
				s.memAlloc = v
			}
		}
	})
	on(a, a.leases, topicLeases, func(_ string, old, cur *troupev1.Lease) {
		var end time.Time
		if cur == nil {
			delete(a.leaseEnds, old.GetMetadata().GetName())
		} else {
			end = cur.GetRenewed().AsTime().Add(cur.GetDuration().AsDuration())
			a.leaseEnds[cur.GetMetadata().GetName()] = end
		}
		if s, ok := a.slots[cmp.Or(cur, old).GetMetadata().GetName()]; ok {
			s.leaseEnd = end
		}
	})
	on(a, a.jobs, topicJobs, func(key string, old, cur *troupev1.Job) {
		if old != nil {
			a.jobPhases[jobPhase(old)]--
			delete(a.jobFacts, key)
		}
		if cur != nil {
			a.jobPhases[jobPhase(cur)]++
			a.jobFacts[key] = jobFacts{created: cur.GetMetadata().GetCreated().AsTime(), pending: cur.GetStatus().GetPending(), failed: cur.GetStatus().GetFailed()}
		}
	})
	on(a, a.says, topicJobs, nil)
	on(a, a.tasks, topicTasks, func(_ string, old, cur *troupev1.Task) {
		if old != nil {
			a.taskPhases[taskPhase(old)]--
		}
		if cur == nil {
			return
		}
		a.taskPhases[taskPhase(cur)]++
		b := cur.GetBinding()
		if b.GetMachine() == "" || b.GetScheduler() == "" || !b.GetBoundAt().IsValid() || !cur.GetSpec().GetSubmitted().IsValid() ||
			old != nil && proto.Equal(old.GetBinding().GetBoundAt(), b.GetBoundAt()) {
			return
		}
		if wait := b.GetBoundAt().AsTime().Sub(cur.GetSpec().GetSubmitted().AsTime()); wait >= 0 {
			a.track(b.GetScheduler()).waits.add(wait)
		}
	})
	on(a, a.scheds, topicSchedulers, func(_ string, old, cur *troupev1.SchedulerInfo) {
		if cur == nil {
			delete(a.schedulers, old.GetMetadata().GetName())
			return
		}
		tr := a.track(cur.GetMetadata().GetName())
		tr.info = cur
		tr.samples.add(sampleOf(cur), a.cfg.Window)
	})
	on(a, a.events, topicEvents, nil)
	on(a, a.mevents, topicEvents, nil)
}

// track returns scheduler name's track, made on first use (a task bound
// by a scheduler whose record is not in yet).
func (a *Aggregator) track(name string) *track {
	tr, ok := a.schedulers[name]
	if !ok {
		tr = newTrack()
		a.schedulers[name] = tr
	}
	return tr
}

// bump moves topic t on and wakes whoever waits for a change; a.mu is
// held.
func (a *Aggregator) bump(t topic) {
	a.ver[t]++
	close(a.changed)
	a.changed = make(chan struct{})
}

// Run follows the cell until ctx ends, and returns ctx's error.
func (a *Aggregator) Run(ctx context.Context) error {
	if err := cache.Start(ctx, a.machines, a.leases, a.counters, a.jobs, a.tasks, a.scheds, a.says, a.events, a.mevents); err != nil {
		return err
	}
	a.mu.Lock()
	a.synced = true
	for t := range numTopics {
		a.bump(t)
	}
	a.mu.Unlock()
	close(a.syncedCh)
	<-ctx.Done()
	return ctx.Err()
}

// WaitForSync returns once every informer has listed its part of the
// cell and the pages say so, or ctx ends.
func (a *Aggregator) WaitForSync(ctx context.Context) error {
	select {
	case <-a.syncedCh:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ui: the cell is not read yet: %w", ctx.Err())
	}
}

// Synced reports whether every informer has listed its part of the cell.
func (a *Aggregator) Synced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.synced
}

// changes returns the topics' versions now and a channel closed at the
// next change.
func (a *Aggregator) changes() (versions, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ver, a.changed
}

// sortedSlots returns the machines in the grid's order and its
// generation; a.mu is held.
func (a *Aggregator) sortedSlots() ([]*slot, uint64) {
	if a.orderDirty {
		a.order = a.order[:0]
		for _, s := range a.slots {
			a.order = append(a.order, s)
		}
		slices.SortFunc(a.order, func(x, y *slot) int { return strings.Compare(x.name, y.name) })
		a.orderDirty = false
		a.gen++
	}
	return a.order, a.gen
}

// jobPhase is a job's phase, PENDING before the controller says.
func jobPhase(j *troupev1.Job) troupev1.JobPhase {
	if p := j.GetStatus().GetPhase(); p != troupev1.JobPhase_JOB_PHASE_UNSPECIFIED {
		return p
	}
	return troupev1.JobPhase_JOB_PHASE_PENDING
}

// taskPhase is a task's phase, PENDING before anyone says.
func taskPhase(t *troupev1.Task) troupev1.TaskPhase {
	if p := t.GetStatus().GetPhase(); p != troupev1.TaskPhase_TASK_PHASE_UNSPECIFIED {
		return p
	}
	return troupev1.TaskPhase_TASK_PHASE_PENDING
}
