// Package node is the node lifecycle controller. A machine's agent renews
// its Lease; when a lease expires (renewed + duration is past) the machine
// is marked LOST, and every task bound to it is unbound (its Binding
// deleted, its requests given back to the machine's counters) and marked
// LOST, for its job to replace it. When the lease is renewed again the
// machine is READY again. Time comes from an injected clock. Both changes
// are recorded as the machine's Events (MachineLost, with how long ago the
// lease expired and how many tasks were released; MachineReady).
//
// The decision is a pure function, Plan: (machine, its lease, the tasks
// bound to it, now) in, the Changes to commit out. Check reads the
// caches, calls it for each machine, and commits what it returns; the
// scripts in testdata/*.txt drive Plan (see plan_script_test.go).
//
//	caches ─▶ machine, lease, bound tasks ─▶ Plan(…, now) ─▶ Changes
//	          ─▶ write Status ─▶ release each task ─▶ record Events
//
// A machine, lease or task whose stored value cannot be read (see
// clientlib.DecodeAt) is skipped, logged once and recorded as an
// Unreadable event on its machine (its job, for a task); a machine whose
// lease is unreadable is left as it is, neither lost nor ready again.
package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Config configures the controller.
type Config struct {
	Now func() time.Time
	// Interval is how often leases are checked.
	Interval time.Duration
	Logger   *zap.Logger
	// Events records machines lost and back (nil: nothing is recorded).
	Events *clientlib.EventRecorder
}

// Controller is a running node lifecycle controller.
type Controller struct {
	cfg      Config
	s        clientlib.Store
	machines *cache.Informer[*troupev1.Machine]
	leases   *cache.Informer[*troupev1.Lease]
	tasks    *cache.Informer[*troupev1.Task]
	checking sync.Mutex // one Check at a time
}

// New returns a node lifecycle controller over store s (a
// *clientlib.Client, or an in-memory store in tests).
func New(s clientlib.Store, cfg Config) (*Controller, error) {
	if cfg.Now == nil || cfg.Logger == nil || cfg.Interval <= 0 {
		return nil, errors.New("node controller: Now, Logger and a positive Interval are required")
	}
	ctl := &Controller{cfg: cfg, s: s,
		machines: clientlib.NewInformer(s, clientlib.Machines, "", nil),
		leases:   clientlib.NewInformer(s, clientlib.Leases, "", nil),
		tasks:    clientlib.NewInformer(s, clientlib.Tasks, "", clientlib.TaskIndexes()),
	}
	ctl.machines.AddHandler(cache.Handler[*troupev1.Machine]{OnUnreadable: cfg.Events.RecordUnreadable})
	ctl.leases.AddHandler(cache.Handler[*troupev1.Lease]{OnUnreadable: cfg.Events.RecordUnreadable})
	ctl.tasks.AddHandler(cache.Handler[*troupev1.Task]{OnUnreadable: cfg.Events.RecordUnreadable})
	return ctl, nil
}

// Run checks leases every Interval until ctx ends.
func (ctl *Controller) Run(ctx context.Context) error {
	if err := cache.Start(ctx, ctl.machines, ctl.leases, ctl.tasks); err != nil {
		return err
	}
	t := time.NewTicker(ctl.cfg.Interval)
	defer t.Stop()
	for {
		ctl.Check(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Check compares every machine's lease with the clock once. Before Run
// has filled the caches it does nothing: a lease not read yet would pass
// for a missing one, and its machine for lost.
func (ctl *Controller) Check(ctx context.Context) {
	if !ctl.machines.HasSynced() || !ctl.leases.HasSynced() || !ctl.tasks.HasSynced() {
		return
	}
	ctl.checking.Lock()
	defer ctl.checking.Unlock()
	now := ctl.cfg.Now()
	for _, m := range ctl.machines.Indexer().List() {
		name := m.GetMetadata().GetName()
		lease, ok := ctl.leases.Indexer().Get(clientlib.Leases.Prefix + name)
		if !ok && ctl.leases.Unreadable(clientlib.Leases.Prefix+name) != nil {
			continue // the lease is skipped: whether the machine is alive is unknown
		}
		if !ok {
			lease = nil
		}
		ch := Plan(m, lease, ctl.tasks.Indexer().ByIndex(clientlib.IndexMachine, name), now)
		if err := ctl.commit(ctx, m, ch); err != nil && ctx.Err() == nil {
			// A conflict or a failure: the next check tries again.
			ctl.cfg.Logger.Info("node lifecycle", zap.String("machine", name), zap.Error(err))
		}
	}
}

// commit writes ch: the machine's status, then each release (all of
// them, whatever fails), then records the events.
func (ctl *Controller) commit(ctx context.Context, m *troupev1.Machine, ch Changes) error {
	if ch.Status != nil {
		u := proto.Clone(m).(*troupev1.Machine)
		u.Status = ch.Status
		if _, err := clientlib.Update(ctx, ctl.s, clientlib.Machines, u); err != nil {
			return err
		}
		if ch.Status.GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST {
			ctl.cfg.Logger.Info("machine lost", zap.String("machine", m.GetMetadata().GetName()))
		}
	}
	released := 0
	var errs []error
	for _, r := range ch.Release {
		tx := clientlib.NewTxn(ctl.s)
		g := tx.Group()
		clientlib.Unbind(g, r.From)
		clientlib.PutObject(g, clientlib.Tasks, r.To)
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err == nil {
			released++
		}
		errs = append(errs, err)
	}
	for _, e := range ch.Events(released) {
		ctl.cfg.Events.Record(e.InvolvedKind, e.Namespace, e.Scope, e.Name, e.Type, e.Reason, e.Message)
	}
	return errors.Join(errs...)
}
