// Package node is the node lifecycle controller. A machine's agent renews
// its Lease; when a lease expires (renewed + duration is past) the machine
// is marked LOST, and every task bound to it is unbound (its Binding
// deleted, its requests given back to the machine's counters) and marked
// LOST, for its job to replace it. When the lease is renewed again the
// machine is READY again. Time comes from an injected clock.
package node

import (
	"context"
	"errors"
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
}

// Controller is a running node lifecycle controller.
type Controller struct {
	cfg      Config
	c        *clientlib.Client
	machines *cache.Informer[*troupev1.Machine]
	leases   *cache.Informer[*troupev1.Lease]
	tasks    *cache.Informer[*troupev1.Task]
}

// New returns a node lifecycle controller over client c.
func New(c *clientlib.Client, cfg Config) (*Controller, error) {
	if cfg.Now == nil || cfg.Logger == nil || cfg.Interval <= 0 {
		return nil, errors.New("node controller: Now, Logger and a positive Interval are required")
	}
	return &Controller{cfg: cfg, c: c,
		machines: clientlib.NewInformer(c, clientlib.Machines, "", nil),
		leases:   clientlib.NewInformer(c, clientlib.Leases, "", nil),
		tasks:    clientlib.NewInformer(c, clientlib.Tasks, "", clientlib.TaskIndexes()),
	}, nil
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
	now := ctl.cfg.Now()
	for _, m := range ctl.machines.Indexer().List() {
		name := m.GetMetadata().GetName()
		lease, ok := ctl.leases.Indexer().Get(clientlib.Leases.Prefix + name)
		alive := ok && lease.GetRenewed().AsTime().Add(lease.GetDuration().AsDuration()).After(now)
		lost := m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST
		var err error
		switch {
		case !alive && !lost:
			err = ctl.setPhase(ctx, m, troupev1.MachinePhase_MACHINE_PHASE_LOST, "lease expired")
			if err == nil {
				ctl.cfg.Logger.Info("machine lost", zap.String("machine", name))
			}
		case alive && lost:
			err = ctl.setPhase(ctx, m, troupev1.MachinePhase_MACHINE_PHASE_READY, "")
		}
		if err == nil && !alive {
			err = ctl.release(ctx, name, now)
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

// release unbinds every task bound to a lost machine and marks it LOST.
func (ctl *Controller) release(ctx context.Context, machine string, now time.Time) error {
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
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
