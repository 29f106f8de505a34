// Package storerun plays a simulator experiment (a sim.Config and a
// workload) against a real store instead of the simulator's engine in
// memory: the high-fidelity check of the simulator. The cell's machines
// are hollow node agents with the simulated runtime, the schedulers are
// real instances (schedulers/scheduler) configured like the experiment's,
// the job, node-lifecycle and garbage-collection controllers run as in a
// cell, and the workload's jobs are submitted at their submission times
// in real time, compressed by a factor (a workload that prefills the
// cell is prefilled first, as in memory: prefill.go). The measures come
// back as sim.Stats in virtual time, so that they compare with the
// in-memory run's field by field.
//
//	workload ──► submitter (Job and its Tasks, at submit/compress) ──► store ◄── job, node, gc controllers
//	                                                                    ▲ ▼
//	      schedulers (commits wait the modelled decision time) ─────────┘ └──► hollow agents (run duration/compress)
//
// Where a measure cannot be taken as the simulator takes it, the
// difference is said where it is taken (see DESIGN.md, The simulator,
// High-fidelity check).
package storerun

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/cell"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// Options say which store the experiment runs against and how fast.
type Options struct {
	// Store is the gRPC address(es) of a running store that holds no
	// machines and no jobs yet (`troupe store` on a new data directory);
	// nil: a one-node store embedded in the process, in a temporary
	// directory removed at the end.
	Store []string
	// TLS is the credentials the run presents to Store: an admin's, as the
	// run plays every role of the cell (agents, schedulers, controllers,
	// users) in one process. Nil: plaintext. The embedded store makes
	// its own.
	TLS *pki.Source
	// Shards of the embedded store (0: 1).
	Shards int
	// Compress is the virtual time one second of wall time plays: the
	// workload's submission times, task durations, decision times and
	// back-off are divided by it.
	Compress float64
	Logger   *zap.Logger
}

// Timing of the cell's own machinery, in wall time: generous leases, so
// that a busy process never loses a hollow machine.
const (
	leaseDuration   = time.Minute
	nodeInterval    = time.Second
	publishInterval = time.Second
	// namespace of the workload's jobs, as in the simulator.
	namespace = "sim"
)

// Run runs the experiment cfg with the jobs of src against the store and
// returns its measures; it has the in-memory simulator's signature
// (sim.New(cfg), then Run(ctx, src)). It ends when every job has been
// submitted and every task has ended (or runs until the end, or was
// abandoned), at cfg.Horizon of virtual time, or when ctx ends (with an
// error).
func (o Options) Run(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !(o.Compress > 0) {
		return nil, fmt.Errorf("storerun: Compress must be positive, not %v", o.Compress)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	endpoints := o.Store
	if len(endpoints) == 0 {
		dir, err := os.MkdirTemp("", "troupe-storerun-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		lc, err := localstore.Start(ctx, localstore.Config{Dir: dir, Replicas: 1, Shards: max(o.Shards, 1), Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("storerun: embedded store: %w", err)
		}
		defer lc.Close()
		endpoints = lc.Endpoints()
		if o.TLS, err = lc.Admin(); err != nil {
			return nil, err
		}
	}
	r := newRun(o, cfg, endpoints)
	defer r.close()
	return r.run(ctx, src)
}

// admitTraceJobs stores a job-limits policy that admits every job the
// built-in rules do, unless the store has one: a trace's jobs are what
// they were (Google's hold up to tens of thousands of tasks), and the
// job controller would refuse those over the default limits.
func (r *run) admitTraceJobs(ctx context.Context) error {
	_, err := clientlib.Create(ctx, r.c, clientlib.ValidationPolicies, &troupev1.ValidationPolicy{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.JobLimitsPolicy},
		Spec: &troupev1.ValidationPolicySpec{Kinds: []string{clientlib.Jobs.Name}, Rules: []*troupev1.ValidationRule{
			{Expression: "true", Message: "a replayed workload's jobs are admitted as the trace has them"}}}})
	if _, exists := errors.AsType[*clientlib.ConflictError](err); exists {
		return nil
	}
	return err
}

