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
