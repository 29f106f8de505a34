// Package agent is the node agent: it registers its machine, renews the
// machine's lease, watches only the machine's own bindings, runs what is
// bound to it through a runtime, and reports each task as a Run. It
// writes only under its machine's keys (/machines/<m>, /leases/<m>,
// /runs/<m>/...), which is what makes per-machine authorization a prefix
// rule.
//
// Each Binding is one placement of a task (its attempt, bound at its
// bound_at), and its Run names it (Run.bound_at): a preempted task keeps
// its attempt and may be placed again on the machine it was evicted from,
// at the same Run key. A binding of another placement replaces the one
// the agent runs for the task, and starts once that one has ended, so
// that the evicted placement's last report is never written after the
// new one's.
//
// Restarts are shared with the job controller. The agent restarts a
// task's process in place as the task's restart policy says (ALWAYS: after
// any exit, ON_FAILURE: after a non-zero one), with an exponential
// back-off, at most max_retries - attempt times for a batch task, and
// keeps its Run RUNNING meanwhile, counting restarts; when it gives up it
// reports the Run FAILED, and the job controller fails the task. Under
// NEVER the failed Run is reported at once and the job controller
// replaces the task by its next attempt, which comes back as a new
// binding, maybe on another machine.
//
// While the process of a task with a health check runs, the agent runs the
// check beside it (see healthChecks) and keeps its Run's healthy at
// whether the last check passed, writing the Run only when that changes;
// a process that ends leaves it unhealthy. A runtime whose processes run
// no checks (Sim: hollow machines) has the task healthy while its process
// runs.
//
// A binding whose stored value cannot be read (see clientlib.DecodeAt) is
// skipped, logged once and recorded as an Unreadable event on the
// machine; such a value at the machine's own machine, lease or run keys,
// which only the agent writes, is logged, recorded and written over.
//
// A task runs as a host user: its template's, or the agent's TaskUser.
// Before each start the agent refuses any user but TaskUser that the
// RunAsPolicy of the task's namespace (/runas/<namespace>, read then) does
// not list, and the runtime refuses root (uid 0) and users it cannot
// switch to (see runtime.Exec). A refused task is never started: the
// agent records a RunAsRefused event on its machine and reports the Run
// FAILED with the reason, without restarts.
package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Config configures an agent.
type Config struct {
	Machine  string
	Capacity map[string]int64
	Labels   map[string]string
	Taints   []*troupev1.Taint
	// LogAddr, if set, is where the agent serves its tasks' logs over HTTP
	// (GET /logs/<namespace>/<job>/<index>?stream=stdout|stderr); it is
	// registered as the machine's agent address. The runtime must keep
	// logs (see runtime.Logs).
	LogAddr string
	// TLS, if set, serves the logs over TLS 1.3 to clients with an admin
	// or viewer certificate of the cell's CA (nil: plain HTTP to anyone).
	TLS     *pki.Source
	Runtime runtime.Runtime
	// TaskUser is the host user tasks run as when their template names
	// none, which every namespace may run as; empty:
	// runtime.DefaultTaskUser() ("nobody" for an agent running as root).
	// Never root.
	TaskUser string
	// Events records the agent's events, as its machine's (an agent writes
	// only under its machine's keys); nil records none.
	Events *clientlib.EventRecorder
	// LeaseDuration is how long a renewal keeps the machine alive;
	// RenewInterval how often it is renewed (a fraction of it).
	LeaseDuration, RenewInterval time.Duration
	// StopGrace is the time between SIGTERM and SIGKILL.
	StopGrace time.Duration
	// RestartBackoff is the first back-off of in-place restarts for tasks
	// without a retry_backoff; back-offs double up to MaxRestartBackoff and
	// start again from the first after a run that lasted
	// RestartBackoffReset. Zero values are 1s, 5m and 10m (kubelet's cap
	// and reset).
	RestartBackoff, MaxRestartBackoff, RestartBackoffReset time.Duration
	// Now and After are the clock and its timer (After nil: time.After).
	Now    func() time.Time
	After  func(time.Duration) <-chan time.Time
	Logger *zap.Logger
}

// withDefaults fills in the zero restart back-offs and timer.
func (c Config) withDefaults() Config {
	if c.RestartBackoff <= 0 {
		c.RestartBackoff = time.Second
	}
	if c.MaxRestartBackoff <= 0 {
		c.MaxRestartBackoff = 5 * time.Minute
	}
	if c.RestartBackoffReset <= 0 {
		c.RestartBackoffReset = 10 * time.Minute
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.TaskUser == "" {
		c.TaskUser = runtime.DefaultTaskUser()
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Machine == "":
		return errors.New("agent: Machine is required")
	case c.Runtime == nil || c.Now == nil || c.Logger == nil:
		return errors.New("agent: Runtime, Now and Logger are required")
	case c.LeaseDuration <= 0 || c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseDuration:
		return fmt.Errorf("agent: need 0 < RenewInterval (%v) < LeaseDuration (%v)", c.RenewInterval, c.LeaseDuration)
	case c.TaskUser == "root":
		return errors.New("agent: TaskUser must not be root: tasks never run as root")
	}
	return nil
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	s        clientlib.Store
	bindings *cache.Informer[*troupev1.Binding]

	mu      sync.Mutex
	running map[string]*task // by task ref
	tasks   sync.WaitGroup   // the running tasks' goroutines
	logAddr string           // where logs are served ("" if not)
}

// New returns an agent over store s (a *clientlib.Client, or an in-memory
// store in tests and the simulator).
func New(s clientlib.Store, cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg.withDefaults(), s: s, running: map[string]*task{}}
	a.bindings = clientlib.NewInformer(s, clientlib.Bindings, cfg.Machine+"/", nil)
	return a, nil
}

