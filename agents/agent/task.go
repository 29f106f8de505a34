package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// task is one placement of a task that the agent runs (a Binding: the
// task's attempt, bound at its bound_at): its process, restarted in place
// as its restart policy says, until it ends for good or its binding goes
// away. Only the agent's current task of a ref reports its Run, and it
// starts only once the task it replaced has ended (prev), so that no
// report of an earlier placement lands after its own.
type task struct {
	attempt  int32
	boundAt  *timestamppb.Timestamp
	stopped  chan struct{} // closed when the binding is gone
	stopOnce sync.Once
	// done is closed when the task's goroutine has ended: it reports
	// nothing more.
	done chan struct{}
	// prev is the task of the same ref that this one replaced (nil: none).
	prev *task

	mu   sync.Mutex
	proc runtime.Process // the running process; nil between runs
}

// stop stops the task: its process now, and any restart.
func (t *task) stop(grace time.Duration) {
	t.stopOnce.Do(func() { close(t.stopped) })
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.proc != nil {
		t.proc.Stop(grace)
	}
}

func (t *task) isStopped() bool {
	select {
	case <-t.stopped:
		return true
	default:
		return false
	}
}

// setProc records the running process (nil: none); a process started
// after the task was stopped is stopped at once.
func (t *task) setProc(p runtime.Process, grace time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.proc = p
	if p != nil && t.isStopped() {
		p.Stop(grace)
	}
}

// samePlacement reports whether t runs binding b's placement: the same
// attempt, bound at the same time (see Run.bound_at).
func (t *task) samePlacement(b *troupev1.Binding) bool {
	return t.attempt == b.GetTask().GetAttempt() && proto.Equal(t.boundAt, b.GetBoundAt())
}

// start runs the task of binding b unless it already runs that placement;
// a binding of another placement (another attempt, or the same attempt
// placed again: a preempted task can come back to the machine it was
// evicted from, and a relisted cache may show that as an update) replaces
// the one it runs. The new task starts once the one it replaces has ended.
func (a *Agent) start(ctx context.Context, b *troupev1.Binding) {
	ref := b.GetMetadata().GetName()
	a.mu.Lock()
	cur, ok := a.running[ref]
	// Once ctx has ended (checked under mu, which stopAll holds), no task
	// starts: Run waits for the ones it stopped.
	if ctx.Err() != nil || ok && cur.samePlacement(b) && !cur.isStopped() {
		a.mu.Unlock()
		return
	}
	t := &task{attempt: b.GetTask().GetAttempt(), boundAt: b.GetBoundAt(), stopped: make(chan struct{}), done: make(chan struct{})}
	if ok {
		t.prev = cur
	}
	a.running[ref] = t
	a.tasks.Add(1)
	a.mu.Unlock()
	if ok {
		cur.stop(a.cfg.StopGrace)
	}
	go a.run(ctx, b, t)
}

// stop stops the task of ref (its binding is gone).
func (a *Agent) stop(ref string) {
	a.mu.Lock()
	t, ok := a.running[ref]
	a.mu.Unlock()
	if ok {
		t.stop(a.cfg.StopGrace)
	}
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.running {
		t.stop(a.cfg.StopGrace)
	}
}

// current says whether t is the task the agent runs for ref.
func (a *Agent) current(ref string, t *task) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running[ref] == t
}

