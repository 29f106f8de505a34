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

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Exec runs tasks as real processes: the template's command with its args
// and env, in its working directory (default: a directory per task under
// Dir), stdout and stderr appended to stdout.log and stderr.log in the
// task's directory, each run in its own cgroup when Cgroups is set. A
// stopped task gets SIGTERM, then SIGKILL after the grace period; its
// whole process group is signalled.
type Exec struct {
	// Dir holds one directory per task: <Dir>/<namespace>/<job>/<index>.
	Dir string
	// Cgroups, if set, limits each run to its template's CPU and memory
	// limits (or requests); a run the OOM killer ended exits with reason
	// "OOMKilled". Nil runs tasks without limits.
	Cgroups *Cgroups
	// Logger reports what is not a task's exit (a cgroup left behind);
	// nil logs nothing.
	Logger *zap.Logger
}

// NewExec returns an Exec keeping its tasks under dir, confined by cgroups
// when this host lets the agent make them; when it does not, it says why,
// once.
func NewExec(dir string, log *zap.Logger) *Exec {
	cg, err := DetectCgroups()
	if err != nil {
		log.Warn("exec tasks run without CPU and memory limits", zap.Error(err))
	} else {
		log.Info("exec tasks run in cgroups", zap.Bool("v2", cg.v2), zap.String("cpu", cg.cpu), zap.String("memory", cg.memory))
	}
	return &Exec{Dir: dir, Cgroups: cg, Logger: log}
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
	closeLogs := func() { stdout.Close(); stderr.Close() }
	cg, err := e.cgroup(b, cmd)
	if err != nil {
		closeLogs()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		closeLogs()
		e.removeCgroup(cg)
		return nil, fmt.Errorf("exec: start %s: %w", tmpl.GetCommand(), err)
	}
	if cg != nil {
		if err := cg.join(cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			closeLogs()
			e.removeCgroup(cg)
			return nil, fmt.Errorf("exec: %w", err)
		}
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		closeLogs()
		exit, sig := p.exitOf(err)
		if cg != nil {
			if exit.Code != 0 && cg.oomKilled(sig == syscall.SIGKILL) {
				exit.Reason = "OOMKilled"
			}
			e.removeCgroup(cg)
		}
		p.finish(exit)
	}()
	return p, nil
}

// cgroup makes the cgroup of a run of b's task when the runtime has
// cgroups, and has cmd start inside it in v2.
func (e *Exec) cgroup(b *troupev1.Binding, cmd *exec.Cmd) (*cgroup, error) {
	if e.Cgroups == nil {
		return nil, nil
	}
	tmpl := b.GetTask().GetTemplate()
	cpu, memory := limits(tmpl.GetLimits(), tmpl.GetRequests())
	cg, err := e.Cgroups.create(b.GetMetadata().GetName(), cpu, memory)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if cg.fd != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.fd.Fd())
	}
	return cg, nil
}

// removeCgroup removes a run's cgroup (if it has one), and says so if it
// cannot.
func (e *Exec) removeCgroup(cg *cgroup) {
	if cg == nil {
		return
	}
	if err := cg.remove(); err != nil && e.Logger != nil {
		e.Logger.Warn("a task's cgroup is left behind", zap.Error(err))
	}
}

type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	exit Exit
	stop sync.Once
	term bool // the agent sent SIGTERM
}

// exitOf says how the process ended, from cmd.Wait's error, and which
// signal killed it (0 if none).
func (p *execProcess) exitOf(err error) (Exit, syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return Exit{Code: 0, Reason: "exited"}, 0
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return Exit{Code: 128 + int(ws.Signal()), Reason: "killed by " + unix.SignalName(ws.Signal()), Killed: p.term}, ws.Signal()
		}
		return Exit{Code: ee.ExitCode(), Reason: fmt.Sprintf("exit status %d", ee.ExitCode()), Killed: p.term}, 0
	default:
		return Exit{Code: -1, Reason: err.Error()}, 0
	}
}

func (p *execProcess) finish(e Exit) {
	p.mu.Lock()
	p.exit = e
	p.mu.Unlock()
	close(p.done)
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
