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
// and env, as the task's user, in its working directory, stdout and stderr
// appended to stdout.log and stderr.log in the task's directory, each run
// in its own cgroup when Cgroups is set. A stopped task gets SIGTERM, then
// SIGKILL after the grace period; its whole process group is signalled.
//
// An agent running as root starts each process with the user's uid, gid
// and groups, and refuses root; one that is not root cannot switch users
// and runs tasks only as itself (see lookupTaskUser). A task's directory
// and its logs (mode 0600) belong to the agent; the task's default working
// directory, <task dir>/work, to the task's user, mode 0700:
//
//	<Dir>/<namespace>/<job>/<index>/   agent, 0711
//	    stdout.log, stderr.log         agent, 0600
//	    work/                          task user, 0700
//
// Directories the runtime creates are 0711, so that task users pass
// through them without listing them; Dir and the directories above it
// must let them pass too.
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

// TaskDir is where the task's logs (and its default working directory,
// work) are.
func (e *Exec) TaskDir(ref string) string { return filepath.Join(e.Dir, filepath.FromSlash(ref)) }

// Start implements Runtime. It refuses root, and users other than its own
// when the agent is not root (ErrRefused).
func (e *Exec) Start(_ context.Context, b *troupev1.Binding, user string) (Process, error) {
	tmpl := b.GetTask().GetTemplate()
	if tmpl.GetCommand() == "" {
		return nil, errors.New("exec: the task has no command")
	}
	u, err := lookupTaskUser(user, os.Geteuid())
	if err != nil {
		return nil, err
	}
	dir := e.TaskDir(b.GetMetadata().GetName())
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("exec: task directory: %w", err)
	}
	wd := tmpl.GetWorkingDir()
	if wd == "" {
		if wd, err = u.workDir(dir); err != nil {
			return nil, err
		}
	}
	stdout, err := openLog(dir, "stdout.log")
	if err != nil {
		return nil, err
	}
	stderr, err := openLog(dir, "stderr.log")
	if err != nil {
		stdout.Close()
		return nil, err
	}
	cmd := exec.Command(tmpl.GetCommand(), tmpl.GetArgs()...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), u.env()...)
	for k, v := range tmpl.GetEnv() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "TROUPE_TASK="+b.GetMetadata().GetName(), "TROUPE_MACHINE="+b.GetMachine())
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: u.cred}
	closeLogs := func() { stdout.Close(); stderr.Close() }
	cg, err := e.cgroup(b, cmd)
	if err != nil {
		closeLogs()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		closeLogs()
		e.removeCgroup(cg)
		if why := u.blocked(wd); why != "" {
			err = fmt.Errorf("%w (%s)", err, why)
		}
		return nil, fmt.Errorf("exec: start %s as %s in %s: %w", tmpl.GetCommand(), user, wd, err)
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

// openLog opens (creates) the log file name in a task's directory for
// appending, readable by the agent only.
func openLog(dir, name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return f, nil
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
