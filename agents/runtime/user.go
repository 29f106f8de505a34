package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// ErrRefused is wrapped by the errors of tasks that are not started
// because of the user they would run as: root, a user their namespace may
// not run as, or, on an agent that is not root, any user but the agent's
// own. Trying again does not help.
var ErrRefused = errors.New("refused")

// DefaultTaskUser is the user tasks run as when neither their template nor
// the agent's configuration names one: "nobody" for an agent running as
// root, else the agent's own user, the only one it can run tasks as.
func DefaultTaskUser() string {
	if os.Geteuid() != 0 {
		if u, err := user.Current(); err == nil {
			return u.Username
		}
	}
	return "nobody"
}

// taskUser is the host user a task's process runs as.
type taskUser struct {
	name, home string
	uid, gid   int
	// cred switches the process to the user: its uid, primary gid and
	// groups, replacing the agent's. Nil when the agent runs the task as
	// itself.
	cred *syscall.Credential
}

// lookupTaskUser finds user name in the host's user database, for an
// agent running as euid. Root (uid 0) is refused always. An agent that is
// not root cannot switch users: it runs tasks as itself when name is its
// own user, and refuses every other user.
func lookupTaskUser(name string, euid int) (*taskUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("exec: task user: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("exec: task user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("exec: task user %q: gid %q: %w", name, u.Gid, err)
	}
	switch {
	case uid == 0:
		return nil, fmt.Errorf("%w: user %q is root (uid 0), and tasks never run as root", ErrRefused, name)
	case euid != 0 && uid != euid:
		return nil, fmt.Errorf("%w: the agent is not root (it runs as uid %d), so it runs tasks only as itself, not as %q (uid %d)",
			ErrRefused, euid, name, uid)
	}
	tu := &taskUser{name: name, home: u.HomeDir, uid: uid, gid: gid}
	if euid != 0 {
		return tu, nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("exec: groups of task user %q: %w", name, err)
	}
	groups := make([]uint32, 0, len(ids))
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("exec: groups of task user %q: gid %q: %w", name, id, err)
		}
		groups = append(groups, uint32(g))
	}
	tu.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}
	return tu, nil
}

// env is what the task's environment says of its user.
func (u *taskUser) env() []string {
	return []string{"USER=" + u.name, "LOGNAME=" + u.name, "HOME=" + u.home}
}

// workDir makes a task's working directory, <dir>/work: owned by the
// user, mode 0700, so that no other user's task can read it. One left by
// a run as another user is removed first. dir itself belongs to the
// agent, so the user cannot put a link in the way.
func (u *taskUser) workDir(dir string) (string, error) {
	wd := filepath.Join(dir, "work")
	if st, err := os.Lstat(wd); err == nil && (!st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != uint32(u.uid)) {
		if err := os.RemoveAll(wd); err != nil {
			return "", fmt.Errorf("exec: working directory of another user: %w", err)
		}
	}
	if err := os.Mkdir(wd, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("exec: working directory: %w", err)
	}
	if u.cred != nil {
		if err := os.Chown(wd, u.uid, u.gid); err != nil {
			return "", fmt.Errorf("exec: working directory: %w", err)
		}
	}
	if err := os.Chmod(wd, 0o700); err != nil {
		return "", fmt.Errorf("exec: working directory: %w", err)
	}
	return wd, nil
}

// blocked explains why the user's process could not start in dir: the
// first directory on the way to it that the user may not pass, by its mode
// bits. It is empty when none is (the cause is elsewhere) or the agent
// runs the task as itself.
func (u *taskUser) blocked(dir string) string {
	if u.cred == nil {
		return ""
	}
	var path []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		path = append(path, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, d := range slices.Backward(path) {
		st, err := os.Stat(d)
		if err != nil {
			return ""
		}
		sys := st.Sys().(*syscall.Stat_t)
		perm := uint32(st.Mode().Perm())
		var search bool
		switch {
		case sys.Uid == u.cred.Uid:
			search = perm&0o100 != 0
		case sys.Gid == u.cred.Gid || slices.Contains(u.cred.Groups, sys.Gid):
			search = perm&0o010 != 0
		default:
			search = perm&0o001 != 0
		}
		if !search {
			return fmt.Sprintf("user %q may not enter %s (mode %#o, owner uid %d, gid %d): the agent's task directory must be reachable by its task users",
				u.name, d, perm, sys.Uid, sys.Gid)
		}
	}
	return ""
}
