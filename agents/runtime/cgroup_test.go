package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// The test binary doubles as a task: with TROUPE_TEST_ALLOC_MIB set it
// allocates that much memory, once it runs inside a troupe cgroup; and as
// a health check: with TROUPE_TEST_CHECK set it writes what it runs as to
// that file (see checkReport).
func TestMain(m *testing.M) {
	if mib := os.Getenv("TROUPE_TEST_ALLOC_MIB"); mib != "" {
		os.Exit(allocate(mib))
	}
	if out := os.Getenv("TROUPE_TEST_CHECK"); out != "" {
		os.Exit(checkReport(out))
	}
	os.Exit(m.Run())
}

// awaitTroupeCgroup waits (v1 moves a process in just after it starts)
// until this process is in a troupe memory cgroup, for at most
// wait.DefaultTimeout. It runs in the task's process, outside any test,
// so it polls with wait.Poll and returns the error.
func awaitTroupeCgroup() error {
	return wait.Poll(context.Background(), "this process to be in a troupe cgroup", func() (bool, string) {
		b, err := os.ReadFile("/proc/self/cgroup")
		self := parseSelfCgroup(string(b))
		in := strings.Contains(self["memory"], "/troupe/") || strings.Contains(self[""], "/troupe/")
		return in, fmt.Sprintf("/proc/self/cgroup %q (%v)", b, err)
	})
}

