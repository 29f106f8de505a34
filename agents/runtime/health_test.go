package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// checkReport is the test binary as a health check: it writes its uid,
// working directory, TROUPE_TASK and GREETING, and the cgroup it runs in
// (memory's, or v2's), once in a troupe cgroup when TROUPE_TEST_IN_CGROUP
// is set, to file out, a line each.
func checkReport(out string) int {
	if os.Getenv("TROUPE_TEST_IN_CGROUP") != "" {
		if err := awaitTroupeCgroup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	report := strings.Join([]string{strconv.Itoa(os.Getuid()), wd, os.Getenv("TROUPE_TASK"), os.Getenv("GREETING"), cgroupOf("self")}, "\n")
	if err := os.WriteFile(out, []byte(report), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// cgroupOf is the memory cgroup (v1), or v2 cgroup, of process pid.
func cgroupOf(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/cgroup")
	self := parseSelfCgroup(string(b))
	if m, ok := self["memory"]; ok {
		return m
	}
	return self[""]
}

// A task's health check runs as the task: as its user, in its working
// directory, with its environment, in its cgroup (when this host has
// cgroups to use). It passes when it exits 0; it fails, quoting its
// output, when it exits otherwise, when it cannot start, and when its
// context ends first, which kills its whole process group. Once the task
// has ended, no check starts.
func TestExecHealthCheck(t *testing.T) {
	u, err := user.Lookup(DefaultTaskUser())
	if err != nil {
		t.Skipf("no default task user here: %v", err)
	}
	rt := &Exec{Dir: runtimetest.Dir(t)}
	env := map[string]string{"GREETING": "hello", "TROUPE_TEST_CHECK": "check.out"}
	if cg, err := DetectCgroups(); err == nil {
		rt.Cgroups = cg
		env["TROUPE_TEST_IN_CGROUP"] = "1"
	} else {
		t.Logf("checks run without cgroups: %v", err)
	}
	b := &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/checked/0"}, Machine: "m",
		Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", "exec sleep 600"}, Env: env}}}
	p, err := rt.Start(context.Background(), b, u.Username)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.Stop(0)
		<-p.Done()
	}()
	check := func(ctx context.Context, command string, args ...string) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return p.(Checker).Check(ctx, command, args)
	}
	work := filepath.Join(rt.TaskDir("ns/checked/0"), "work")

	// The test binary reports what it ran as; the task's environment says
	// where to (TROUPE_TEST_CHECK).
	if err := check(t.Context(), runtimetest.Executable(t)); err != nil {
		t.Fatalf("check: %v", err)
	}
	out, err := os.ReadFile(filepath.Join(work, "check.out"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{u.Uid, work, "ns/checked/0", "hello", cgroupOf(strconv.Itoa(p.(*execProcess).cmd.Process.Pid))}
	if got := strings.Split(string(out), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the check ran as %q, want as the task: %q", got, want)
	}
	if rt.Cgroups != nil && !strings.Contains(want[4], "/troupe/ns_checked_0-") {
		t.Fatalf("the task's cgroup is %q", want[4])
	}

	for _, c := range []struct {
		name, command string
		args          []string
		want          string
	}{
		{"exits non-zero", "/bin/sh", []string{"-c", "echo not ready; exit 3"}, "exit status 3: not ready"},
		{"cannot start", "/nonexistent/check", nil, "exec: start /nonexistent/check as " + u.Username + " in " + work},
		{"has no command", "", nil, "the health check has no command"},
	} {
		if err := check(t.Context(), c.command, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("a check that %s: %v, want %q", c.name, err, c.want)
		}
	}

	// A check that outlives its context is killed, with what it started.
	timedOut := errors.New("timed out")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 200*time.Millisecond, timedOut)
	defer cancel()
	if err := check(ctx, "/bin/sh", "-c", "sleep 600 & echo $! > sleep.pid; wait"); !errors.Is(err, timedOut) {
		t.Fatalf("a check past its timeout: %v, want %v", err, timedOut)
	}
	runtimetest.Ended(t, filepath.Join(work, "sleep.pid"), 10*time.Second)

	p.Stop(0)
	<-p.Done()
	if err := check(t.Context(), "/bin/true"); err == nil || !strings.Contains(err.Error(), "the task has ended") {
		t.Fatalf("a check after the task's end: %v", err)
	}
}
