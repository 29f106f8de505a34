// Command composetest runs the compose cell (deploy/compose) end to end,
// as `make compose-test` does: it builds the image (make image), brings a
// cell up under a new compose project, waits for it to be healthy,
// applies deploy/examples with the troupe CLI and sees them succeed (and
// a job on the exec agent that checks its user and cgroup), stops the
// store node leading the cell and sees a new job placed without it,
// starts it again and sees it catch up, then builds the image again as
// VERSION-next and replaces every container one at a time (the
// certificate job, the store nodes, waiting for each to be healthy and
// caught up, then the scheduler, the controller and the agents) while
// clients commit to a counter throughout: no commit may fail, and every
// container must run the new version. It tears the cell down (down -v)
// however it ends, and prints a summary.
//
//	go run ./tools/composetest -version v1.2.3
//
// Every wait is on a condition with a deadline; nothing sleeps to
// synchronise. It needs docker and docker-compose (1.29, or v2 as
// -compose-cmd), and reaches the cell only through ports published on
// 127.0.0.1 and docker exec.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// The compose file's services, in the order they are upgraded.
var (
	storeServices = []string{"store-1", "store-2", "store-3"}
	roleServices  = []string{"scheduler", "controller", "agent-1", "hollow"}
)

const (
	hollowMachines = 100
	counterKey     = "/composetest/counter"
)

type test struct {
	root, composeFile, image string
	version, next            string
	build                    bool
	dir                      string // logs and the admin's files; kept on failure
	c                        *compose
	cell                     *cell
	ports                    map[string]int
	outageCM                 *committer
	// stoppedAt is the stopped node's applied index when it stopped.
	stoppedAt map[uint32]uint64
	steps     []stepResult
	summary   []string
}

type stepResult struct {
	name string
	took time.Duration
	note string
}

func main() {
	var t test
	flag.StringVar(&t.root, "root", ".", "the repository's root (make image runs there; deploy/ is read from there)")
	flag.StringVar(&t.version, "version", "dev", "the version the first image is built as; the upgrade builds <version>-next")
	flag.StringVar(&t.image, "image", "troupe", "image name")
	flag.BoolVar(&t.build, "build", true, "build the images with make image (false: use existing <image>:<version> and <image>:<version>-next)")
	project := flag.String("project", "", "compose project name (default: troupect<random>)")
	composeCmd := flag.String("compose-cmd", "docker-compose", `the compose command: docker-compose (1.29), or "docker compose" (v2)`)
	keep := flag.Bool("keep", false, "leave the cell running at the end (down -v it yourself)")
	timeout := flag.Duration("timeout", 30*time.Minute, "the whole test's deadline")
	flag.Parse()

	t.version = validTag(t.version)
	t.next = validTag(t.version + "-next")
	if *project == "" {
		b := make([]byte, 4)
		rand.Read(b)
		*project = "troupect" + hex.EncodeToString(b)
	}
	var err error
	if t.root, err = filepath.Abs(t.root); err != nil {
		fatal(err)
	}
	t.composeFile = filepath.Join(t.root, "deploy/compose/docker-compose.yml")
	if t.dir, err = os.MkdirTemp("", "troupe-composetest-"); err != nil {
		fatal(err)
	}
	t.c = &compose{cmd: strings.Fields(*composeCmd), file: t.composeFile, project: *project, env: map[string]string{}, logDir: t.dir}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	start := time.Now()
	err = t.run(ctx)
	cancel()
	stop()
	if err != nil {
		fmt.Printf("\nFAILED: %v\n", err)
	}
	// Teardown, whatever happened, with its own deadline.
	tctx, tcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer tcancel()
	if err != nil {
		if out, lerr := t.c.do(tctx, t.imageRef(t.version), "logs", "--no-color", "--timestamps"); lerr == nil {
			p := filepath.Join(t.dir, "compose.log")
			os.WriteFile(p, []byte(out), 0o644)
			fmt.Printf("the containers' logs: %s\n", p)
		}
	}
	if t.outageCM != nil {
		t.outageCM.finish()
	}
	if t.cell != nil {
		t.cell.close()
	}
	if *keep {
		fmt.Printf("left running: %s -p %s -f %s down -v\n", strings.Join(t.c.cmd, " "), t.c.project, t.composeFile)
	} else {
		t0 := time.Now()
		if _, derr := t.c.do(tctx, t.imageRef(t.version), "down", "-v", "--remove-orphans", "-t", "20"); derr != nil {
			fmt.Printf("teardown: %v\n", derr)
			if err == nil {
				err = derr
			}
		} else {
			fmt.Printf("torn down (down -v) in %v\n", time.Since(t0).Round(100*time.Millisecond))
		}
	}
	if t.build {
		// make image tagged :latest as the -next build; put it back on the
		// version built first, and drop the -next tag.
		run(tctx, nil, "docker", "tag", t.imageRef(t.version), t.image+":latest")
		run(tctx, nil, "docker", "rmi", t.imageRef(t.next))
	}
	t.printSummary(time.Since(start), err)
	if err != nil || *keep {
		fmt.Printf("logs and files (the admin's certificate, the CLI): %s\n", t.dir)
	} else {
		os.RemoveAll(t.dir)
	}
	if err != nil {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "composetest:", err)
	os.Exit(1)
}