// run is one experiment against the store.
type run struct {
	cfg       sim.Config
	compress  float64
	log       *zap.Logger
	endpoints []string
	tls       *pki.Source
	clients   []*clientlib.Client
	c         *clientlib.Client // submissions, agents, the monitor
	instances []*instance
	// serving are the indexes of the schedulers of each job type.
	serving map[workload.Type][]int
	// capacity of every machine counter.
	capacity map[string]int64
	cpuTotal int64

	ctx  context.Context // the run's: it ends when the run does
	stop context.CancelFunc
	wg   sync.WaitGroup // everything run with goRun
	errc chan error     // the first failure
	done chan struct{}  // closed when the workload and its tasks are done

	mu sync.Mutex
	t0 time.Time // virtual time 0
	// started is closed once t0 is set.
	started chan struct{}
	// prefilled is what the workload's prefill placed (nil: none).
	prefilled *sim.PrefillStats
	*monitor
	rec  *sim.Recorder
	jobs map[string]*jobState // by "<namespace>/<name>"
	// durations of the tasks in wall time, by task reference; a task
	// without one runs until the end.
	durations map[string]time.Duration
	// deciding counts the decisions that have sent a commit and are not
	// yet reported; idle are closed when it is next 0 (see drain).
	deciding int
	idle     []chan struct{}
}

// submission is a job of the workload, written as one Job or more: its
// tasks, and those placed (and not preempted since), by task key.
type submission struct {
	submit             time.Duration
	decided, abandoned bool
	tasks              int
	placed             map[string]bool
	allPlaced          bool // none pending after a commit: its wait recorded
	// prefill: a job of the prefill, in no unscheduled jobs.
	prefill bool
}

// jobState is what the run follows of a Job.
type jobState struct {
	sched int
	of    *submission
}

func newRun(o Options, cfg sim.Config, endpoints []string) *run {
	r := &run{cfg: cfg, compress: o.Compress, log: o.Logger, endpoints: endpoints, tls: o.TLS, serving: map[workload.Type][]int{},
		capacity: map[string]int64{}, ctx: context.Background(), stop: func() {}, errc: make(chan error, 1), done: make(chan struct{}),
		started: make(chan struct{}), monitor: newMonitor(), rec: sim.NewRecorder(cfg.Schedulers), jobs: map[string]*jobState{}, durations: map[string]time.Duration{}}
	for i, sc := range cfg.Schedulers {
		r.serving[sc.Serves] = append(r.serving[sc.Serves], i)
	}
	for _, m := range cfg.Machines {
		r.cpuTotal += m.CPU
		r.capacity[clientlib.AllocKey(m.Name, "cpu")], r.capacity[clientlib.AllocKey(m.Name, "memory")] = m.CPU, m.Memory
	}
	return r
}

// newClient returns a client of the store, closed with the run.
func (r *run) newClient() (*clientlib.Client, error) {
	cc := clientlib.DefaultConfig(r.endpoints...)
	cc.Logger, cc.TLS = r.log, r.tls
	c, err := clientlib.New(cc)
	if err == nil {
		r.clients = append(r.clients, c)
	}
	return c, err
}

// close stops what runs and closes the clients.
func (r *run) close() {
	r.shutdown()
	for _, c := range r.clients {
		c.Close()
	}
}

// shutdown stops what runs and waits for it (the controllers' goroutines
// end on their own once ctx has ended).
func (r *run) shutdown() {
	r.stop()
	r.wg.Wait()
}

func (r *run) run(ctx context.Context, src workload.Source) (*sim.Stats, error) {
	var err error
	if r.c, err = r.newClient(); err != nil {
		return nil, err
	}
	if err := r.checkEmpty(ctx); err != nil {
		return nil, err
	}
	if err := r.admitTraceJobs(ctx); err != nil {
		return nil, err
	}
	r.ctx, r.stop = context.WithCancel(ctx)
	if err := r.startAgents(); err != nil {
		return nil, err
	}
	roles, err := cell.NewRoles(r.ctx, func(string) (*clientlib.Client, error) { return r.newClient() }, prometheus.NewRegistry(), r.log)
	if err != nil {
		return nil, err
	}
	if err := roles.StartControllers(nodeInterval); err != nil {
		return nil, err
	}
	if r.prefilled, err = r.prefill(r.ctx, workload.PrefillOf(src)); err != nil {
		return nil, err
	}
	if err := r.startSchedulers(); err != nil {
		return nil, err
	}
	if err := r.startMonitor(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.t0 = time.Now()
	r.last, r.cpuTime = r.t0, 0
	r.mu.Unlock()
	close(r.started)
	r.goRun(func(ctx context.Context) error { return r.submitAll(ctx, src) })

	var horizon <-chan time.Time
	if r.cfg.Horizon > 0 {
		t := time.NewTimer(r.wall(r.cfg.Horizon))
		defer t.Stop()
		horizon = t.C
	}
	done := false
	select {
	case <-r.done:
		done = true
	case <-horizon:
	case err := <-r.errc:
		return nil, err
	case err := <-roles.Errors():
		return nil, fmt.Errorf("storerun: %w", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("storerun: stopped at %v of virtual time: %w", r.now(), ctx.Err())
	}
	end := time.Now()
	if done {
		// The last placements were seen by the monitor, perhaps
		// before their schedulers had their commits' replies: their
		// decisions are reported before the run stops.
		if err := r.drain(ctx); err != nil {
			return nil, err
		}
	}
	r.shutdown()
	if done {
		// Nothing binds or releases tasks any more: the counters must
		// add up.
		if err := audit(ctx, r.c, r.capacity, namespace); err != nil {
			return nil, err
		}
	}
	return r.finish(end)
}

// begin records that a decision has sent its first commit, and end that
// it is reported (or given up).
func (r *run) begin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deciding++
}

func (r *run) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deciding--; r.deciding == 0 {
		for _, ch := range r.idle {
			close(ch)
		}
		r.idle = nil
	}
}

