// Package node is the node lifecycle controller. A machine's agent renews
// its Lease; when a lease expires (renewed + duration is past) the machine
// is marked LOST, and every task bound to it is unbound (its Binding
// deleted, its requests given back to the machine's counters) and marked
// LOST, for its job to replace it. When the lease is renewed again the
// machine is READY again. Time comes from an injected clock. Both changes
// are recorded as the machine's Events (MachineLost, with how long ago the
// lease expired and how many tasks were released; MachineReady).
//
// A machine, lease or task whose stored value cannot be read (see
// clientlib.DecodeAt) is skipped, logged once and recorded as an
// Unreadable event on its machine (its job, for a task); a machine whose
// lease is unreadable is left as it is, neither lost nor ready again.
package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	c        *clientlib.Client
	machines *cache.Informer[*troupev1.Machine]
	leases   *cache.Informer[*troupev1.Lease]
	tasks    *cache.Informer[*troupev1.Task]
	checking sync.Mutex // one Check at a time
}

// New returns a node lifecycle controller over client c.
func New(c *clientlib.Client, cfg Config) (*Controller, error) {
	if cfg.Now == nil || cfg.Logger == nil || cfg.Interval <= 0 {
		return nil, errors.New("node controller: Now, Logger and a positive Interval are required")
	}
	ctl := &Controller{cfg: cfg, c: c,
		machines: clientlib.NewInformer(c, clientlib.Machines, "", nil),
		leases:   clientlib.NewInformer(c, clientlib.Leases, "", nil),
		tasks:    clientlib.NewInformer(c, clientlib.Tasks, "", clientlib.TaskIndexes()),
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

// Check compares every machine's lease with the clock once.
func (ctl *Controller) Check(ctx context.Context) {
	ctl.checking.Lock()
	defer ctl.checking.Unlock()
	now := ctl.cfg.Now()
	for _, m := range ctl.machines.Indexer().List() {
		name := m.GetMetadata().GetName()
		lease, ok := ctl.leases.Indexer().Get(clientlib.Leases.Prefix + name)
		if !ok && ctl.leases.Unreadable(clientlib.Leases.Prefix+name) != nil {
			continue // the lease is skipped: whether the machine is alive is unknown
		}
		alive := ok && lease.GetRenewed().AsTime().Add(lease.GetDuration().AsDuration()).After(now)
		lost := m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST
		var err error
		released, becameLost := 0, false
		switch {
		case !alive && !lost:
			err = ctl.setPhase(ctx, m, troupev1.MachinePhase_MACHINE_PHASE_LOST, "lease expired")
			if err == nil {
				becameLost = true
				ctl.cfg.Logger.Info("machine lost", zap.String("machine", name))
			}
		case alive && lost:
			err = ctl.setPhase(ctx, m, troupev1.MachinePhase_MACHINE_PHASE_READY, "")
			if err == nil {
				ctl.cfg.Events.Record(clientlib.Machines.Name, "", name, name, clientlib.EventNormal, "MachineReady", "Lease renewed: the machine is READY again")
			}
		}
		if err == nil && !alive {
			released, err = ctl.release(ctx, name, now)
		}
		if becameLost {
			expired := "No lease"
			if ok {
				expired = fmt.Sprintf("Lease of %s expired %v ago", lease.GetHolder(),
					now.Sub(lease.GetRenewed().AsTime().Add(lease.GetDuration().AsDuration())).Round(time.Millisecond))
			}
			ctl.cfg.Events.Record(clientlib.Machines.Name, "", name, name, clientlib.EventWarning, "MachineLost",
				fmt.Sprintf("%s; %d task(s) released", expired, released))
		}
		if err != nil && ctx.Err() == nil {
			// A conflict or a failure: the next check tries again.
			ctl.cfg.Logger.Info("node lifecycle", zap.String("machine", name), zap.Error(err))
		}
	}
}

func (ctl *Controller) setPhase(ctx context.Context, m *troupev1.Machine, phase troupev1.MachinePhase, msg string) error {
	u := proto.Clone(m).(*troupev1.Machine)
	u.Status = &troupev1.MachineStatus{Phase: phase, Message: msg}
	_, err := clientlib.Update(ctx, ctl.c, clientlib.Machines, u)
	return err
}

// release unbinds every task bound to a lost machine and marks it LOST;
// it says how many it released.
func (ctl *Controller) release(ctx context.Context, machine string, now time.Time) (int, error) {
	released := 0
	var errs []error
	for _, t := range ctl.tasks.Indexer().ByIndex(clientlib.IndexMachine, machine) {
		tx := clientlib.NewTxn(ctl.c)
		g := tx.Group()
		u := clientlib.Unbind(g, t)
		u.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_LOST, Reason: "machine " + machine + " lost",
			Finished: timestamppb.New(now)}
		clientlib.PutObject(g, clientlib.Tasks, u)
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err == nil {
			released++
		}
		errs = append(errs, err)
	}
	return released, errors.Join(errs...)
}
