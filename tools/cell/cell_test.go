package cell_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/cell"
)

type env struct {
	t   *testing.T
	ctx context.Context
	c   *cell.Cell
}

func start(t *testing.T, cfg cell.Config) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	cfg.DataDir, cfg.GRPCAddr = runtimetest.Dir(t), "127.0.0.1:0"
	cfg.LeaseDuration, cfg.SchedulerBackoff = 3*time.Second, 100*time.Millisecond
	c, err := cell.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); c.Stop() })
	return &env{t: t, ctx: ctx, c: c}
}

func (e *env) submit(name string, spec *troupev1.JobSpec) {
	e.t.Helper()
	if _, err := clientlib.Create(e.ctx, e.c.Client, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "e2e"}, Spec: spec}); err != nil {
		e.t.Fatal(err)
	}
}

// tolerating adds the toleration of hollow machines to spec, which may
// then land on them, and returns it.
func tolerating(spec *troupev1.JobSpec) *troupev1.JobSpec {
	spec.Tolerations = append(spec.Tolerations, agent.HollowToleration())
	return spec
}

func (e *env) tasks(job string) []*troupev1.Task {
	ts, _, err := clientlib.List(e.ctx, e.c.Client, clientlib.Tasks, "e2e/"+job+"/")
	if err != nil {
		e.t.Fatal(err)
	}
	return ts
}

func phases(ts []*troupev1.Task) map[string]int {
	out := map[string]int{}
	for _, t := range ts {
		out[t.GetStatus().GetPhase().String()]++
	}
	return out
}

// A 100-task batch job of real shell commands: every task succeeds, with
// its exit code and output visible.
func TestHundredRealTasks(t *testing.T) {
	e := start(t, cell.Config{ExecMachine: "local", ExecCapacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}})
	e.submit("hundred", &troupev1.JobSpec{Count: 100, Template: &troupev1.TaskTemplate{Command: "/bin/sh",
		Args: []string{"-c", `echo "done $TROUPE_TASK"`}, Requests: map[string]int64{"cpu": 100}}})
	wait.Until(e.ctx, e.t, "100 tasks succeeded", func() (bool, string) {
		p := phases(e.tasks("hundred"))
		return p["TASK_PHASE_SUCCEEDED"] == 100, fmt.Sprint(p)
	})
	for _, tk := range e.tasks("hundred") {
		ref := clientlib.TaskRef("e2e", "hundred", tk.GetSpec().GetIndex())
		out, err := os.ReadFile(filepath.Join(e.c.Exec.TaskDir(ref), "stdout.log"))
		if err != nil || strings.TrimSpace(string(out)) != "done "+ref || tk.GetStatus().GetExitCode() != 0 {
			t.Fatalf("task %s: exit %d, output %q (%v)", ref, tk.GetStatus().GetExitCode(), out, err)
		}
	}
	j, _ := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, "/jobs/e2e/hundred")
	if j.GetStatus().GetPhase() != troupev1.JobPhase_JOB_PHASE_SUCCEEDED {
		wait.Until(e.ctx, e.t, "job succeeded", func() (bool, string) {
			j, _ := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, "/jobs/e2e/hundred")
			return j.GetStatus().GetPhase() == troupev1.JobPhase_JOB_PHASE_SUCCEEDED, j.GetStatus().String()
		})
	}
}

// A 3-replica service survives the loss of a machine: its replica is
// replaced on another machine within seconds. The cell has 2 shards, so
// placements and the lost machine's releases commit across shards.
func TestServiceSurvivesMachineLoss(t *testing.T) {
	e := start(t, cell.Config{Shards: 2, Hollow: 5, HollowCapacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}})
	e.submit("web", tolerating(&troupev1.JobSpec{Type: troupev1.JobType_JOB_TYPE_SERVICE, Count: 3, Priority: 100,
		Constraints: &troupev1.Constraints{DistinctMachines: true},
		Template:    &troupev1.TaskTemplate{Command: "web", SimDuration: durationpb.New(time.Hour), Requests: map[string]int64{"cpu": 1000}}}))
	running := func() (map[string]bool, string) {
		on := map[string]bool{}
		var saw []string
		for _, tk := range e.tasks("web") {
			if tk.GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_RUNNING {
				on[tk.GetBinding().GetMachine()] = true
			}
			saw = append(saw, fmt.Sprintf("%s:%v@%s(attempt %d, %s)", tk.GetMetadata().GetName(), tk.GetStatus().GetPhase(),
				tk.GetBinding().GetMachine(), tk.GetSpec().GetAttempt(), tk.GetStatus().GetReason()))
		}
		return on, strings.Join(saw, " ")
	}
	var victim string
	wait.Until(e.ctx, e.t, "3 replicas running", func() (bool, string) {
		on, saw := running()
		if on[""] {
			t.Fatalf("a task runs without a binding: %s", saw)
		}
		for m := range on {
			victim = m
		}
		return len(on) == 3, saw
	})
	_, before := running()
	t.Logf("before: %s; stopping %s", before, victim)
	lostAt := time.Now()
	e.c.StopAgent(victim)
	wait.Until(e.ctx, e.t, "3 replicas running again, none on the lost machine", func() (bool, string) {
		on, saw := running()
		return len(on) == 3 && !on[victim], saw
	})
	_, after := running()
	t.Logf("replica replaced %v after the machine stopped (lease 3s): %s", time.Since(lostAt).Round(10*time.Millisecond), after)
	m, _ := clientlib.Get(e.ctx, e.c.Client, clientlib.Machines, clientlib.Machines.Prefix+victim)
	if m.GetStatus().GetPhase() != troupev1.MachinePhase_MACHINE_PHASE_LOST {
		t.Fatalf("stopped machine is %v", m.GetStatus())
	}
}