func (t *test) imageRef(version string) string { return t.image + ":" + version }

// step runs one step with a deadline and records how long it took.
func (t *test) step(ctx context.Context, name string, limit time.Duration, f func(ctx context.Context) (string, error)) error {
	fmt.Printf("==> %s\n", name)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t0 := time.Now()
	note, err := f(ctx)
	took := time.Since(t0)
	if err != nil {
		return fmt.Errorf("%s (after %v): %w", name, took.Round(100*time.Millisecond), err)
	}
	t.steps = append(t.steps, stepResult{name, took, note})
	if note != "" {
		fmt.Printf("    %s\n", strings.ReplaceAll(note, "\n", "\n    "))
	}
	fmt.Printf("    ok (%v)\n", took.Round(100*time.Millisecond))
	return nil
}

func (t *test) run(ctx context.Context) error {
	names := []string{"CELL_STORE1_GRPC", "CELL_STORE2_GRPC", "CELL_STORE3_GRPC", "CELL_STORE1_HTTP", "CELL_STORE2_HTTP",
		"CELL_STORE3_HTTP", "CELL_SCHEDULER_HTTP", "CELL_CONTROLLER_HTTP"}
	ports, err := freePorts(len(names))
	if err != nil {
		return err
	}
	t.ports = map[string]int{}
	for i, n := range names {
		t.ports[n] = ports[i]
		t.c.env[n] = strconv.Itoa(ports[i])
	}
	t.c.env["CELL_BIND"] = "127.0.0.1"
	fmt.Printf("compose project %s, images %s and %s, files in %s\n", t.c.project, t.imageRef(t.version), t.imageRef(t.next), t.dir)

	if t.build {
		if err := t.step(ctx, "make image VERSION="+t.version, 15*time.Minute, func(ctx context.Context) (string, error) {
			return t.makeImage(ctx, t.version)
		}); err != nil {
			return err
		}
	}
	if err := t.step(ctx, "docker-compose up -d", 5*time.Minute, t.up); err != nil {
		return err
	}
	if err := t.step(ctx, "cell healthy", 3*time.Minute, t.healthy); err != nil {
		return err
	}
	if err := t.step(ctx, "deploy/examples applied with the CLI", 4*time.Minute, t.examples); err != nil {
		return err
	}
	if err := t.step(ctx, "a job on the exec agent: its user and cgroup", 2*time.Minute, t.execCheck); err != nil {
		return err
	}
	var down int
	if err := t.step(ctx, "stop the leading store node, place a job without it", 3*time.Minute, func(ctx context.Context) (string, error) {
		var note string
		var err error
		down, note, err = t.outage(ctx)
		return note, err
	}); err != nil {
		return err
	}
	if err := t.step(ctx, "start it again, see it catch up", 3*time.Minute, func(ctx context.Context) (string, error) {
		return t.restart(ctx, down)
	}); err != nil {
		return err
	}
	if t.build {
		if err := t.step(ctx, "make image VERSION="+t.next, 15*time.Minute, func(ctx context.Context) (string, error) {
			return t.makeImage(ctx, t.next)
		}); err != nil {
			return err
		}
	}
	return t.step(ctx, "rolling upgrade to "+t.next+" under committing clients", 15*time.Minute, t.upgrade)
}

