package agent

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// A health check's interval and timeout when its own are not positive.
const (
	DefaultHealthCheckInterval = 10 * time.Second
	DefaultHealthCheckTimeout  = 5 * time.Second
)

// healthCheckTimes are hc's interval and timeout, the defaults for those
// that are not positive (unset included).
func healthCheckTimes(hc *troupev1.HealthCheck) (interval, timeout time.Duration) {
	interval, timeout = hc.GetInterval().AsDuration(), hc.GetTimeout().AsDuration()
	if interval <= 0 {
		interval = DefaultHealthCheckInterval
	}
	if timeout <= 0 {
		timeout = DefaultHealthCheckTimeout
	}
	return interval, timeout
}

// checkHealth runs the health check of b's task beside its process proc,
// t's, through checker, until the process ends, t is stopped or ctx ends
// (see healthChecks); a check under way then is killed, and says nothing.
func (a *Agent) checkHealth(ctx context.Context, b *troupev1.Binding, t *task, proc runtime.Process, checker runtime.Checker,
	run *troupev1.Run, report func(*troupev1.Run)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.healthChecks(ctx, b, checker, run, report)
	}()
	select {
	case <-proc.Done():
	case <-t.stopped:
	case <-ctx.Done():
	}
	cancel()
	<-done
}

// healthChecks runs the health check of b's task until ctx ends: at once,
// then an interval (the agent's timer) after each check ends, each check
// for at most its timeout. It sets run.Healthy to whether the last check
// passed and reports run when that changes, and only then. A failure
// after none (the first check, or after a pass) is recorded as an
// Unhealthy event on the machine, saying why, after its report: a check
// that cannot start fails like one that exits non-zero or times out.
func (a *Agent) healthChecks(ctx context.Context, b *troupev1.Binding, checker runtime.Checker, run *troupev1.Run, report func(*troupev1.Run)) {
	hc := b.GetTask().GetTemplate().GetHealthCheck()
	interval, timeout := healthCheckTimes(hc)
	failing := false
	for {
		check, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("timed out after %v", timeout))
		err := checker.Check(check, hc.GetCommand(), hc.GetArgs())
		cancel()
		if ctx.Err() != nil {
			return
		}
		if healthy := err == nil; healthy != run.GetHealthy() {
			run.Healthy = healthy
			report(run)
		}
		if err != nil && !failing {
			a.unhealthy(b, err)
		}
		failing = err != nil
		select {
		case <-a.cfg.After(interval):
		case <-ctx.Done():
			return
		}
	}
}

// unhealthy records that the health check of b's task failed, and why.
func (a *Agent) unhealthy(b *troupev1.Binding, why error) {
	ref, attempt := b.GetMetadata().GetName(), b.GetTask().GetAttempt()
	a.cfg.Logger.Info("health check failed", zap.String("task", ref), zap.Int32("attempt", attempt), zap.Error(why))
	a.cfg.Events.Record(clientlib.Machines.Name, "", a.cfg.Machine, a.cfg.Machine, clientlib.EventWarning, "Unhealthy",
		fmt.Sprintf("Task %s (attempt %d): health check failed: %v", ref, attempt, why))
}