// run runs t, binding b's task, to its end and reports its Run: RUNNING
// while the process runs or waits for a restart, then SUCCEEDED, FAILED
// or KILLED with the last exit. A task that ends because the agent is
// going away is not reported: the machine's lease runs out and the node
// lifecycle controller takes its tasks away, as for a crashed machine.
//
// It first waits for the task it replaced, if any, to end (stopped when
// it was replaced, it ends within the grace period): two placements of a
// task never run at once on the machine, and the Run a late report of the
// earlier one writes is written over by this one's, never the reverse. A
// task whose binding goes while it waits never starts, and reports
// nothing.
func (a *Agent) run(ctx context.Context, b *troupev1.Binding, t *task) {
	ref := b.GetMetadata().GetName()
	defer a.tasks.Done()
	defer close(t.done)
	defer func() {
		a.mu.Lock()
		if a.running[ref] == t {
			delete(a.running, ref)
		}
		a.mu.Unlock()
	}()
	if t.prev != nil {
		select {
		case <-t.prev.done:
		case <-ctx.Done():
			return
		}
		t.prev = nil // not kept alive by its successor
		if t.isStopped() {
			return
		}
	}
	report := func(run *troupev1.Run) {
		if ctx.Err() == nil && a.current(ref, t) {
			a.report(ctx, b, run)
		}
	}
	r := newRestarter(b.GetTask(), a.cfg)
	run := &troupev1.Run{Phase: troupev1.RunPhase_RUN_PHASE_RUNNING, Started: timestamppb.New(a.cfg.Now())}
	// The first report goes before the process starts, on condition
	// that the job still runs: a task whose job's stop or deletion
	// committed first never starts, and one that starts is ordered
	// before it (and killed when its binding goes).
	if ns, job, ok := strings.Cut(ref, "/"); ok && a.current(ref, t) {
		job, _, _ = strings.Cut(job, "/")
		err := a.reportIf(ctx, b, run, func(g *clientlib.Group) { clientlib.RequireJobRunning(g, ns, job) })
		var conflict *clientlib.ConflictError
		if errors.As(err, &conflict) && slices.ContainsFunc(conflict.Conflicts, clientlib.JobStopped) {
			run.Phase, run.Reason, run.Finished = troupev1.RunPhase_RUN_PHASE_KILLED, "not started: its job was stopped or deleted",
				timestamppb.New(a.cfg.Now())
			report(run)
			return
		}
	}
	for {
		began := a.cfg.Now()
		exit := a.once(ctx, b, t, run, report)
		if ctx.Err() != nil {
			return
		}
		ended := a.cfg.Now()
		run.ExitCode, run.Reason = int32(exit.Code), exit.Reason
		delay, again := time.Duration(0), false
		if !t.isStopped() {
			delay, again = r.restart(exit, ended.Sub(began))
		}
		if !again {
			run.Phase, run.Finished = finalPhase(exit), timestamppb.New(ended)
			report(run)
			return
		}
		run.Restarts = r.restarts
		run.Reason = fmt.Sprintf("back-off %v restarting after %s", delay, exit.Reason)
		report(run)
		select {
		case <-a.cfg.After(delay):
			run.Reason = "restarted after " + exit.Reason
		case <-t.stopped:
			run.Phase, run.Reason, run.Finished = troupev1.RunPhase_RUN_PHASE_KILLED, "stopped in back-off", timestamppb.New(a.cfg.Now())
			report(run)
			return
		case <-ctx.Done():
			return
		}
	}
}

// once starts the task's process as its user (see runAs), reports run once
// it runs, runs its health check beside it (see checkHealth), and waits
// for it to end; run is then unhealthy, whatever it was. A process that
// cannot start is a failed run; one refused for its user is recorded as
// an event too, and is not restarted.
func (a *Agent) once(ctx context.Context, b *troupev1.Binding, t *task, run *troupev1.Run, report func(*troupev1.Run)) runtime.Exit {
	user, err := a.runAs(ctx, b)
	var proc runtime.Process
	if err == nil {
		proc, err = a.cfg.Runtime.Start(ctx, b, user)
	}
	if err != nil {
		refused := errors.Is(err, runtime.ErrRefused)
		if refused {
			a.refused(b, err)
		}
		return runtime.Exit{Code: -1, Reason: err.Error(), Refused: refused}
	}
	t.setProc(proc, a.cfg.StopGrace)
	hc := b.GetTask().GetTemplate().GetHealthCheck()
	checker, checks := proc.(runtime.Checker)
	// A process without checks (a hollow machine's) has nothing to check:
	// its task is healthy while it runs, from its running report on.
	run.Healthy = hc != nil && !checks
	report(run)
	if hc != nil && checks {
		a.checkHealth(ctx, b, t, proc, checker, run, report)
	}
	<-proc.Done()
	t.setProc(nil, a.cfg.StopGrace)
	run.Healthy = false
	return proc.Exit()
}

func finalPhase(exit runtime.Exit) troupev1.RunPhase {
	switch {
	case exit.Killed:
		return troupev1.RunPhase_RUN_PHASE_KILLED
	case exit.Code != 0:
		return troupev1.RunPhase_RUN_PHASE_FAILED
	}
	return troupev1.RunPhase_RUN_PHASE_SUCCEEDED
}
