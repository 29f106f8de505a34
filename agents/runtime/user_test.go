package runtime

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// shell is a binding of task ns/<job>/0 running script with /bin/sh.
func shell(job, script string) *troupev1.Binding {
	return &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/" + job + "/0"}, Machine: "m",
		Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", script}}}}
}

// runToEnd starts b as user and waits for its end; it returns the task's
// exit, stdout and stderr.
func runToEnd(t *testing.T, rt *Exec, b *troupev1.Binding, user string) (Exit, string, string) {
	t.Helper()
	p, err := rt.Start(context.Background(), b, user)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		p.Stop(0)
		t.Fatalf("task %s did not end", b.GetMetadata().GetName())
	}
	dir := rt.TaskDir(b.GetMetadata().GetName())
	stdout, err := os.ReadFile(filepath.Join(dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.ReadFile(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	return p.Exit(), string(stdout), string(stderr)
}

// owner returns the uid and permission bits of path.
func owner(t *testing.T, path string) (uint32, os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid, st.Mode().Perm()
}

// A task runs as its user (uid, gid and that user's groups, nothing of
// the agent's), in a working directory only that user may read; a task of
// another user can read neither it nor the first task's logs. Needs root
// and useradd: it makes two users.
func TestExecRunsAsUser(t *testing.T) {
	alice, bob := runtimetest.User(t), runtimetest.User(t)
	rt := &Exec{Dir: runtimetest.Dir(t)}

	first := shell("first", `id -u; id -g; id -G; echo "$USER $HOME"; pwd; echo secret > secret`)
	exit, out, errOut := runToEnd(t, rt, first, alice.Username)
	if exit.Code != 0 {
		t.Fatalf("first task: exit %+v, stderr %q", exit, errOut)
	}
	groups, err := alice.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	dir := rt.TaskDir("ns/first/0")
	work := filepath.Join(dir, "work")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != alice.Uid || lines[1] != alice.Gid || lines[3] != alice.Username+" "+alice.HomeDir || lines[4] != work {
		t.Fatalf("first task's output %q; want uid %s, gid %s, user %s, working directory %s", out, alice.Uid, alice.Gid, alice.Username, work)
	}
	if got := strings.Fields(lines[2]); !sameSet(got, groups) {
		t.Fatalf("first task's groups %v, want %s's: %v", got, alice.Username, groups)
	}
	for _, f := range []struct {
		path string
		uid  string
		mode os.FileMode
	}{{work, alice.Uid, 0o700}, {dir, "0", 0o711}, {filepath.Join(dir, "stdout.log"), "0", 0o600}, {filepath.Join(dir, "stderr.log"), "0", 0o600}} {
		if uid, mode := owner(t, f.path); strconv.Itoa(int(uid)) != f.uid || mode != f.mode {
			t.Errorf("%s: uid %d, mode %#o; want uid %s, mode %#o", f.path, uid, mode, f.uid, f.mode)
		}
	}

	// bob reads nothing of alice's task: each attempt's exit status is
	// printed, and must not be 0.
	second := shell("second", "cat "+filepath.Join(work, "secret")+"; echo $?; ls "+work+"; echo $?; cat "+filepath.Join(dir, "stdout.log")+"; echo $?")
	exit, out, errOut = runToEnd(t, rt, second, bob.Username)
	if exit.Code != 0 {
		t.Fatalf("second task: exit %+v, stderr %q", exit, errOut)
	}
	statuses := strings.Fields(out)
	if len(statuses) != 3 || slices.Contains(statuses, "0") || strings.Count(errOut, "Permission denied") != 3 {
		t.Fatalf("%s read %s's task: stdout %q, stderr %q", bob.Username, alice.Username, out, errOut)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// A task whose user is root (uid 0) is refused, whoever the agent runs
// as, before anything is made or started.
func TestExecRefusesRoot(t *testing.T) {
	rt := &Exec{Dir: runtimetest.Dir(t)}
	marker := filepath.Join(rt.Dir, "started")
	b := shell("root", "touch "+marker)
	_, err := rt.Start(context.Background(), b, "root")
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Start as root: %v, want ErrRefused", err)
	}
	for _, p := range []string{marker, rt.TaskDir("ns/root/0")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s exists (%v): the refused task started", p, err)
		}
	}
}

// A task without a user of its own runs as the default task user: nobody
// when the test runs as root, else the test's own user.
func TestExecRunsAsDefaultUser(t *testing.T) {
	u, err := user.Lookup(DefaultTaskUser())
	if err != nil {
		t.Skipf("no default task user here: %v", err)
	}
	rt := &Exec{Dir: runtimetest.Dir(t)}
	exit, out, errOut := runToEnd(t, rt, shell("default", "id -u"), u.Username)
	if exit.Code != 0 || strings.TrimSpace(out) != u.Uid || u.Uid == "0" {
		t.Fatalf("exit %+v, uid %q (stderr %q), want %s's uid %s, not 0", exit, out, errOut, u.Username, u.Uid)
	}
}

// An agent that is not root runs tasks only as itself, without switching;
// one that is root switches to the user, with that user's groups only.
func TestLookupTaskUser(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody here: %v", err)
	}
	other, err := user.Lookup("daemon")
	if err != nil {
		t.Skipf("no user daemon here: %v", err)
	}
	agentUID, _ := strconv.Atoi(nobody.Uid)

	self, err := lookupTaskUser("nobody", agentUID)
	if err != nil || self.cred != nil {
		t.Fatalf("an agent running as nobody, task as nobody: %+v, %v; want no switch", self, err)
	}
	_, err = lookupTaskUser(other.Username, agentUID)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not root") {
		t.Fatalf("an agent running as nobody, task as %s: %v, want refused", other.Username, err)
	}

	switched, err := lookupTaskUser("nobody", 0)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := nobody.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range switched.cred.Groups {
		got = append(got, strconv.Itoa(int(g)))
	}
	if c := switched.cred; strconv.Itoa(int(c.Uid)) != nobody.Uid || strconv.Itoa(int(c.Gid)) != nobody.Gid || !sameSet(got, groups) {
		t.Fatalf("root agent, task as nobody: credential %+v, want uid %s, gid %s, groups %v", c, nobody.Uid, nobody.Gid, groups)
	}
	if _, err := lookupTaskUser("root", 0); !errors.Is(err, ErrRefused) {
		t.Fatalf("root agent, task as root: %v, want refused", err)
	}
}

