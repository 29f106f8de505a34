package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups confines exec tasks: each run of a task gets its own cgroup,
// <parent>/<namespace>_<job>_<index>-<unique>, where parent is "troupe"
// under the agent's own cgroup, with a CPU quota and a memory limit; the
// cgroup goes when the run ends, and whatever still runs in it is killed.
//
// cgroup v2 (a unified hierarchy whose cgroup.controllers has cpu and
// memory) starts the process inside its cgroup (clone3 with
// CLONE_INTO_CGROUP, Linux 5.7). cgroup v1 (a hierarchy per controller)
// moves the process in right after it started: until then, for the few
// microseconds between fork and the write to cgroup.procs, it runs
// unconfined, and what it forks or allocates in that window stays outside.
type Cgroups struct {
	v2 bool
	// cpu and memory are where task cgroups are made in each controller's
	// hierarchy (the same directory in v2).
	cpu, memory string
}

// cpuPeriod is the CFS period of task quotas, in microseconds.
const cpuPeriod = 100_000

// DetectCgroups finds where this process may make cgroups with the cpu and
// memory controllers and makes its "troupe" parent there; the error says
// why it cannot.
func DetectCgroups() (*Cgroups, error) {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	return detectCgroups(parseMounts(string(mountinfo)), parseSelfCgroup(string(self)))
}

// cgroupMount is a mounted cgroup hierarchy.
type cgroupMount struct {
	point, root string
	v2          bool
	// controllers of a v1 hierarchy (its super options).
	controllers []string
}

// parseMounts returns the cgroup hierarchies of /proc/self/mountinfo.
func parseMounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(mountinfo, "\n") {
		// id parent major:minor root point options [optional...] - type source super
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			out = append(out, cgroupMount{point: f[4], root: f[3], v2: true})
		case "cgroup":
			out = append(out, cgroupMount{point: f[4], root: f[3], controllers: strings.Split(g[2], ",")})
		}
	}
	return out
}

// parseSelfCgroup maps each controller of /proc/self/cgroup to this
// process's cgroup path in its hierarchy; "" is the v2 hierarchy's.
func parseSelfCgroup(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		// id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// dirOf is the directory of cgroup path p of hierarchy m.
func (m cgroupMount) dirOf(p string) string {
	rel := strings.TrimPrefix(p, m.root)
	return filepath.Join(m.point, filepath.FromSlash(rel))
}

// detectCgroups prefers v2 when its hierarchy has both controllers, and
// falls back to v1.
func detectCgroups(mounts []cgroupMount, self map[string]string) (*Cgroups, error) {
	var why []string
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		own := m.dirOf(self[""])
		ctrls, err := os.ReadFile(filepath.Join(own, "cgroup.controllers"))
		if err != nil {
			why = append(why, fmt.Sprintf("v2 at %s: %v", m.point, err))
			continue
		}
		if have := strings.Fields(string(ctrls)); !slices.Contains(have, "cpu") || !slices.Contains(have, "memory") {
			why = append(why, fmt.Sprintf("v2 at %s: %s has controllers %q, not cpu and memory", m.point, own, have))
			continue
		}
		parent := filepath.Join(own, "troupe")
		if err := setupV2(own, parent); err != nil {
			why = append(why, "v2: "+err.Error())
			continue
		}
		return &Cgroups{v2: true, cpu: parent, memory: parent}, nil
	}
	c := &Cgroups{}
	for _, ctrl := range []struct {
		name string
		dst  *string
	}{{"cpu", &c.cpu}, {"memory", &c.memory}} {
		i := slices.IndexFunc(mounts, func(m cgroupMount) bool { return slices.Contains(m.controllers, ctrl.name) })
		if i < 0 {
			why = append(why, "v1: no "+ctrl.name+" hierarchy mounted")
			return nil, fmt.Errorf("cgroups: %s", strings.Join(why, "; "))
		}
		parent := filepath.Join(mounts[i].dirOf(self[ctrl.name]), "troupe")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			why = append(why, fmt.Sprintf("v1 %s: %v", ctrl.name, err))
			return nil, fmt.Errorf("cgroups: %s", strings.Join(why, "; "))
		}
		*ctrl.dst = parent
	}
	return c, nil
}

// setupV2 makes parent under own with the cpu and memory controllers
// enabled for its children. That fails (EBUSY) when own holds processes
// and is not the root: the agent must then run in a cgroup delegated to
// it, with itself in a leaf below.
func setupV2(own, parent string) error {
	enable := func(dir string) error {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu +memory"), 0o644); err != nil {
			return fmt.Errorf("enable cpu and memory for the children of %s: %w", dir, err)
		}
		return nil
	}
	if err := enable(own); err != nil {
		return err
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return enable(parent)
}

