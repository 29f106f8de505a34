package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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
		lines("warning: job default/big: no machine has room for one of its tasks (it asks for 8000m cpu, 1Gi memory); the most any machine has free is 4000m cpu, 8Gi memory (m1)"),
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