// A task's environment is its own: the agent's search path, locale and
// time zone, its user's USER, LOGNAME and HOME, its template's env and
// TROUPE_TASK and TROUPE_MACHINE; nothing else of the agent's. Without a
// PATH of the agent's, the usual system one.
func TestExecEnvironmentIsTheTasks(t *testing.T) {
	u, err := user.Lookup(DefaultTaskUser())
	if err != nil {
		t.Skipf("no default task user here: %v", err)
	}
	t.Setenv("TROUPE_AGENT_SECRET", "not for tasks")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TZ", "UTC")
	rt := &Exec{Dir: runtimetest.Dir(t)}
	b := shell("env", "env")
	b.Task.Template.Env = map[string]string{"GREETING": "hello", "TZ": "Europe/Paris"}
	want := map[string]string{
		"PATH": os.Getenv("PATH"), "LANG": "C.UTF-8", "TZ": "Europe/Paris", "GREETING": "hello",
		"USER": u.Username, "LOGNAME": u.Username, "HOME": u.HomeDir,
		"TROUPE_TASK": "ns/env/0", "TROUPE_MACHINE": "m",
	}
	check := func(b *troupev1.Binding, want map[string]string) {
		t.Helper()
		exit, out, errOut := runToEnd(t, rt, b, u.Username)
		if exit.Code != 0 {
			t.Fatalf("exit %+v, stderr %q", exit, errOut)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(line, "=")
			got[k] = v
		}
		delete(got, "PWD") // the shell's own
		if !maps.Equal(got, want) {
			t.Fatalf("task environment %v, want %v", got, want)
		}
	}
	check(b, want)

	t.Setenv("PATH", "")
	os.Unsetenv("PATH")
	want["PATH"] = defaultTaskPath
	b = shell("env2", "env")
	want["TROUPE_TASK"], want["TZ"] = "ns/env2/0", "UTC"
	delete(want, "GREETING")
	check(b, want)
}