// makeImage runs make image, its output in a log file.
func (t *test) makeImage(ctx context.Context, version string) (string, error) {
	out, err := run(ctx, nil, "make", "-C", t.root, "image", "VERSION="+version, "IMAGE="+t.image)
	log := filepath.Join(t.dir, "make-image-"+version+".log")
	os.WriteFile(log, []byte(out), 0o644)
	if err != nil {
		return "", err
	}
	id, err := imageID(ctx, t.imageRef(version))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s is %.19s", t.imageRef(version), id), nil
}

func (t *test) up(ctx context.Context) (string, error) {
	if _, err := t.c.do(ctx, t.imageRef(t.version), "up", "-d"); err != nil {
		return "", err
	}
	// The admin's certificate out of the pki volume, and the troupe
	// binary out of the image, through the certificate job's container.
	certs, err := t.c.container(ctx, "certs")
	if err != nil {
		return "", err
	}
	st, err := inspect(ctx, certs)
	if err != nil {
		return "", err
	}
	if st.status != "exited" || st.exitCode != 0 {
		return "", fmt.Errorf("the certs job is %s with exit code %d", st.status, st.exitCode)
	}
	t.cell = &cell{dir: t.dir, troupe: filepath.Join(t.dir, "troupe")}
	for _, f := range []string{"ca.crt", "admin-admin.crt", "admin-admin.key"} {
		if _, err := run(ctx, nil, "docker", "cp", certs+":/etc/troupe/pki/"+f, filepath.Join(t.dir, f)); err != nil {
			return "", err
		}
	}
	if _, err := run(ctx, nil, "docker", "cp", certs+":/troupe", t.cell.troupe); err != nil {
		return "", err
	}
	for i := range storeServices {
		t.cell.endpoints = append(t.cell.endpoints, fmt.Sprintf("127.0.0.1:%d", t.ports[fmt.Sprintf("CELL_STORE%d_GRPC", i+1)]))
	}
	if err := t.cell.connect(); err != nil {
		return "", err
	}
	return fmt.Sprintf("store gRPC at %s; the admin's certificate and the image's troupe binary copied to %s",
		strings.Join(t.cell.endpoints, ","), t.dir), nil
}