// cgroup is one run's cgroup: a directory per hierarchy in v1.
type cgroup struct {
	v2          bool
	cpu, memory string
}

// dirs are the cgroup's directories, each once.
func (g *cgroup) dirs() []string {
	if g.v2 {
		return []string{g.cpu}
	}
	return []string{g.cpu, g.memory}
}

// limits are a template's CPU (millicores) and memory (bytes) limits,
// or its requests where it sets no limit; 0 is no limit.
func limits(limits, requests map[string]int64) (cpu, memory int64) {
	get := func(name string) int64 {
		if v := limits[name]; v > 0 {
			return v
		}
		return requests[name]
	}
	return get("cpu"), get("memory")
}

// cpuQuota is the CFS quota, in microseconds per cpuPeriod, of millicores
// (at least the kernel's minimum of 1 ms).
func cpuQuota(millicores int64) int64 { return max(millicores*cpuPeriod/1000, 1000) }

// create makes a cgroup for a run of task ref with the given limits.
func (c *Cgroups) create(ref string, cpu, memory int64) (*cgroup, error) {
	name := fmt.Sprintf("%s-%d", strings.ReplaceAll(ref, "/", "_"), time.Now().UnixNano())
	g := &cgroup{v2: c.v2, cpu: filepath.Join(c.cpu, name), memory: filepath.Join(c.memory, name)}
	for _, d := range g.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	if err := g.limit(cpu, memory); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// limit writes the CPU quota and the memory limit; swap is not allowed
// beyond the memory limit (v1 memsw, v2 memory.swap.max) where the kernel
// accounts it.
func (g *cgroup) limit(cpu, memory int64) error {
	var files [][2]string // file, value
	if cpu > 0 {
		q := cpuQuota(cpu)
		if g.v2 {
			files = append(files, [2]string{"cpu.max", fmt.Sprintf("%d %d", q, cpuPeriod)})
		} else {
			files = append(files, [2]string{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)}, [2]string{"cpu.cfs_quota_us", strconv.FormatInt(q, 10)})
		}
	}
	if memory > 0 {
		m := strconv.FormatInt(memory, 10)
		if g.v2 {
			files = append(files, [2]string{"memory.max", m}, [2]string{"memory.swap.max", "0"})
		} else {
			files = append(files, [2]string{"memory.limit_in_bytes", m}, [2]string{"memory.memsw.limit_in_bytes", m})
		}
	}
	for _, f := range files {
		path := g.file(f[0])
		err := os.WriteFile(path, []byte(f[1]), 0o644)
		if err != nil && !(strings.Contains(f[0], "swap") && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("cgroup: set %s to %s: %w", path, f[1], err)
		}
	}
	return nil
}

// file is the path of a control file, in the hierarchy of its controller.
func (g *cgroup) file(name string) string {
	if strings.HasPrefix(name, "memory.") {
		return filepath.Join(g.memory, name)
	}
	return filepath.Join(g.cpu, name)
}

// open opens a v2 cgroup, for a process to start inside
// (SysProcAttr.CgroupFD); the caller closes it once the process started.
// It is nil in v1, where join moves the process in.
func (g *cgroup) open() (*os.File, error) {
	if !g.v2 {
		return nil, nil
	}
	fd, err := os.Open(g.cpu)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return fd, nil
}

// join moves process pid, just started, into a v1 cgroup; a v2 process
// started inside (see open).
func (g *cgroup) join(pid int) error {
	if g.v2 {
		return nil
	}
	for _, d := range g.dirs() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup: move %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// oomKilled says whether the kernel's OOM killer killed a process of the
// cgroup (its oom_kill count: memory.events in v2, memory.oom_control in
// v1). Old v1 kernels without the count: the memory limit was hit
// (failcnt) and signalled says the process died of SIGKILL.
func (g *cgroup) oomKilled(sigkilled bool) bool {
	name := "memory.oom_control"
	if g.v2 {
		name = "memory.events"
	}
	if n, ok := readCount(g.file(name), "oom_kill"); ok {
		return n > 0
	}
	n, _ := readCount(g.file("memory.failcnt"), "")
	return sigkilled && n > 0
}

// readCount reads the value of key in a flat-keyed cgroup file ("key n"
// lines), or the whole file's number when key is "".
func readCount(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	if key == "" {
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// remove kills what still runs in the cgroup (the run's main process has
// ended) and removes its directories, waiting up to a second for the
// killed processes to leave.
func (g *cgroup) remove() error {
	var errs []error
	for _, d := range g.dirs() {
		if g.v2 && os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644) == nil {
			continue
		}
		procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	deadline := time.Now().Add(time.Second)
	for _, d := range g.dirs() {
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", d, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
