// Package runtimetest helps tests that run exec tasks as users other than
// their own (as the exec runtime does when the agent is root): directories
// and programs those users can reach, and users made on this host for one
// test.
//
//	dir := runtimetest.Dir(t)   // an Exec's Dir
//	u := runtimetest.User(t)    // skips the test unless root with useradd
//	runtimetest.Ended(t, pidFile, 10*time.Second) // a task's child was killed
package runtimetest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Dir returns a new directory, removed when the test ends, that every user
// of this host may pass through (mode 0711). A t.TempDir is private to the
// test's user, so a task running as another user could not reach its
// working directory below one.
func Dir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "troupe-tasks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	return d
}

// Executable returns a copy of the test binary in a Dir, which every user
// may run (the go command builds it in a directory private to its user).
func Executable(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(Dir(t), filepath.Base(self))
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// User makes a new user (and its group) on this host with useradd,
// deleted with userdel when the test ends. It skips the test, saying why,
// when the test does not run as root or useradd is missing.
func User(t testing.TB) *user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a host user needs root (run the test as root)")
	}
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		t.Skipf("making a host user needs useradd: %v", err)
	}
	name := "troupe-test-" + strings.ToLower(rand.Text()[:8])
	if out, err := exec.Command(useradd, "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Ended waits, up to d, for the end of the process whose pid is in file
// pidFile (written by a task, or a health check): it fails the test unless
// that process has exited (a zombie or gone) by then. It watches a pidfd
// of the process, of which it need not be the parent.
func Ended(t testing.TB, pidFile string, d time.Duration) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %v", pidFile, err)
	}
	if err := awaitEnd(pid, d); err != nil {
		t.Fatal(err)
	}
}

// awaitEnd waits, up to d, for process pid to exit.
func awaitEnd(pid int, d time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // gone, reaped already
	}
	if err != nil {
		return fmt.Errorf("pidfd of process %d: %w", pid, err)
	}
	defer unix.Close(fd)
	// A pidfd is readable once its process has exited.
	for deadline := time.Now().Add(d); ; {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, max(int(time.Until(deadline).Milliseconds()), 0))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("poll the pidfd of process %d: %w", pid, err)
		case n == 0:
			return fmt.Errorf("process %d still runs after %v", pid, d)
		}
		return nil
	}
}