// drain waits until no decision that has committed is left unreported.
func (r *run) drain(ctx context.Context) error {
	r.mu.Lock()
	idle := make(chan struct{})
	if r.deciding == 0 {
		close(idle)
	} else {
		r.idle = append(r.idle, idle)
	}
	r.mu.Unlock()
	select {
	case <-idle:
		return nil
	case err := <-r.errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("storerun: stopped at %v of virtual time, waiting for the last decisions' reports: %w", r.now(), ctx.Err())
	}
}

// checkEmpty refuses a store that already holds machines or jobs: they
// would join the experiment's cell.
func (r *run) checkEmpty(ctx context.Context) error {
	for _, prefix := range []string{clientlib.Machines.Prefix, clientlib.Jobs.Prefix} {
		kvs, _, err := r.c.List(ctx, prefix)
		if err != nil {
			return fmt.Errorf("storerun: %w", err)
		}
		if len(kvs) > 0 {
			return fmt.Errorf("storerun: the store already holds %s (and %d keys under %s): give a store of its own", kvs[0].GetKey(), len(kvs), prefix)
		}
	}
	return nil
}

// goRun runs f until the run ends; an error before is the run's
// failure.
func (r *run) goRun(f func(context.Context) error) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := f(r.ctx); err != nil && r.ctx.Err() == nil {
			r.fail(err)
		}
	}()
}

// fail ends the run with err (the first failure wins).
func (r *run) fail(err error) {
	select {
	case r.errc <- fmt.Errorf("storerun: %w", err):
	default:
	}
}

// startAgents starts a hollow agent for each machine of the cell and
// waits until every machine has registered.
func (r *run) startAgents() error {
	rt := &hollow{r: r, sim: runtime.Sim{DefaultDuration: time.Duration(1<<63 - 1)}}
	for _, m := range r.cfg.Machines {
		a, err := agent.New(r.c, agent.Config{Machine: m.Name, Capacity: map[string]int64{"cpu": m.CPU, "memory": m.Memory},
			Labels: m.Labels, Runtime: rt, LeaseDuration: leaseDuration, RenewInterval: leaseDuration / 4, StopGrace: time.Second,
			Now: time.Now, Logger: r.log})
		if err != nil {
			return err
		}
		r.goRun(a.Run)
	}
	return r.awaitMachines()
}

// hollow is the hollow machines' runtime: the simulated one, each task
// running for its own duration in the workload (compressed), or until
// the end without one.
type hollow struct {
	r   *run
	sim runtime.Sim
}

// Start implements runtime.Runtime. The first run of a prefill task
// (bound by sim.PrefillScheduler, before the clock started) ends its
// duration after virtual time 0, as in the simulator; any later run of
// it, its whole duration after it starts.
func (h *hollow) Start(ctx context.Context, b *troupev1.Binding, user string) (runtime.Process, error) {
	h.r.mu.Lock()
	d, ok := h.r.durations[b.GetMetadata().GetName()]
	h.r.mu.Unlock()
	rt := h.sim
	if ok {
		b = proto.Clone(b).(*troupev1.Binding)
		b.Task.Template.SimDuration = durationpb.New(d)
		if b.GetScheduler() == sim.PrefillScheduler {
			rt.After = h.r.afterStart
		}
	}
	return rt.Start(ctx, b, user)
}

// awaitMachines waits until every machine of the cell has registered.
func (r *run) awaitMachines() error {
	return await(r, clientlib.Machines, "", len(r.cfg.Machines), "the hollow machines to register")
}