// A gang job is placed whole or not at all, in one atomic request across
// the cell's 3 shards.
func TestGangAllOrNothing(t *testing.T) {
	e := start(t, cell.Config{Shards: 3, Hollow: 2, HollowCapacity: map[string]int64{"cpu": 2000, "memory": 1 << 30}})
	long := durationpb.New(time.Hour)
	// Three tasks of 1500 cpu: only two machines can take one each.
	e.submit("toobig", tolerating(&troupev1.JobSpec{Count: 3, GangMin: 3, Template: &troupev1.TaskTemplate{Command: "x", SimDuration: long, Requests: map[string]int64{"cpu": 1500}}}))
	wait.Until(e.ctx, e.t, "the gang scheduler found the gang does not fit", func() (bool, string) {
		st := e.c.Schedulers["gang-0"].Stats()
		return st.Unschedulable > 0, fmt.Sprint(st)
	})
	for _, tk := range e.tasks("toobig") {
		if tk.GetBinding() != nil {
			t.Fatalf("part of a gang was placed: %s on %s", tk.GetMetadata().GetName(), tk.GetBinding().GetMachine())
		}
	}
	// Four tasks of 1000 cpu fit exactly, and go together.
	e.submit("fits", tolerating(&troupev1.JobSpec{Count: 4, GangMin: 4, Template: &troupev1.TaskTemplate{Command: "x", SimDuration: long, Requests: map[string]int64{"cpu": 1000}}}))
	wait.Until(e.ctx, e.t, "the whole gang runs", func() (bool, string) {
		p := phases(e.tasks("fits"))
		return p["TASK_PHASE_RUNNING"] == 4, fmt.Sprint(p)
	})
	if st := e.c.Schedulers["gang-0"].Stats(); st.Attempts == 0 {
		t.Fatalf("gang stats %+v", st)
	}
}

// A high-priority job preempts batch tasks, which go back to pending; the
// evictions and the placement commit together across 3 shards.
func TestHighPriorityPreemptsBatch(t *testing.T) {
	e := start(t, cell.Config{Shards: 3, Hollow: 1, HollowCapacity: map[string]int64{"cpu": 2000, "memory": 1 << 30}})
	long := durationpb.New(time.Hour)
	e.submit("filler", tolerating(&troupev1.JobSpec{Count: 4, Priority: 0, Template: &troupev1.TaskTemplate{Command: "x", SimDuration: long, Requests: map[string]int64{"cpu": 500}}}))
	wait.Until(e.ctx, e.t, "the machine is full", func() (bool, string) {
		p := phases(e.tasks("filler"))
		return p["TASK_PHASE_RUNNING"] == 4, fmt.Sprint(p)
	})
	e.submit("urgent", tolerating(&troupev1.JobSpec{Count: 1, Priority: 50, Template: &troupev1.TaskTemplate{Command: "x", SimDuration: long, Requests: map[string]int64{"cpu": 1000}}}))
	wait.Until(e.ctx, e.t, "the urgent task runs", func() (bool, string) {
		p := phases(e.tasks("urgent"))
		return p["TASK_PHASE_RUNNING"] == 1, fmt.Sprint(p)
	})
	preempted := 0
	for _, tk := range e.tasks("filler") {
		if tk.GetBinding() == nil && strings.Contains(tk.GetStatus().GetReason(), "preempted") {
			preempted++
		}
	}
	if preempted != 2 {
		t.Fatalf("%d filler tasks preempted, want 2", preempted)
	}
	// The victims' job tells why, and so does the newcomer's.
	for job, reason := range map[string]string{"filler": "Preempted", "urgent": "Scheduled"} {
		wait.Until(e.ctx, e.t, job+" has a "+reason+" event", func() (bool, string) {
			evs, _, err := clientlib.List(e.ctx, e.c.Client, clientlib.Events, "e2e/"+job+"/")
			if err != nil {
				return false, err.Error()
			}
			n := 0
			for _, ev := range evs {
				if ev.GetReason() == reason {
					n++
				}
			}
			return n > 0, fmt.Sprint(len(evs), " events")
		})
	}
}

