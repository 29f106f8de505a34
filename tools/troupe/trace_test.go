package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/cell"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/experiment"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// TestTraceRecordReplay records a cell of 50 hollow machines running
// example-like jobs with `troupe trace record` (a viewer's certificate),
// checks the trace and the cell it wrote, and replays them in the
// simulator: every recorded task of every job is placed there.
func TestTraceRecordReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole cell")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	c, err := cell.Start(ctx, cell.Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Hollow: 50,
		HollowCapacity: map[string]int64{"cpu": 4000, "memory": 8 << 30}, LeaseDuration: 3 * time.Second, SchedulerBackoff: 100 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); c.Stop() })
	wait.Until(ctx, t, "the 50 hollow machines", func() (bool, string) {
		ms, _, err := clientlib.List(ctx, c.Client, clientlib.Machines, "")
		return err == nil && len(ms) == 50, fmt.Sprint(len(ms), err)
	})
	viewer := pki.DirFiles(c.PKIDir(), pki.LocalViewer)
	conn := []string{"--endpoint", c.Node.GRPCAddr(), "--ca", viewer.CA, "--cert", viewer.Cert, "--key", viewer.Key}

	type jobDef struct {
		ns, name  string
		service   bool
		count     int32
		priority  int32
		sim       time.Duration
		cpu, mem  int64
		cons      *troupev1.Constraints
		succeeded bool // wait for it to succeed (else for its tasks to run)
	}
	create := func(j jobDef) {
		t.Helper()
		typ := troupev1.JobType_JOB_TYPE_BATCH
		if j.service {
			typ = troupev1.JobType_JOB_TYPE_SERVICE
		}
		if _, err := clientlib.Create(ctx, c.Client, clientlib.Jobs, &troupev1.Job{
			Metadata: &troupev1.ObjectMeta{Name: j.name, Namespace: j.ns},
			Spec: &troupev1.JobSpec{Type: typ, Count: j.count, Priority: j.priority, Constraints: j.cons,
				Tolerations: []*troupev1.Toleration{agent.HollowToleration()},
				Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(j.sim),
					Requests: map[string]int64{"cpu": j.cpu, "memory": j.mem}}}}); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(j jobDef) {
		t.Helper()
		wait.Until(ctx, t, fmt.Sprintf("job %s/%s to run", j.ns, j.name), func() error {
			job, err := clientlib.Get(ctx, c.Client, clientlib.Jobs, "/jobs/"+j.ns+"/"+j.name)
			switch {
			case err != nil:
				return err
			case j.succeeded && job.GetStatus().GetPhase() != troupev1.JobPhase_JOB_PHASE_SUCCEEDED,
				!j.succeeded && job.GetStatus().GetRunning() != j.count:
				return fmt.Errorf("job %s: %v", j.name, job.GetStatus())
			}
			return nil
		})
	}

	// Before the recording: a job that has ended (left out) and a
	// service running through it (submitted at 0, still running).
	done := jobDef{ns: "default", name: "done", count: 2, sim: 50 * time.Millisecond, cpu: 100, mem: 16 << 20, succeeded: true}
	pre := jobDef{ns: "default", name: "pre", service: true, count: 2, priority: 100, sim: time.Hour, cpu: 200, mem: 32 << 20}
	for _, j := range []jobDef{done, pre} {
		create(j)
		settled(j)
	}

	dir := t.TempDir()
	traceFile, cellFile, teamFile := filepath.Join(dir, "trace.csv"), filepath.Join(dir, "cell.yaml"), filepath.Join(dir, "team-a.csv.gz")
	recCtx, stopRecording := context.WithCancel(ctx)
	defer stopRecording()
	type recording struct {
		out, errOut syncBuffer
		code        chan int
	}
	start := func(args ...string) *recording {
		r := &recording{code: make(chan int, 1)}
		go func() {
			r.code <- cli{}.runTo(recCtx, &r.out, &r.errOut, append(append([]string{"trace", "record"}, args...), conn...)...)
		}()
		wait.Until(ctx, t, "the recording to start", contains(func() (string, error) { return r.errOut.String(), nil }, "Recording the jobs and tasks"))
		return r
	}
	all := start("--out", traceFile, "--cell-out", cellFile)
	team := start("-n", "team-a", "--out", teamFile)

	jobs := []jobDef{
		{ns: "default", name: "etl", count: 5, sim: 300 * time.Millisecond, cpu: 500, mem: 256 << 20, succeeded: true},
		{ns: "default", name: "zoned", count: 3, priority: 50, sim: 200 * time.Millisecond, cpu: 1000, mem: 1 << 30, succeeded: true,
			cons: &troupev1.Constraints{MatchLabels: map[string]string{"zone": "z1"}, MatchExpressions: []*troupev1.LabelRequirement{
				{Key: agent.HollowLabel, Operator: troupev1.LabelOperator_LABEL_OPERATOR_IN, Values: []string{agent.HollowValue}}}}},
		{ns: "default", name: "web", service: true, count: 3, priority: 100, sim: time.Hour, cpu: 200, mem: 32 << 20,
			cons: &troupev1.Constraints{DistinctMachines: true, SpreadLabel: "zone"}},
		{ns: "team-a", name: "api", count: 2, sim: 100 * time.Millisecond, cpu: 250, mem: 64 << 20, succeeded: true},
	}
	for _, j := range jobs {
		create(j)
	}
	for _, j := range jobs {
		settled(j)
	}
	stopRecording()
	for name, r := range map[string]*recording{"all": all, "team-a": team} {
		if code := <-r.code; code != 0 {
			t.Fatalf("recording %s: exit status %d:\n%s%s", name, code, r.out.String(), r.errOut.String())
		}
		t.Logf("recording %s:\n%s", name, r.errOut.String())
	}
	raw, _ := os.ReadFile(traceFile)
	rawCell, _ := os.ReadFile(cellFile)
	t.Logf("%s:\n%s\n%s:\n%s", traceFile, raw, cellFile, rawCell)

	tr, err := workload.ReadCSV(traceFile, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]workload.Job{}
	for _, j := range tr.Jobs {
		byID[j.ID] = j
	}
	if ids := slices.Sorted(maps.Keys(byID)); !slices.Equal(ids, []string{"default.etl", "default.pre", "default.web", "default.zoned", "team-a.api"}) {
		t.Fatalf("jobs %v (default.done ended before the recording)", ids)
	}
	recorded := 0
	for _, j := range append([]jobDef{pre}, jobs...) {
		w := byID[j.ns+"."+j.name]
		recorded += len(w.Tasks)
		if len(w.Tasks) != int(j.count) || w.Priority != j.priority || (w.Type == workload.Service) != j.service {
			t.Fatalf("job %s: %d tasks, priority %d, %s; want %d, %d, service %v", w.ID, len(w.Tasks), w.Priority, w.Type, j.count, j.priority, j.service)
		}
		for _, task := range w.Tasks {
			if task.CPU != j.cpu || task.Memory != j.mem {
				t.Fatalf("job %s task %d: cpu %d memory %d, want %d %d", w.ID, task.Index, task.CPU, task.Memory, j.cpu, j.mem)
			}
			// The hollow agents run a task for its simDuration; those
			// still running when the recording stopped run until the end.
			if j.succeeded && (task.Duration < j.sim || task.Duration > j.sim+10*time.Second) || !j.succeeded && task.Duration != 0 {
				t.Fatalf("job %s task %d: duration %v (simDuration %v)", w.ID, task.Index, task.Duration, j.sim)
			}
		}
	}
	if j := byID["default.pre"]; j.Submit != 0 {
		t.Fatalf("a job there before the recording is submitted at %v, not 0", j.Submit)
	}
	if j := byID["default.zoned"]; !reflect.DeepEqual(j.MatchLabels, map[string]string{"zone": "z1", agent.HollowLabel: agent.HollowValue}) {
		t.Fatalf("zoned's label selector %v", j.MatchLabels)
	}
	if j := byID["default.web"]; !j.DistinctMachines {
		t.Fatal("web's tasks are not on distinct machines")
	}
	for _, want := range []string{"left out: 2 task(s) that ended before the recording started", "left out: 1 job(s) with no task in the trace",
		"dropped (the format cannot say it): spread_label, of 1 job(s) (default.web)"} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("no %q in the trace's comments", want)
		}
	}

	teamTrace, err := workload.ReadCSV(teamFile, 0, 0)
	if err != nil || len(teamTrace.Jobs) != 1 || teamTrace.Jobs[0].ID != "team-a.api" || len(teamTrace.Jobs[0].Tasks) != 2 {
		t.Fatalf("the recording of namespace team-a: %+v (%v)", teamTrace, err)
	}

	cc, err := workload.LoadCell(cellFile)
	if err != nil {
		t.Fatal(err)
	}
	want := workload.CellConfig{Zones: 4, Shapes: []workload.ShapeConfig{{Name: "4cpu-8gib", Count: 50, CPUCores: 4, MemoryGiB: 8,
		Labels: map[string]string{agent.HollowLabel: agent.HollowValue}}}}
	if !reflect.DeepEqual(cc, want) {
		t.Fatalf("cell %+v, want %+v", cc, want)
	}

	// The replay: every recorded task placed, job by job.
	p := experiment.DefaultParams()
	cfg, err := p.Config(cc.Machines(), 1)
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]map[string]bool{} // task keys by job
	cfg.Observe = func(_ time.Duration, _ string, d scheduler.Decision) {
		for _, pl := range d.Result.Committed {
			if placed[d.Job] == nil {
				placed[d.Job] = map[string]bool{}
			}
			placed[d.Job][pl.Task.Key] = true
		}
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run(ctx, tr.Source())
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for id, j := range byID {
		if n := len(placed["sim/"+id]); n != len(j.Tasks) {
			t.Fatalf("the replay placed %d of job %s's %d recorded tasks", n, id, len(j.Tasks))
		}
		replayed += len(placed["sim/"+id])
	}
	t.Logf("replayed %d recorded tasks of %d jobs on %d machines; %.1f s of virtual time", replayed, len(byID), len(cc.Machines()), st.DurationSeconds)
	if replayed != recorded {
		t.Fatalf("replayed %d tasks, recorded %d", replayed, recorded)
	}
	// And as a user replays it, until every task that ends has ended.
	out := cli{}.expect(ctx, t, 0, nil, nil, "sim", "-csv", traceFile, "-cell", cellFile, "-drain", "-quiet")
	var res struct {
		Workload struct {
			Jobs, Tasks int
		}
		Schedulers []struct {
			Placements      int
			UnscheduledJobs int `json:"unscheduled_jobs"`
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("troupe sim: %v\n%s", err, out)
	}
	placements, unscheduled := 0, 0
	for _, s := range res.Schedulers {
		placements, unscheduled = placements+s.Placements, unscheduled+s.UnscheduledJobs
	}
	if res.Workload.Jobs != 5 || res.Workload.Tasks != recorded || placements != recorded || unscheduled != 0 {
		t.Fatalf("troupe sim -csv %s -cell %s -drain: %+v\n%s", traceFile, cellFile, res, out)
	}
}

// The command's usage errors, before it reaches a cell.
func TestTraceRecordUsage(t *testing.T) {
	ctx := t.Context()
	cli{}.expect(ctx, t, 2, nil, lines("give --out FILE"), "trace", "record", "--insecure")
	cli{}.expect(ctx, t, 2, nil, lines("--duration -1s: must not be negative"), "trace", "record", "--out", "x.csv", "--duration=-1s", "--insecure")
	cli{}.expect(ctx, t, 2, nil, lines("give a subcommand: record"), "trace")
}

// The cell's zones are named as the simulated cell names them; those
// named so already keep their names.
func TestZoneNames(t *testing.T) {
	for _, c := range []struct {
		zones []string
		want  map[string]string
	}{
		{[]string{"z0", "z1", "z2", "z3"}, map[string]string{"z0": "z0", "z1": "z1", "z2": "z2", "z3": "z3"}},
		{[]string{"local", "z0", "z1", "z2", "z3"}, map[string]string{"local": "z4", "z0": "z0", "z1": "z1", "z2": "z2", "z3": "z3"}},
		{[]string{"a", "b", "z1", "z01", "z9"}, map[string]string{"a": "z0", "b": "z2", "z01": "z3", "z1": "z1", "z9": "z4"}},
	} {
		if got := zoneNames(c.zones); !reflect.DeepEqual(got, c.want) {
			t.Errorf("zoneNames(%v) = %v, want %v", c.zones, got, c.want)
		}
	}
}