// allocate waits until this process is in a troupe cgroup, then touches
// n MiB.
func allocate(mib string) int {
	n, _ := strconv.Atoi(mib)
	if err := awaitTroupeCgroup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var keep [][]byte
	for range n {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	fmt.Println("allocated", len(keep), "MiB")
	return 0
}

// hostCgroups returns this host's cgroups, or skips the test saying why
// there are none to use.
func hostCgroups(t *testing.T) *Cgroups {
	t.Helper()
	cg, err := DetectCgroups()
	if err != nil {
		t.Skipf("no writable cgroups on this host: %v", err)
	}
	return cg
}

const mountinfoV1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 /outer /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const selfV1 = `9:name=systemd:/
4:memory:/outer/agent
1:cpu:/
0::/
`

func TestParseCgroupMounts(t *testing.T) {
	mounts := parseMounts(mountinfoV1)
	if len(mounts) != 4 || !mounts[3].v2 || mounts[3].point != "/sys/fs/cgroup/unified" {
		t.Fatalf("mounts %+v", mounts)
	}
	self := parseSelfCgroup(selfV1)
	mem := mounts[2]
	if got := mem.dirOf(self["memory"]); got != "/sys/fs/cgroup/memory/agent" {
		t.Fatalf("memory cgroup of the agent: %s (mount %+v, self %v)", got, mem, self)
	}
	if self[""] != "/" || self["cpu"] != "/" {
		t.Fatalf("self %v", self)
	}
}

// Without a cpu or memory hierarchy, detection says what is missing.
func TestDetectCgroupsSaysWhyNot(t *testing.T) {
	_, err := detectCgroups(parseMounts("41 31 0:38 / /nonexistent rw - cgroup2 cgroup2 rw\n"), map[string]string{"": "/"})
	if err == nil || !strings.Contains(err.Error(), "v2 at /nonexistent") || !strings.Contains(err.Error(), "no cpu hierarchy") {
		t.Fatalf("err %v", err)
	}
}

// A v2 hierarchy (a directory standing in for cgroupfs): the troupe
// parent gets the cpu and memory controllers, and a task's cgroup its
// cpu.max and memory.max.
func TestCgroupV2Files(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := detectCgroups(parseMounts("41 31 0:38 / "+root+" rw - cgroup2 cgroup2 rw\n"), map[string]string{"": "/"})
	if err != nil || !c.v2 || c.cpu != filepath.Join(root, "troupe") {
		t.Fatalf("detected %+v, %v", c, err)
	}
	for _, f := range []string{filepath.Join(root, "cgroup.subtree_control"), filepath.Join(root, "troupe", "cgroup.subtree_control")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "+cpu +memory" {
			t.Fatalf("%s: %q %v", f, b, err)
		}
	}
	g, err := c.create("ns/web/3", 1500, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := g.open()
	if err != nil || fd == nil {
		t.Fatalf("open for a process to start inside: %v %v", fd, err)
	}
	fd.Close()
	if !strings.HasPrefix(filepath.Base(g.cpu), "ns_web_3-") {
		t.Fatalf("cgroup %+v", g)
	}
	for f, want := range map[string]string{"cpu.max": "150000 100000", "memory.max": "67108864", "memory.swap.max": "0"} {
		if b, err := os.ReadFile(g.file(f)); err != nil || string(b) != want {
			t.Fatalf("%s: %q %v, want %q", f, b, err, want)
		}
	}
	if err := os.WriteFile(g.file("memory.events"), []byte("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !g.oomKilled(false) {
		t.Fatal("oom_kill 1 is an OOM kill")
	}
}

func TestLimitsAndQuota(t *testing.T) {
	cpu, mem := limits(map[string]int64{"memory": 100}, map[string]int64{"cpu": 250, "memory": 50})
	if cpu != 250 || mem != 100 {
		t.Fatalf("limits: cpu %d memory %d", cpu, mem)
	}
	if cpuQuota(250) != 25_000 || cpuQuota(4000) != 400_000 || cpuQuota(1) != 1000 {
		t.Fatalf("quotas %d %d %d", cpuQuota(250), cpuQuota(4000), cpuQuota(1))
	}
}

// A task's cgroup on this host has its CPU quota and memory limit, and is
// gone once removed.
func TestCgroupCPUQuota(t *testing.T) {
	c := hostCgroups(t)
	g, err := c.create("ns/quota/0", 250, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cpu.cfs_quota_us": "25000", "cpu.cfs_period_us": "100000", "memory.limit_in_bytes": "67108864"}
	if c.v2 {
		want = map[string]string{"cpu.max": "25000 100000", "memory.max": "67108864"}
	}
	for f, v := range want {
		if b, err := os.ReadFile(g.file(f)); err != nil || strings.TrimSpace(string(b)) != v {
			t.Errorf("%s: %q %v, want %s", g.file(f), b, err, v)
		}
	}
	if err := g.remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", d, err)
		}
	}
}

// A task that allocates more than its memory limit is killed by the
// kernel, and its exit says OOMKilled; within its limit, the same task
// succeeds. Its cgroups go when it ends.
func TestExecOOMKilled(t *testing.T) {
	c := hostCgroups(t)
	self := runtimetest.Executable(t)
	rt := &Exec{Dir: runtimetest.Dir(t), Cgroups: c}
	run := func(job string, limit int64) Exit {
		b := &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/" + job + "/0"}, Machine: "m",
			Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: self, Env: map[string]string{"TROUPE_TEST_ALLOC_MIB": "64"},
				Limits: map[string]int64{"memory": limit}}}}
		p, err := rt.Start(context.Background(), b, DefaultTaskUser())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(60 * time.Second):
			p.Stop(0)
			t.Fatalf("%s: the task neither ended nor was killed", job)
		}
		if left, _ := filepath.Glob(filepath.Join(c.memory, "ns_"+job+"_0-*")); len(left) != 0 {
			t.Fatalf("cgroups left behind: %v", left)
		}
		out, _ := os.ReadFile(filepath.Join(rt.TaskDir("ns/"+job+"/0"), "stdout.log"))
		errOut, _ := os.ReadFile(filepath.Join(rt.TaskDir("ns/"+job+"/0"), "stderr.log"))
		t.Logf("%s: exit %+v, stdout %q, stderr %q", job, p.Exit(), out, errOut)
		return p.Exit()
	}
	if e := run("oom", 16<<20); e.Reason != "OOMKilled" || e.Code != 137 || e.Killed {
		t.Fatalf("exit %+v, want OOMKilled", e)
	}
	if e := run("fits", 256<<20); e.Code != 0 {
		t.Fatalf("exit %+v within the limit, want 0", e)
	}
}