// A job too big for any machine gets, under TLS and the default
// authorization rules, its JobScheduling from the batch scheduler: why
// its task waits, with the machines each filter refused, readable by the
// administrator, while the job says its task is pending (what `troupe
// get jobs` shows as REASON Unschedulable). Once the job is deleted, its
// tasks go, and so does its JobScheduling.
func TestUnschedulableJobSaysWhy(t *testing.T) {
	e := start(t, cell.Config{Shards: 2, Hollow: 2, HollowCapacity: map[string]int64{"cpu": 2000, "memory": 1 << 30}})
	e.submit("huge", tolerating(&troupev1.JobSpec{Count: 1, Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 4000}}}))
	key := clientlib.JobSchedulings.Prefix + "e2e/huge"
	wait.Until(e.ctx, e.t, "the JobScheduling says no machine of 2 fits", func() (bool, string) {
		js, err := clientlib.Get(e.ctx, e.c.Client, clientlib.JobSchedulings, key)
		if err != nil {
			return false, err.Error()
		}
		st := js.GetStatus()
		refused := int32(0)
		for _, n := range st.GetRefused() {
			refused += n
		}
		return st.GetReason() == "Unschedulable" && st.GetScheduler() == "batch-0" && st.GetMachines() == 2 && refused == 2 &&
			st.GetRefused()["ResourceFit"] == 2 && st.GetUnplaced() == 1 && strings.Contains(st.GetMessage(), "0/2 machines fit"), st.String()
	})
	wait.Until(e.ctx, e.t, "the job says its task is pending", func() (bool, string) {
		j, err := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, "/jobs/e2e/huge")
		return err == nil && j.GetStatus().GetPending() == 1 && j.GetStatus().GetAdmission() == "", fmt.Sprint(j.GetStatus(), err)
	})
	j, err := clientlib.Get(e.ctx, e.c.Client, clientlib.Jobs, "/jobs/e2e/huge")
	if err == nil {
		err = clientlib.Delete(e.ctx, e.c.Client, clientlib.Jobs, j)
	}
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(e.ctx, e.t, "the deleted job's JobScheduling is gone", func() (bool, string) {
		js, err := clientlib.Get(e.ctx, e.c.Client, clientlib.JobSchedulings, key)
		return errors.Is(err, clientlib.ErrNotFound), fmt.Sprint(js, err)
	})
}

// A cell stopped and started again on its data directory (troupe up run
// twice) serves what it held: the store keeps its Raft address, so its
// directory is its own, and the job's tasks run again on the same
// machines.
func TestRestartOnItsOwnData(t *testing.T) {
	dir := runtimetest.Dir(t)
	run := func(what string, check func(ctx context.Context, c *cell.Cell)) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		c, err := cell.Start(ctx, cell.Config{DataDir: dir, GRPCAddr: "127.0.0.1:0", Hollow: 2,
			HollowCapacity: map[string]int64{"cpu": 2000, "memory": 1 << 30}, LeaseDuration: 3 * time.Second, SchedulerBackoff: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer func() { cancel(); c.Stop() }()
		t.Logf("%s: store at %s", what, c.Node.GRPCAddr())
		check(ctx, c)
	}
	running := func(ctx context.Context, c *cell.Cell) {
		wait.Until(ctx, t, "3 tasks running", func() (bool, string) {
			ts, _, err := clientlib.List(ctx, c.Client, clientlib.Tasks, "e2e/kept/")
			return err == nil && phases(ts)["TASK_PHASE_RUNNING"] == 3, fmt.Sprint(phases(ts), err)
		})
	}
	run("first start", func(ctx context.Context, c *cell.Cell) {
		spec := tolerating(&troupev1.JobSpec{Type: troupev1.JobType_JOB_TYPE_SERVICE, Count: 3,
			Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 100}, SimDuration: durationpb.New(time.Hour)}})
		if _, err := clientlib.Create(ctx, c.Client, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "kept", Namespace: "e2e"}, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		running(ctx, c)
	})
	run("second start", func(ctx context.Context, c *cell.Cell) {
		if _, err := clientlib.Get(ctx, c.Client, clientlib.Jobs, "/jobs/e2e/kept"); err != nil {
			t.Fatalf("the job after a restart: %v", err)
		}
		running(ctx, c)
	})
}