// healthy waits for the store containers' healthchecks, every node's
// status, and every machine registered and ready.
func (t *test) healthy(ctx context.Context) (string, error) {
	for _, s := range storeServices {
		if err := t.waitContainer(ctx, s, ""); err != nil {
			return "", err
		}
	}
	if err := t.cell.allHealthy(ctx); err != nil {
		return "", err
	}
	want := hollowMachines + 1
	err := waitFor(ctx, fmt.Sprintf("%d machines ready", want), func() (bool, string, error) {
		ms, err := t.cell.machines(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		n := 0
		for _, m := range ms {
			if m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_READY {
				n++
			}
		}
		return n == want, fmt.Sprintf("%d ready of %d", n, len(ms)), nil
	})
	if err != nil {
		return "", err
	}
	out, err := t.cell.cli(ctx, "status")
	return strings.TrimSpace(out) + fmt.Sprintf("\n%d machines ready (agent-1 and rack1-hollow-0000..%04d)", want, hollowMachines-1), err
}

// waitContainer waits until service's container runs, healthy if it has
// a healthcheck, from image (an image ID; "" for any).
func (t *test) waitContainer(ctx context.Context, service, image string) error {
	return waitFor(ctx, service+" running and healthy", func() (bool, string, error) {
		id, err := t.c.container(ctx, service)
		if err != nil || id == "" {
			return false, fmt.Sprintf("no container (%v)", err), nil
		}
		st, err := inspect(ctx, id)
		if err != nil {
			return false, err.Error(), nil
		}
		if image != "" && st.image != image {
			return false, "the old image's container", nil
		}
		if st.status == "exited" || st.status == "dead" {
			return false, "", fmt.Errorf("%s %s with exit code %d", service, st.status, st.exitCode)
		}
		return st.status == "running" && (st.health == "" || st.health == "healthy"), st.status + " " + st.health, nil
	})
}

func (t *test) examples(ctx context.Context) (string, error) {
	out, err := t.cell.cli(ctx, "apply", "-f", filepath.Join(t.root, "deploy/examples"))
	if err != nil {
		return "", err
	}
	note := strings.TrimSpace(out)
	hello, err := t.cell.waitJob(ctx, "hello", "SUCCEEDED", func(s *troupev1.JobStatus) bool {
		return s.GetPhase() == troupev1.JobPhase_JOB_PHASE_SUCCEEDED
	})
	if err != nil {
		return "", err
	}
	web, err := t.cell.waitJob(ctx, "web", "RUNNING with 3 tasks running", func(s *troupev1.JobStatus) bool {
		return s.GetPhase() == troupev1.JobPhase_JOB_PHASE_RUNNING && s.GetRunning() == 3
	})
	if err != nil {
		return "", err
	}
	note += fmt.Sprintf("\nhello %s (%d succeeded), web %s (%d running)", hello.GetStatus().GetPhase(), hello.GetStatus().GetSucceeded(),
		web.GetStatus().GetPhase(), web.GetStatus().GetRunning())
	jobs, err := t.cell.cli(ctx, "get", "jobs")
	return note + "\n" + strings.TrimSpace(jobs), err
}

// execCheckJob runs on the exec agent (label runtime=exec) and succeeds
// only as nobody (65534) with its shell inside its task cgroup. (The
// shell's, not a child's: on cgroup v1 the agent moves the process into
// its cgroup after it started, and a child forked before that, such as
// the first command of a script, stays outside.)
const execCheckJob = `apiVersion: troupe/v1
kind: Job
metadata:
  name: exec-check
  namespace: default
spec:
  type: JOB_TYPE_BATCH
  count: 1
  restartPolicy: RESTART_POLICY_NEVER
  template:
    command: /bin/sh
    args: ["-c", "echo user $(id -un) uid $(id -u); grep -E '^[0-9]+:memory:' /proc/$$/cgroup; test $(id -u) = 65534 && grep -Eq '^[0-9]+:memory:.*/troupe/default_exec-check_0-' /proc/$$/cgroup"]
    requests: {cpu: 100, memory: 16777216}
  constraints:
    matchLabels: {runtime: exec}
`

func (t *test) execCheck(ctx context.Context) (string, error) {
	p, err := writeFile(t.dir, "exec-check.yaml", execCheckJob)
	if err != nil {
		return "", err
	}
	if _, err := t.cell.cli(ctx, "apply", "-f", p); err != nil {
		return "", err
	}
	if _, err := t.cell.waitJob(ctx, "exec-check", "SUCCEEDED", func(s *troupev1.JobStatus) bool {
		return s.GetPhase() == troupev1.JobPhase_JOB_PHASE_SUCCEEDED
	}); err != nil {
		return "", err
	}
	agent, err := t.c.container(ctx, "agent-1")
	if err != nil {
		return "", err
	}
	out, err := run(ctx, nil, "docker", "exec", agent, "/bin/cat", "/var/lib/troupe/tasks/default/exec-check/0/stdout.log")
	if err != nil {
		return "", err
	}
	return "its output on agent-1: " + strings.TrimSpace(out), nil
}

// outage stops the store node leading shard 0 while clients commit,
// and applies a job, which must be placed (every task bound to a
// machine) while it is down.
func (t *test) outage(ctx context.Context) (int, string, error) {
	down, err := t.cell.leader(ctx)
	if err != nil {
		return 0, "", err
	}
	if t.outageCM, err = t.startCommitter(); err != nil {
		return 0, "", err
	}
	svc := storeServices[down]
	// What it has applied just before it stops: what it lacks when it
	// starts again is, nearly, what the others applied since.
	if t.stoppedAt, err = t.cell.nodeApplied(ctx, down); err != nil {
		return 0, "", err
	}
	t0 := time.Now()
	if _, err := t.c.do(ctx, t.imageRef(t.version), "stop", svc); err != nil {
		return 0, "", err
	}
	stopped := time.Since(t0)
	job := hollowJob("during-outage", 10, "2s")
	p, err := writeFile(t.dir, "during-outage.yaml", job)
	if err != nil {
		return 0, "", err
	}
	t1 := time.Now()
	if _, err := t.cell.cli(ctx, "apply", "-f", p); err != nil {
		return 0, "", err
	}
	applied := time.Since(t1)
	var created time.Duration
	err = waitFor(ctx, "the 10 tasks of during-outage bound", func() (bool, string, error) {
		ts, err := t.cell.tasks(ctx, "during-outage")
		if err != nil {
			return false, err.Error(), nil
		}
		if len(ts) == 10 && created == 0 {
			created = time.Since(t1)
		}
		bound := 0
		for _, tk := range ts {
			if tk.GetBinding().GetMachine() != "" {
				bound++
			}
		}
		return bound == 10, fmt.Sprintf("%d of %d tasks bound", bound, len(ts)), nil
	})
	if err != nil {
		return 0, "", err
	}
	placed := time.Since(t1)
	if _, err := t.cell.waitJob(ctx, "during-outage", "SUCCEEDED", func(s *troupev1.JobStatus) bool {
		return s.GetPhase() == troupev1.JobPhase_JOB_PHASE_SUCCEEDED
	}); err != nil {
		return 0, "", err
	}
	newLeader, _ := t.cell.leader(ctx)
	return down, fmt.Sprintf("stopped %s (leader of shard 0) in %v, store-%d leads now; job during-outage applied in %v, "+
		"its 10 tasks created %v and all placed %v after the apply began, SUCCEEDED after %v",
		svc, stopped.Round(100*time.Millisecond), newLeader+1, applied.Round(time.Millisecond), created.Round(100*time.Millisecond),
		placed.Round(100*time.Millisecond), time.Since(t1).Round(100*time.Millisecond)), nil
}

func (t *test) restart(ctx context.Context, down int) (string, error) {
	svc := storeServices[down]
	t0 := time.Now()
	if _, err := t.c.do(ctx, t.imageRef(t.version), "start", svc); err != nil {
		return "", err
	}
	target, err := t.cell.othersApplied(ctx, down)
	if err != nil {
		return "", err
	}
	if err := t.cell.catchUp(ctx, down, target); err != nil {
		return "", err
	}
	caughtUp := time.Since(t0)
	if err := t.waitContainer(ctx, svc, ""); err != nil {
		return "", err
	}
	healthy := time.Since(t0)
	if err := t.cell.allHealthy(ctx); err != nil {
		return "", err
	}
	cm := t.outageCM
	t.outageCM = nil
	cm.finish()
	t.summary = append(t.summary, cm.report("the store outage"))
	if err := cm.check(); err != nil {
		return "", fmt.Errorf("during the store outage: %w", err)
	}
	status, err := t.cell.cli(ctx, "status")
	return fmt.Sprintf("%s had applied %v just before it stopped, the others %v when it started: %d entries behind; "+
		"it reached their index %v after start; healthy (docker) after %v\n%s",
		svc, t.stoppedAt, target, lag(t.stoppedAt, target), caughtUp.Round(100*time.Millisecond), healthy.Round(100*time.Millisecond),
		strings.TrimSpace(status)), err
}

// startCommitter starts two clients committing to the counter, going
// through the nodes in opposite orders so that some client's current
// node is the one stopped or replaced, whichever it is.
func (t *test) startCommitter() (*committer, error) {
	var rev []string
	for i := len(t.cell.endpoints) - 1; i >= 0; i-- {
		rev = append(rev, t.cell.endpoints[i])
	}
	cm, err := newCommitter(counterKey, t.cell.creds, [][]string{t.cell.endpoints, rev})
	if err != nil {
		return nil, err
	}
	before, err := counter(context.Background(), t.cell.client, counterKey)
	if err != nil && !strings.Contains(err.Error(), "does not exist") {
		return nil, err
	}
	cm.before = before
	cm.start(10 * time.Millisecond)
	return cm, nil
}

// upgrade replaces every container by one of the -next image, one at a
// time, while clients commit.
func (t *test) upgrade(ctx context.Context) (string, error) {
	nextID, err := imageID(ctx, t.imageRef(t.next))
	if err != nil {
		return "", err
	}
	cm, err := t.startCommitter()
	if err != nil {
		return "", err
	}
	finished := false
	defer func() {
		if !finished {
			cm.finish()
		}
	}()
	var notes []string
	// The certificate job first: it runs again from the new image and
	// keeps every certificate.
	t0 := time.Now()
	if _, err := t.c.do(ctx, t.imageRef(t.next), "up", "-d", "--no-deps", "certs"); err != nil {
		return "", err
	}
	err = waitFor(ctx, "the certs job of the new image to exit 0", func() (bool, string, error) {
		id, err := t.c.container(ctx, "certs")
		if err != nil || id == "" {
			return false, "no container", nil
		}
		st, err := inspect(ctx, id)
		if err != nil {
			return false, err.Error(), nil
		}
		if st.image != nextID {
			return false, "old image", nil
		}
		if st.status == "exited" && st.exitCode != 0 {
			return false, "", fmt.Errorf("the certs job exited %d", st.exitCode)
		}
		return st.status == "exited", st.status, nil
	})
	if err != nil {
		return "", err
	}
	notes = append(notes, fmt.Sprintf("%-10s  ran again in %v, kept the CA and every certificate", "certs", time.Since(t0).Round(100*time.Millisecond)))

	for i, svc := range storeServices {
		before, err := t.cell.nodeApplied(ctx, i)
		if err != nil {
			return "", err
		}
		t0 := time.Now()
		if _, err := t.c.do(ctx, t.imageRef(t.next), "up", "-d", "--no-deps", svc); err != nil {
			return "", err
		}
		replaced := time.Since(t0)
		target, err := t.cell.othersApplied(ctx, i)
		if err != nil {
			return "", err
		}
		behind := lag(before, target)
		if err := t.cell.catchUp(ctx, i, target); err != nil {
			return "", err
		}
		caughtUp := time.Since(t0)
		if err := t.waitContainer(ctx, svc, nextID); err != nil {
			return "", err
		}
		if err := t.cell.allHealthy(ctx); err != nil {
			return "", err
		}
		notes = append(notes, fmt.Sprintf("%-10s  replaced in %v, %d entries behind then; caught up %v after the replacement began; healthy (docker) after %v",
			svc, replaced.Round(100*time.Millisecond), behind, caughtUp.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond)))
	}
	for _, svc := range roleServices {
		t0 := time.Now()
		if _, err := t.c.do(ctx, t.imageRef(t.next), "up", "-d", "--no-deps", svc); err != nil {
			return "", err
		}
		replaced := time.Since(t0)
		if err := t.waitContainer(ctx, svc, nextID); err != nil {
			return "", err
		}
		var what string
		switch svc {
		case "scheduler", "controller":
			port := t.ports["CELL_"+strings.ToUpper(svc)+"_HTTP"]
			url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
			err = waitFor(ctx, svc+" serving the new version", func() (bool, string, error) {
				v, err := buildVersion(ctx, url)
				if err != nil {
					return false, err.Error(), nil
				}
				return v == t.next, "troupe_build_info version " + v, nil
			})
			what = "serving /metrics"
		case "agent-1":
			err = t.cell.renewedSince(ctx, "agent-1", 1, t0)
			what = "renewing agent-1's lease"
		case "hollow":
			err = t.cell.renewedSince(ctx, "rack1-hollow-", hollowMachines, t0)
			what = fmt.Sprintf("renewing the %d hollow machines' leases", hollowMachines)
		}
		if err != nil {
			return "", err
		}
		notes = append(notes, fmt.Sprintf("%-10s  replaced in %v, %s after %v", svc, replaced.Round(100*time.Millisecond), what,
			time.Since(t0).Round(100*time.Millisecond)))
	}

	// The cell works on the new version: a job on the exec agent and on
	// the hollow machines, placed, run and marked done by the new
	// scheduler, controller and agents, and web still running.
	job := `apiVersion: troupe/v1
kind: Job
metadata: {name: after-upgrade, namespace: default}
spec:
  type: JOB_TYPE_BATCH
  count: 1
  restartPolicy: RESTART_POLICY_NEVER
  template:
    command: /bin/sh
    args: ["-c", "echo upgraded"]
    requests: {cpu: 100, memory: 16777216}
  constraints:
    matchLabels: {runtime: exec}
---
` + hollowJob("after-upgrade-hollow", 20, "1s")
	p, err := writeFile(t.dir, "after-upgrade.yaml", job)
	if err != nil {
		return "", err
	}
	t1 := time.Now()
	if _, err := t.cell.cli(ctx, "apply", "-f", p); err != nil {
		return "", err
	}
	for _, j := range []string{"after-upgrade", "after-upgrade-hollow"} {
		if _, err := t.cell.waitJob(ctx, j, "SUCCEEDED", func(s *troupev1.JobStatus) bool {
			return s.GetPhase() == troupev1.JobPhase_JOB_PHASE_SUCCEEDED
		}); err != nil {
			return "", err
		}
	}
	if _, err := t.cell.waitJob(ctx, "web", "RUNNING with 3 tasks running", func(s *troupev1.JobStatus) bool {
		return s.GetPhase() == troupev1.JobPhase_JOB_PHASE_RUNNING && s.GetRunning() == 3
	}); err != nil {
		return "", err
	}
	notes = append(notes, fmt.Sprintf("after the upgrade: jobs after-upgrade (exec agent) and after-upgrade-hollow (20 tasks) SUCCEEDED %v after apply; web RUNNING, 3 running",
		time.Since(t1).Round(100*time.Millisecond)))

	cm.finish()
	finished = true
	t.summary = append(t.summary, cm.report("the rolling upgrade"))
	if err := cm.check(); err != nil {
		return "", fmt.Errorf("during the upgrade: %w", err)
	}

	versions, err := t.versions(ctx, nextID)
	if err != nil {
		return "", err
	}
	notes = append(notes, versions...)
	return strings.Join(notes, "\n"), nil
}

