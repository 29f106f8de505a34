package cell

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/controllers/gc"
	"github.com/troupe-cluster/troupe/controllers/job"
	nodectl "github.com/troupe-cluster/troupe/controllers/node"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// Roles runs the scheduler and controller roles of a cell against its
// store, in the background until ctx ends: `troupe up` runs them beside
// an embedded store, `troupe scheduler` and `troupe controller` on their
// own. Their metrics go to the registry given to NewRoles.
type Roles struct {
	// Schedulers by name.
	Schedulers map[string]*scheduler.Scheduler

	ctx       context.Context
	newClient NewClient
	log       *zap.Logger
	errc      chan error
	metrics   *collectors

	// shared: a client per role, shared by the role's caches,
	// controllers and event recorders (each scheduler instance commits
	// through its own); closed by Close.
	mu     sync.Mutex
	shared map[string]*clientlib.Client
}

// NewClient makes a client presenting the identity of role (a pki role:
// scheduler, controller); a process running one role gives every client
// its one identity.
type NewClient func(role string) (*clientlib.Client, error)

// NewRoles returns the roles of a process whose clients newClient makes,
// registering their metrics with reg.
func NewRoles(ctx context.Context, newClient NewClient, reg prometheus.Registerer, log *zap.Logger) (*Roles, error) {
	r := &Roles{Schedulers: map[string]*scheduler.Scheduler{}, shared: map[string]*clientlib.Client{},
		ctx: ctx, newClient: newClient, log: log, errc: make(chan error, 64), metrics: &collectors{}}
	if err := reg.Register(r.metrics); err != nil {
		return nil, err
	}
	return r, nil
}

// client returns role's shared client.
func (r *Roles) client(role string) (*clientlib.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.shared[role]; ok {
		return c, nil
	}
	c, err := r.newClient(role)
	if err != nil {
		return nil, err
	}
	r.shared[role] = c
	return c, nil
}

// Close closes the shared clients (stop the roles first, by ending ctx).
func (r *Roles) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.shared {
		c.Close()
	}
	clear(r.shared)
}

// collectors gathers the collectors of the schedulers and recorders,
// which share descriptors (told apart by their labels), so the registry
// takes them as one unchecked collector.
type collectors struct {
	mu sync.Mutex
	cs []prometheus.Collector
}

func (c *collectors) add(x prometheus.Collector) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cs = append(c.cs, x)
}

// Describe describes nothing: the collector is unchecked.
func (c *collectors) Describe(chan<- *prometheus.Desc) {}

func (c *collectors) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	cs := slices.Clone(c.cs)
	c.mu.Unlock()
	for _, x := range cs {
		x.Collect(ch)
	}
}

// SchedulerSpec is one scheduler instance: its name, its kind (a built-in
// profile), and its share of the kind's jobs (Partitions <= 1: all of
// them; instances of one kind then compete for the same tasks).
type SchedulerSpec struct {
	Name, Kind            string
	Partition, Partitions int
}

// StartSchedulers starts scheduler instances sharing one cell cache;
// tasks that fit nowhere wait backoff.
func (r *Roles) StartSchedulers(specs []SchedulerSpec, backoff time.Duration) error {
	shared, err := r.client(pki.RoleScheduler)
	if err != nil {
		return err
	}
	cellCache := scheduler.NewCellCache(shared, r.log)
	for _, spec := range specs {
		if _, dup := r.Schedulers[spec.Name]; dup {
			return fmt.Errorf("scheduler %q twice", spec.Name)
		}
		prof, modes, err := profiles.New(spec.Kind, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
		if err != nil {
			return err
		}
		cl, err := r.newClient(pki.RoleScheduler)
		if err != nil {
			return err
		}
		events, err := r.recorder(shared, spec.Name)
		if err != nil {
			return err
		}
		s, err := scheduler.New(cl, scheduler.Config{Name: spec.Name, Kind: spec.Kind, Partition: spec.Partition, Partitions: spec.Partitions,
			Profile: prof, Modes: modes, Policy: scheduler.DefaultPolicy(backoff), PublishInterval: 5 * time.Second, Cache: cellCache,
			Events: events, Logger: r.log.With(zap.String("scheduler", spec.Name))})
		if err != nil {
			return err
		}
		r.metrics.add(s.Collector())
		r.Schedulers[spec.Name] = s
		r.run(s.Run)
	}
	r.run(cellCache.Run)
	return nil
}

// jobWorkers is how many jobs the job controller syncs at once, as
// kube-controller-manager's --concurrent-job-syncs (5 there).
const jobWorkers = 4

// StartControllers starts the job, node-lifecycle and garbage-collection
// controllers; the node controller checks leases every nodeInterval.
func (r *Roles) StartControllers(nodeInterval time.Duration) error {
	c, err := r.client(pki.RoleController)
	if err != nil {
		return err
	}
	jobEvents, err := r.recorder(c, "job-controller")
	if err != nil {
		return err
	}
	nodeEvents, err := r.recorder(c, "node-controller")
	if err != nil {
		return err
	}
	jc, err := job.New(c, job.Config{Now: time.Now, Logger: r.log, Queue: cache.DefaultQueueConfig(), Events: jobEvents, Workers: jobWorkers})
	if err != nil {
		return err
	}
	nc, err := nodectl.New(c, nodectl.Config{Now: time.Now, Interval: nodeInterval, Logger: r.log, Events: nodeEvents})
	if err != nil {
		return err
	}
	gcol, err := gc.New(c, gc.Config{Now: time.Now, Retention: time.Hour, Interval: time.Minute, Logger: r.log})
	if err != nil {
		return err
	}
	r.run(jc.Run)
	r.run(nc.Run)
	r.run(gcol.Run)
	return nil
}

// recorder returns an event recorder for source writing through c,
// running until ctx ends.
func (r *Roles) recorder(c *clientlib.Client, source string) (*clientlib.EventRecorder, error) {
	cfg := clientlib.DefaultEventRecorderConfig(source)
	cfg.Logger = r.log
	rec, err := clientlib.NewEventRecorder(c, cfg)
	if err != nil {
		return nil, err
	}
	r.metrics.add(rec.Collector())
	r.run(rec.Run)
	return rec, nil
}

// run runs f until ctx ends, reporting an early error on Errors.
func (r *Roles) run(f func(context.Context) error) {
	go func() {
		if err := f(r.ctx); err != nil && r.ctx.Err() == nil {
			r.errc <- err
		}
	}()
}

// Errors reports components that stopped with an error.
func (r *Roles) Errors() <-chan error { return r.errc }
