package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Exec runs tasks as real processes: the template's command with its args
// and env, in its working directory (default: a directory per task under
// Dir), stdout and stderr appended to stdout.log and stderr.log in the
// task's directory. A stopped task gets SIGTERM, then SIGKILL after the
// grace period; its whole process group is signalled.
type Exec struct {
	// Dir holds one directory per task: <Dir>/<namespace>/<job>/<index>.
	Dir string
}

var (
	_ Runtime = (*Exec)(nil)
	_ Logs    = (*Exec)(nil)
)

// TaskDir is where the task's logs (and default working directory) are.
func (e *Exec) TaskDir(ref string) string { return filepath.Join(e.Dir, filepath.FromSlash(ref)) }

// Start implements Runtime.
func (e *Exec) Start(_ context.Context, b *troupev1.Binding) (Process, error) {
	tmpl := b.GetTask().GetTemplate()
	if tmpl.GetCommand() == "" {
		return nil, errors.New("exec: the task has no command")
	}
	dir := e.TaskDir(b.GetMetadata().GetName())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("exec: task directory: %w", err)
	}
	stdout, err := os.OpenFile(filepath.Join(dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	stderr, err := os.OpenFile(filepath.Join(dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		stdout.Close()
		return nil, err
	}
	cmd := exec.Command(tmpl.GetCommand(), tmpl.GetArgs()...)
	cmd.Dir = dir
	if wd := tmpl.GetWorkingDir(); wd != "" {
		cmd.Dir = wd
	}
	cmd.Env = os.Environ()
	for k, v := range tmpl.GetEnv() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "TROUPE_TASK="+b.GetMetadata().GetName(), "TROUPE_MACHINE="+b.GetMachine())
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		stdout.Close()
		stderr.Close()
		return nil, fmt.Errorf("exec: start %s: %w", tmpl.GetCommand(), err)
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		stdout.Close()
		stderr.Close()
		p.finish(err)
	}()
	return p, nil
}

type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	exit Exit
	stop sync.Once
	term bool // the agent sent SIGTERM
}

func (p *execProcess) finish(err error) {
	p.mu.Lock()
	defer func() { p.mu.Unlock(); close(p.done) }()
	var ee *exec.ExitError
	switch {
	case err == nil:
		p.exit = Exit{Code: 0, Reason: "exited"}
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			p.exit = Exit{Code: 128 + int(ws.Signal()), Reason: "killed by " + unix.SignalName(ws.Signal()), Killed: p.term}
		} else {
			p.exit = Exit{Code: ee.ExitCode(), Reason: fmt.Sprintf("exit status %d", ee.ExitCode()), Killed: p.term}
		}
	default:
		p.exit = Exit{Code: -1, Reason: err.Error()}
	}
}

func (p *execProcess) Done() <-chan struct{} { return p.done }

func (p *execProcess) Exit() Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Stop sends SIGTERM to the task's process group, and SIGKILL if it has
// not ended after grace.
func (p *execProcess) Stop(grace time.Duration) {
	p.stop.Do(func() {
		p.mu.Lock()
		p.term = true
		p.mu.Unlock()
		pgid := -p.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		go func() {
			select {
			case <-p.done:
			case <-time.After(grace):
				_ = syscall.Kill(pgid, syscall.SIGKILL)
			}
		}()
	})
}
