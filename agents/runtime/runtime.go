// Package runtime runs the tasks an agent is given: Exec runs them as real
// processes, Sim pretends (hollow machines).
package runtime

import (
	"context"
	"time"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Exit is how a task ended.
type Exit struct {
	Code   int
	Reason string
	// Killed: the task was stopped by the agent, not ended by itself.
	Killed bool
	// Refused: the task was never started, because of the user it would
	// run as (ErrRefused); it is not to be restarted.
	Refused bool
}

// Process is a started task.
type Process interface {
	// Done is closed when the task has ended; Exit then says how.
	Done() <-chan struct{}
	Exit() Exit
	// Stop asks the task to end (SIGTERM for a process) and forces it
	// after grace (SIGKILL).
	Stop(grace time.Duration)
}

// Checker is a Process whose task's health check (TaskTemplate.health_check)
// the runtime runs beside it. Exec's processes are; Sim's are not, having
// nothing to check (the agent reports such a task healthy while it runs).
type Checker interface {
	// Check runs command with args once, as the task's process runs: as
	// its user, in its working directory, environment and cgroup. It
	// returns nil when the command exits 0, else why it failed (it did not
	// start, or exited otherwise). When ctx ends first the command's
	// process group is killed and the error wraps context.Cause(ctx).
	Check(ctx context.Context, command string, args []string) error
}

// Runtime starts tasks.
type Runtime interface {
	// Start starts the task of a Binding as host user user, whom the agent
	// has checked the task's namespace may run as. The runtime may still
	// refuse the user, with an error wrapping ErrRefused; one without
	// users (Sim) ignores it.
	Start(ctx context.Context, b *troupev1.Binding, user string) (Process, error)
}

// Logs is a Runtime that keeps its tasks' output in files.
type Logs interface {
	// TaskDir is where the task's stdout.log and stderr.log are.
	TaskDir(ref string) string
}
