package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Sim runs tasks without processes: a task "runs" for its template's
// sim_duration (DefaultDuration when unset) and exits with its
// sim_exit_code (0 when unset).
// Its processes are not Checkers: there is nothing to check.
type Sim struct {
	DefaultDuration time.Duration
	// After is the clock's timer (time.After in a cell; a virtual clock
	// in the simulator).
	After func(time.Duration) <-chan time.Time
}

var _ Runtime = (*Sim)(nil)

// Start implements Runtime; simulated tasks run as no one.
func (s *Sim) Start(ctx context.Context, b *troupev1.Binding, _ string) (Process, error) {
	tmpl := b.GetTask().GetTemplate()
	d := tmpl.GetSimDuration().AsDuration()
	if d <= 0 {
		d = s.DefaultDuration
	}
	after := s.After
	if after == nil {
		after = time.After
	}
	p := &simProcess{done: make(chan struct{}), stop: make(chan struct{})}
	end := after(d)
	go func() {
		select {
		case <-end:
			e := Exit{Code: 0, Reason: "completed"}
			if c := int(tmpl.GetSimExitCode()); c != 0 {
				e = Exit{Code: c, Reason: fmt.Sprintf("exit status %d", c)}
			}
			p.finish(e)
		case <-p.stop:
			p.finish(Exit{Code: 137, Reason: "stopped", Killed: true})
		case <-ctx.Done():
			p.finish(Exit{Code: 137, Reason: "agent stopped", Killed: true})
		}
	}()
	return p, nil
}

type simProcess struct {
	done     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	exit     Exit
}

func (p *simProcess) finish(e Exit) {
	p.mu.Lock()
	p.exit = e
	p.mu.Unlock()
	close(p.done)
}

func (p *simProcess) Done() <-chan struct{} { return p.done }

func (p *simProcess) Exit() Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

func (p *simProcess) Stop(time.Duration) { p.stopOnce.Do(func() { close(p.stop) }) }