// await waits until the store holds n objects of kind k within (at
// least: it counts those added), for what.
func await[T clientlib.Object](r *run, k clientlib.Kind[T], within string, n int, what string) error {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	objects := clientlib.NewInformer(r.c, k, within, nil)
	there, seen := make(chan struct{}), map[string]bool{}
	objects.AddHandler(cache.Handler[T]{OnAdd: func(key string, _ T) {
		if seen[key] = true; len(seen) == n {
			close(there)
		}
	}})
	go objects.Run(ctx)
	select {
	case <-there:
		return nil
	case err := <-r.errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("storerun: waiting for %s: %w", what, ctx.Err())
	}
}

// startSchedulers starts an instance for each scheduler of the
// experiment, over one cell cache as in a scheduler process, and waits
// until the cache holds the cell.
func (r *run) startSchedulers() error {
	cacheClient, err := r.newClient()
	if err != nil {
		return err
	}
	cellCache := scheduler.NewCellCache(cacheClient, r.log)
	for i, sc := range r.cfg.Schedulers {
		in, err := r.newInstance(i, sc, cellCache)
		if err != nil {
			return fmt.Errorf("storerun: scheduler %s: %w", sc.Name, err)
		}
		r.instances = append(r.instances, in)
	}
	if err := cellCache.Run(r.ctx); err != nil {
		return err
	}
	for _, in := range r.instances {
		r.goRun(in.sched.Run)
	}
	return nil
}

// newInstance returns scheduler i of the experiment. Its kind is its
// name: the submitter gives each job the scheduler the simulator would,
// and no scheduler of another process takes them.
func (r *run) newInstance(i int, sc sim.SchedulerConfig, cellCache *scheduler.CellCache) (*instance, error) {
	prof, modes, err := profiles.New(sc.Kind, rand.New(rand.NewPCG(r.cfg.Seed, uint64(i))))
	if err != nil {
		return nil, err
	}
	if sc.Modes != nil {
		modes = *sc.Modes
	}
	cl, err := r.newClient()
	if err != nil {
		return nil, err
	}
	in := &instance{r: r, index: i, decision: sc.Decision, Store: cl}
	in.sched, err = scheduler.New(cl, scheduler.Config{Name: sc.Name, Kind: sc.Name, Profile: prof, Modes: modes,
		Policy: r.policy(), PublishInterval: publishInterval,
		Cache: cellCache, Commits: in, Observe: in.observe, Logger: r.log.With(zap.String("scheduler", sc.Name))})
	return in, err
}

// policy is the experiment's policy with its waits in wall time.
func (r *run) policy() scheduler.Policy {
	p := r.cfg.Policy
	for _, d := range []*time.Duration{&p.Backoff, &p.RetryBase, &p.RetryMax} {
		*d = max(r.wall(*d), time.Millisecond)
	}
	return p
}

// schedulerFor returns the scheduler that takes job, as the simulator
// chooses it: among those serving its type, by a hash of its ID.
func (r *run) schedulerFor(job workload.Job) (int, error) {
	serving := r.serving[job.Type]
	if len(serving) == 0 {
		return 0, fmt.Errorf("no scheduler serves %s job %s", job.Type, job.ID)
	}
	h := fnv.New32a()
	h.Write([]byte(job.ID))
	return serving[h.Sum32()%uint32(len(serving))], nil
}

// wall returns the wall time that virtual duration d plays in.
func (r *run) wall(d time.Duration) time.Duration { return time.Duration(float64(d) / r.compress) }

// virtual returns the virtual time of wall time t; r.mu is held.
func (r *run) virtual(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(r.t0)) * r.compress)
}

// now returns the virtual time now.
func (r *run) now() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.virtual(time.Now())
}

// sleep waits virtual duration d, or until ctx ends.
func (r *run) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.wall(d)):
		return nil
	}
}

// finish returns the run's measures, at end. Every instance has stopped:
// their own counters (what their /schedulers records publish) must agree
// with the decisions they reported.
func (r *run) finish(end time.Time) (*sim.Stats, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	unscheduled := make([]int, len(r.cfg.Schedulers))
	jobs := map[*submission]int{}
	for job := range r.unplacedJobs() {
		if js := r.jobs[job]; !js.of.prefill {
			jobs[js.of] = js.sched
		}
	}
	for _, i := range jobs {
		unscheduled[i]++
	}
	st := r.rec.Finish(r.virtual(end), unscheduled, r.utilisation(end))
	st.Prefill = r.prefilled
	for i, in := range r.instances {
		own, got := in.sched.Stats(), st.Schedulers[i]
		if own.Placements != uint64(got.Placements) || own.Conflicts != uint64(got.ConflictedPlacements) {
			return nil, fmt.Errorf("storerun: scheduler %s counted %d placements and %d conflicts, its decisions %d and %d",
				got.Name, own.Placements, own.Conflicts, got.Placements, got.ConflictedPlacements)
		}
	}
	return st, nil
}