// versions checks that every container runs the new image and reports
// the new version: the store nodes, scheduler and controller in
// troupe_build_info, the agents (which serve no metrics) with troupe
// version in their container.
func (t *test) versions(ctx context.Context, nextID string) ([]string, error) {
	var out []string
	for i, svc := range append(append([]string{}, storeServices...), roleServices...) {
		id, err := t.c.container(ctx, svc)
		if err != nil {
			return nil, err
		}
		st, err := inspect(ctx, id)
		if err != nil {
			return nil, err
		}
		if st.image != nextID || st.status != "running" {
			return nil, fmt.Errorf("%s is %s from image %.19s, not %s (%.19s)", svc, st.status, st.image, t.imageRef(t.next), nextID)
		}
		var v, how string
		switch svc {
		case "scheduler", "controller":
			v, err = buildVersion(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", t.ports["CELL_"+strings.ToUpper(svc)+"_HTTP"]))
			how = "troupe_build_info"
		case "agent-1", "hollow":
			var o string
			o, err = run(ctx, nil, "docker", "exec", id, "/troupe", "version")
			if f := strings.Fields(o); err == nil && len(f) >= 2 {
				v = f[1]
			}
			how = "troupe version"
		default:
			v, err = buildVersion(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", t.ports[fmt.Sprintf("CELL_STORE%d_HTTP", i+1)]))
			how = "troupe_build_info"
		}
		if err != nil {
			return nil, err
		}
		if v != t.next {
			return nil, fmt.Errorf("%s reports version %q, not %q", svc, v, t.next)
		}
		out = append(out, fmt.Sprintf("%-10s  version %s (%s), image %.19s", svc, v, how, st.image))
	}
	return out, nil
}

func (t *test) printSummary(total time.Duration, err error) {
	fmt.Printf("\n==== composetest summary (project %s) ====\n", t.c.project)
	for _, s := range t.steps {
		fmt.Printf("%-66s %8v\n", s.name, s.took.Round(100*time.Millisecond))
	}
	for _, s := range t.summary {
		fmt.Println(s)
	}
	fmt.Printf("versions: %s -> %s\n", t.version, t.next)
	result := "PASS"
	if err != nil {
		result = "FAIL"
	}
	fmt.Printf("total %v: %s\n", total.Round(time.Second), result)
}

// hollowJob is a manifest of a batch job of count tasks on the hollow
// machines, each taking simDuration: it tolerates their taint and selects
// their label troupe.io/hollow.
func hollowJob(name string, count int, simDuration string) string {
	return fmt.Sprintf(`apiVersion: troupe/v1
kind: Job
metadata: {name: %s, namespace: default}
spec:
  type: JOB_TYPE_BATCH
  count: %d
  template:
    command: /bin/true
    requests: {cpu: 100, memory: 16777216}
    simDuration: %s
  constraints:
    matchLabels: {troupe.io/hollow: "true"}
  tolerations:
  - {key: troupe.io/hollow, value: "true", effect: TAINT_EFFECT_NO_SCHEDULE}
`, name, count, simDuration)
}
