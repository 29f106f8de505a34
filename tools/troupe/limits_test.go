package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Limits at the door: apply holds a job to the cell's job limits (the
// defaults until the cell stores its own policy), warns of a job none of
// whose tasks fits any machine now (and accepts it), and --dry-run checks
// and writes nothing.
func TestApplyLimitsDryRunAndRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	c := cell.Client()
	if _, err := clientlib.Create(ctx, c, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1"},
		Spec:   &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 8 << 30}},
		Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	manifest := func(name string, count int, cpu int) string { // cpu in millicores
		p := filepath.Join(dir, name+".yaml")
		body := "apiVersion: troupe/v1\nkind: Job\nmetadata:\n  name: " + name + "\nspec:\n  count: " + strconv.Itoa(count) +
			"\n  template:\n    command: /bin/true\n    requests:\n      cpu: " + strconv.Itoa(cpu) + "\n      memory: 1073741824\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	u := cli{}.with("TROUPE_CONFIG=" + filepath.Join(dir, "none.yaml"))
	flags := append([]string{"--endpoint", cell.EndpointList()}, cell.AdminFlags()...)
	exists := func(name string) bool {
		_, err := clientlib.Get(ctx, c, clientlib.Jobs, "/jobs/default/"+name)
		return err == nil
	}

	// Over the default limits: refused, with the policy named.
	u.expect(ctx, t, 1, nil, lines("a job has at most 10000 tasks (policy job-limits"),
		append([]string{"apply", "-f", manifest("huge", 100000, 1)}, flags...)...)
	u.expect(ctx, t, 1, nil, lines("a task asks for at most 64000m cpu"),
		append([]string{"apply", "-f", manifest("wide", 1, 100000)}, flags...)...)
	if exists("huge") || exists("wide") {
		t.Fatal("a job over the limits was written")
	}
	// Within them, but larger than any machine's free room: accepted,
	// with a warning that names the most any machine has free.
	u.expect(ctx, t, 0, lines("job/default/big created"),
		lines("warning: job default/big: no machine has room for one of its tasks (it asks for 8000m cpu, 1Gi memory); "+
			"1 of 1 machine passes its filters, and the most any of them has free is 4000m cpu, 8Gi memory (m1): its tasks wait until a machine can hold them"),
		append([]string{"apply", "-f", manifest("big", 2, 8000)}, flags...)...)
	// --dry-run checks and writes nothing.
	u.expect(ctx, t, 0, lines("job/default/small valid (dry run)"), nil,
		append([]string{"apply", "--dry-run", "-f", manifest("small", 3, 500)}, flags...)...)
	u.expect(ctx, t, 1, nil, lines("a job has at most 10000 tasks"),
		append([]string{"apply", "--dry-run", "-f", manifest("huge", 100000, 1)}, flags...)...)
	if exists("small") {
		t.Fatal("--dry-run wrote the job")
	}
	// The cell's own limits replace the defaults.
	policy := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: troupe/v1
kind: ValidationPolicy
metadata:
  name: job-limits
spec:
  kinds: [Job]
  rules:
    - expression: object.spec.count <= 200000
      message: at most 200000 tasks here
      fieldPath: spec.count
`), 0o600); err != nil {
		t.Fatal(err)
	}
	u.expect(ctx, t, 0, lines("validationpolicy/job-limits created"), nil, append([]string{"apply", "-f", policy}, flags...)...)
	u.expect(ctx, t, 0, lines("job/default/huge valid (dry run)"), nil,
		append([]string{"apply", "--dry-run", "-f", manifest("huge", 100000, 1)}, flags...)...)
}

// The room check at apply time is a decision of the job's scheduler: it
// warns of a job only the machines it may not use have room for, and
// names the filter that refused them; it names the machine with the most
// room among those the job's constraints admit, by free room, never a
// larger one the job may not use; a gang job is warned of when its
// gang_min tasks do not fit at once.
func TestApplyRoomFilters(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	c := cell.Client()
	hollow := map[string]string{agent.HollowLabel: agent.HollowValue}
	for _, m := range []struct {
		name      string
		cpu       int64
		labels    map[string]string
		hollow    bool
		cordoned  bool
		allocated int64 // cpu
	}{
		{name: "exec-0", cpu: 2000, labels: map[string]string{"zone": "a"}},
		{name: "small-1", cpu: 1000, labels: map[string]string{"zone": "a", "disk": "ssd"}},
		{name: "hollow-0000", cpu: 12000, labels: hollow, hollow: true, allocated: 10000},
		{name: "hollow-0001", cpu: 8000, labels: hollow, hollow: true},
		{name: "big-1", cpu: 32000, labels: map[string]string{"zone": "a", "disk": "ssd"}, cordoned: true},
	} {
		spec := &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": m.cpu, "memory": m.cpu / 1000 << 31}, Unschedulable: m.cordoned}
		if m.hollow {
			spec.Taints = []*troupev1.Taint{agent.HollowTaint()}
		}
		if _, err := clientlib.Create(ctx, c, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: m.name, Labels: m.labels},
			Spec: spec, Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}}); err != nil {
			t.Fatal(err)
		}
		if m.allocated > 0 {
			tx := clientlib.NewTxn(c)
			tx.Group().Add(clientlib.AllocKey(m.name, "cpu"), m.allocated, 0, m.cpu)
			if out, err := tx.Commit(ctx); err != nil || !out.Committed() {
				t.Fatalf("allocate on %s: %v, %v", m.name, err, out.Err())
			}
		}
	}
	dir := t.TempDir()
	manifest := func(name, spec string) string {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte("apiVersion: troupe/v1\nkind: Job\nmetadata:\n  name: "+name+"\nspec:\n"+spec), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	task := func(cpu string) string {
		return "  template:\n    command: /bin/true\n    requests: {cpu: " + cpu + ", memory: 1073741824}\n"
	}
	const tolerates = "  tolerations:\n  - {key: troupe.io/hollow, value: \"true\", effect: TAINT_EFFECT_NO_SCHEDULE}\n"
	const selectsHollow = "  constraints:\n    matchLabels: {troupe.io/hollow: \"true\"}\n"
	u := cli{}.with("TROUPE_CONFIG=" + filepath.Join(dir, "none.yaml"))
	flags := append([]string{"--endpoint", cell.EndpointList()}, cell.AdminFlags()...)
	for _, tc := range []struct {
		name, spec string
		warning    string   // the whole warning, "" for none
		not        []string // what the warning must not say
	}{
		// Only the hollow machines have room, and the job does not
		// tolerate their taint: the machines it may use are named, not
		// the hollow ones.
		{name: "plain", spec: task("4000"),
			warning: "warning: job default/plain: no machine has room for one of its tasks (it asks for 4000m cpu, 1Gi memory); " +
				"2 of 5 machines pass its filters (refused: 2× TaintToleration, 1× Schedulable), " +
				"and the most any of them has free is 2000m cpu, 4Gi memory (exec-0): its tasks wait until a machine can hold them",
			not: []string{"hollow-"}},
		// Tolerating the taint, it fits.
		{name: "tolerant", spec: task("4000") + tolerates},
		// A constraint that one small machine meets: that machine is
		// named, not the larger ones the job may not use.
		{name: "ssd", spec: task("1500") + "  constraints:\n    matchLabels: {disk: ssd}\n",
			warning: "warning: job default/ssd: no machine has room for one of its tasks (it asks for 1500m cpu, 1Gi memory); " +
				"1 of 5 machines passes its filters (refused: 3× LabelSelector, 1× Schedulable), " +
				"and the most any of them has free is 1000m cpu, 2Gi memory (small-1): its tasks wait until a machine can hold them"},
		{name: "cel", spec: task("1500") + "  constraints:\n    cel: \"machine.metadata.name == 'small-1'\"\n",
			warning: "warning: job default/cel: no machine has room for one of its tasks (it asks for 1500m cpu, 1Gi memory); " +
				"1 of 5 machines passes its filters (refused: 2× TaintToleration, 1× CELConstraint, 1× Schedulable), " +
				"and the most any of them has free is 1000m cpu, 2Gi memory (small-1): its tasks wait until a machine can hold them"},
		// No machine passes the filters: which refused how many, as
		// the scheduler says it.
		{name: "nowhere", spec: task("500") + selectsHollow,
			warning: "warning: job default/nowhere: no machine may run its tasks: 0/5 machines fit: " +
				"2× LabelSelector (label troupe.io/hollow is missing, want \"true\"), " +
				"2× TaintToleration (untolerated taint troupe.io/hollow=true:NO_SCHEDULE), " +
				"1× Schedulable (machine is unschedulable (cordoned or lost)); they wait until a machine they may use joins"},
		// The most room is by free room: hollow-0001, not the larger
		// hollow-0000, most of which is allocated.
		{name: "wide", spec: task("9000") + tolerates + selectsHollow,
			warning: "warning: job default/wide: no machine has room for one of its tasks (it asks for 9000m cpu, 1Gi memory); " +
				"2 of 5 machines pass its filters (refused: 2× LabelSelector, 1× Schedulable), " +
				"and the most any of them has free is 8000m cpu, 16Gi memory (hollow-0001): its tasks wait until a machine can hold them"},
		// A gang whose gang_min tasks fit one at a time but not at once.
		{name: "gang", spec: "  count: 3\n  gangMin: 2\n" + task("6000") + tolerates + selectsHollow,
			warning: "warning: job default/gang: its gang of 2 tasks does not fit at once (each asks for 6000m cpu, 1Gi memory; there is room for 1 now); " +
				"2 of 5 machines pass its filters (refused: 2× LabelSelector, 1× Schedulable), " +
				"and the most any of them has free is 8000m cpu, 16Gi memory (hollow-0001): its tasks wait until machines can hold the gang"},
		{name: "smallgang", spec: "  count: 3\n  gangMin: 2\n" + task("3000") + tolerates + selectsHollow},
	} {
		file := manifest(tc.name, tc.spec)
		// --dry-run alone: what apply writes does not change the cell the
		// next cases see.
		args := []string{"apply", "--dry-run", "-f", file}
		{
			out, errOut, code := u.run(ctx, append(args, flags...)...)
			want := ""
			if tc.warning != "" {
				want = tc.warning + "\n"
			}
			if code != 0 || errOut != want || !strings.HasPrefix(out, "job/default/"+tc.name+" ") {
				t.Fatalf("troupe %s: exit status %d\nstdout:\n%s\nstderr:\n%s\nwant:\n%s", strings.Join(args, " "), code, out, errOut, want)
			}
			for _, w := range tc.not {
				if strings.Contains(errOut, w) {
					t.Fatalf("troupe %s: the warning names %q: %s", strings.Join(args, " "), w, errOut)
				}
			}
		}
	}
}
