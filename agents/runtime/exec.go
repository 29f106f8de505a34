package runtime

import (
	"bytes"
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
// Its processes are Checkers: a health check starts as the task did, as
// its user, in its working directory and environment, in its run's cgroup.
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
	_ Checker = (*execProcess)(nil)
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
	env := taskEnv{user: u, dir: wd, env: append(taskBaseEnv(), u.env()...)}
	for k, v := range tmpl.GetEnv() {
		env.env = append(env.env, k+"="+v)
	}
	env.env = append(env.env, "TROUPE_TASK="+b.GetMetadata().GetName(), "TROUPE_MACHINE="+b.GetMachine())
	stdout, err := openLog(dir, "stdout.log")
	if err != nil {
		return nil, err
	}
	stderr, err := openLog(dir, "stderr.log")
	if err != nil {
		stdout.Close()
		return nil, err
	}
	closeLogs := func() { stdout.Close(); stderr.Close() }
	cg, err := e.cgroup(b)
	if err != nil {
		closeLogs()
		return nil, err
	}
	cmd := env.command(tmpl.GetCommand(), tmpl.GetArgs())
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := env.start(cmd, cg); err != nil {
		closeLogs()
		e.removeCgroup(cg)
		return nil, err
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{}), env: env, cg: cg}
	go func() {
		err := cmd.Wait()
		closeLogs()
		exit, sig := p.exitOf(err)
		p.endChecks()
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

// agentEnvForTasks names the agent's own variables a task's environment
// starts from: the search path, the locale and the time zone. Nothing
// else the agent was started with is the task's: its own settings
// (GOMAXPROCS, GODEBUG, whatever a service manager or container image
// set, credentials an operator passed it) would otherwise reach every
// task of every user. A task that needs a variable names it in its
// template's env.
var agentEnvForTasks = []string{"PATH", "LANG", "LC_ALL", "TZ"}

// defaultTaskPath is a task's PATH when the agent has none (a FROM
// scratch image sets none).
const defaultTaskPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// taskBaseEnv is the environment every task starts from
// (agentEnvForTasks), before its user's variables and its own.
func taskBaseEnv() []string {
	env := make([]string, 0, len(agentEnvForTasks)+8)
	for _, k := range agentEnvForTasks {
		v, ok := os.LookupEnv(k)
		if !ok && k == "PATH" {
			v, ok = defaultTaskPath, true
		}
		if ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// taskEnv is how a task's processes start, its own and its health
// checks': as its user, in its working directory, with its environment,
// in a process group of their own.
type taskEnv struct {
	user *taskUser
	dir  string
	env  []string
}

// command is the command name with args, to run as the task.
func (env taskEnv) command(name string, args []string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = env.dir, env.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: env.user.cred}
	return cmd
}

// start starts cmd, made by command, in cgroup cg (nil: none): in v2 it
// starts inside, in v1 it is moved in at once, and killed if it cannot be.
func (env taskEnv) start(cmd *exec.Cmd, cg *cgroup) error {
	if cg != nil {
		fd, err := cg.open()
		if err != nil {
			return fmt.Errorf("exec: %w", err)
		}
		if fd != nil {
			defer fd.Close()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
		}
	}
	if err := cmd.Start(); err != nil {
		if why := env.user.blocked(cmd.Dir); why != "" {
			err = fmt.Errorf("%w (%s)", err, why)
		}
		return fmt.Errorf("exec: start %s as %s in %s: %w", cmd.Args[0], env.user.name, cmd.Dir, err)
	}
	if cg != nil {
		if err := cg.join(cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return fmt.Errorf("exec: %w", err)
		}
	}
	return nil
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
// cgroups.
func (e *Exec) cgroup(b *troupev1.Binding) (*cgroup, error) {
	if e.Cgroups == nil {
		return nil, nil
	}
	tmpl := b.GetTask().GetTemplate()
	cpu, memory := limits(tmpl.GetLimits(), tmpl.GetRequests())
	cg, err := e.Cgroups.create(b.GetMetadata().GetName(), cpu, memory)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
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

	// env and cg are how the task's health checks start: as its process
	// did, in its cgroup (nil: none).
	env taskEnv
	cg  *cgroup
	// checks guards ended: a check starts (and joins cg) only before the
	// task's end, which removes cg.
	checks sync.Mutex
	ended  bool
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

// endChecks keeps health checks from starting: the task has ended.
func (p *execProcess) endChecks() {
	p.checks.Lock()
	p.ended = true
	p.checks.Unlock()
}

// checkOutput is how much of a failed health check's output its error
// quotes.
const checkOutput = 512

// checkWaitDelay bounds the wait for a health check's output after it
// exited (a child it left behind may hold its pipe).
const checkWaitDelay = time.Second

// Check implements Checker. The check runs in a process group of its own,
// killed (SIGKILL) when ctx ends; a failure quotes the start of its output.
func (p *execProcess) Check(ctx context.Context, command string, args []string) error {
	if command == "" {
		return errors.New("exec: the health check has no command")
	}
	out := &headBuffer{max: checkOutput}
	cmd := p.env.command(command, args)
	cmd.Stdout, cmd.Stderr, cmd.WaitDelay = out, out, checkWaitDelay
	if err := p.startCheck(cmd); err != nil {
		return err
	}
	kill := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	kill()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("exec: health check %s killed: %w", command, context.Cause(ctx))
	case err == nil || errors.Is(err, exec.ErrWaitDelay): // exited 0
		return nil
	case out.Len() > 0:
		return fmt.Errorf("exec: health check %s: %w: %s", command, err, bytes.TrimSpace(out.Bytes()))
	default:
		return fmt.Errorf("exec: health check %s: %w", command, err)
	}
}

// startCheck starts a health check's cmd as the task was started, unless
// the task has ended.
func (p *execProcess) startCheck(cmd *exec.Cmd) error {
	p.checks.Lock()
	defer p.checks.Unlock()
	if p.ended {
		return fmt.Errorf("exec: health check %s: the task has ended", cmd.Args[0])
	}
	return p.env.start(cmd, p.cg)
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	bytes.Buffer
	max int
}

func (h *headBuffer) Write(b []byte) (int, error) {
	if room := h.max - h.Len(); room > 0 {
		h.Buffer.Write(b[:min(room, len(b))])
	}
	return len(b), nil
}