// Run registers the machine, then runs its tasks until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.serveLogs(ctx); err != nil {
		return err
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	a.bindings.AddHandler(cache.Handler[*troupev1.Binding]{
		OnAdd:    func(_ string, b *troupev1.Binding) { a.start(ctx, b) },
		OnUpdate: func(_ string, _, b *troupev1.Binding) { a.start(ctx, b) },
		OnDelete: func(_ string, b *troupev1.Binding) { a.stop(b.GetMetadata().GetName()) },
		// A binding that cannot be read is skipped (after OnDelete if it
		// replaced a readable one).
		OnUnreadable: a.cfg.Events.RecordUnreadable,
	})
	go a.bindings.Run(ctx)
	t := time.NewTicker(a.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Stop the tasks and wait for them to end (a grace period at
			// most), so that no process outlives its agent.
			a.stopAll()
			a.tasks.Wait()
			return ctx.Err()
		case <-t.C:
			if err := a.renew(ctx); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("lease renewal failed", zap.Error(err))
			}
		}
	}
}

// register creates or refreshes the machine and its lease.
func (a *Agent) register(ctx context.Context) error {
	want := &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: a.cfg.Machine, Labels: a.cfg.Labels},
		Spec: &troupev1.MachineSpec{Capacity: a.cfg.Capacity, Taints: a.cfg.Taints, AgentAddress: a.logAddr}}
	// Keep what operators set (cordon) and the lifecycle status.
	if err := write(ctx, a, clientlib.Machines, want, func(cur, want *troupev1.Machine) {
		want.Spec.Unschedulable = cur.GetSpec().GetUnschedulable()
		want.Status = cur.GetStatus()
	}, nil); err != nil {
		return fmt.Errorf("agent %s: register: %w", a.cfg.Machine, err)
	}
	return a.renew(ctx)
}

// renew writes the lease with the current time.
func (a *Agent) renew(ctx context.Context) error {
	return write(ctx, a, clientlib.Leases, &troupev1.Lease{Metadata: &troupev1.ObjectMeta{Name: a.cfg.Machine}, Holder: "agent/" + a.cfg.Machine,
		Renewed: timestamppb.New(a.cfg.Now()), Duration: durationpb.New(a.cfg.LeaseDuration)}, nil, nil)
}

// write stores obj, of kind k, at its key under the agent's machine,
// which only the agent writes: it creates the object, or updates the one
// there (unless obj, with the stored metadata and what keep, if set,
// copies from it, is the same). A value there that is not a valid object,
// written by another client, is logged and recorded, and written over.
// also, if set, adds conditions to the write's group.
func write[T clientlib.Object](ctx context.Context, a *Agent, k clientlib.Kind[T], obj T, keep func(cur, obj T), also func(*clientlib.Group)) error {
	key, err := k.Key(obj)
	if err != nil {
		return err
	}
	obj = proto.Clone(obj).(T)
	tx := clientlib.NewTxn(a.s)
	g := tx.Group()
	if also != nil {
		also(g)
	}
	cur, err := clientlib.Get(ctx, a.s, k, key)
	var unreadable *clientlib.UnreadableError
	switch {
	case errors.Is(err, clientlib.ErrNotFound):
		clientlib.CreateObject(g, k, obj)
		return commit(ctx, tx)
	case errors.As(err, &unreadable):
		a.cfg.Logger.Error("agent: unreadable value written over", zap.String("key", key), zap.Uint64("version", unreadable.Version),
			zap.Error(unreadable.Err))
		a.cfg.Events.RecordUnreadable(key, fmt.Errorf("%w; written over", unreadable))
		obj.GetMetadata().Version = unreadable.Version
	case err != nil:
		return err
	default:
		proto.Reset(obj.GetMetadata())
		proto.Merge(obj.GetMetadata(), cur.GetMetadata())
		if keep != nil {
			keep(cur, obj)
		}
		if proto.Equal(cur, obj) && also == nil {
			return nil
		}
	}
	clientlib.PutObject(g, k, obj)
	return commit(ctx, tx)
}

// commit commits tx and turns failed groups into errors.
func commit(ctx context.Context, tx *clientlib.Txn) error {
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	return err
}

// report writes the Run of binding b's task (the agent is its only
// writer, so a conflict only means a concurrent report of the same task:
// read and write again).
func (a *Agent) report(ctx context.Context, b *troupev1.Binding, run *troupev1.Run) {
	a.reportIf(ctx, b, run, nil) // a lost report is logged; the lease covers it
}

// reportIf is report with the write's group conditioned by also: it
// returns the error of the last try.
func (a *Agent) reportIf(ctx context.Context, b *troupev1.Binding, run *troupev1.Run, also func(*clientlib.Group)) error {
	run = proto.Clone(run).(*troupev1.Run)
	run.Metadata = &troupev1.ObjectMeta{Name: b.GetMetadata().GetName()}
	// The run names the placement it is of (machine, attempt, bound_at),
	// so that a report of an earlier placement of the same attempt on this
	// machine is never taken for this one's.
	run.Machine, run.Attempt, run.BoundAt = a.cfg.Machine, b.GetTask().GetAttempt(), b.GetBoundAt()
	var err error
	for range 5 {
		err = write(ctx, a, clientlib.Runs, run, nil, also)
		var conflict *clientlib.ConflictError
		if err == nil || ctx.Err() != nil || errors.As(err, &conflict) && slices.ContainsFunc(conflict.Conflicts, clientlib.JobStopped) {
			return err
		}
		a.cfg.Logger.Info("report run", zap.String("task", b.GetMetadata().GetName()), zap.Error(err))
	}
	return err
}
