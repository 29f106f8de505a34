package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// badManifests holds a valid job between objects with problems: a job
// with one of every sort (a field its kind does not have, a negative
// count, which puts gang_min out of range too, a cpu amount that is not
// an integer, an invalid label, a label selector without values and a
// CEL constraint that is not a condition), a job over the cell's job
// limits that would run as root, and a machine without memory.
const badManifests = `apiVersion: troupe/v1
kind: Job
metadata:
  name: web
  labels: {team: "a b"}
spec:
  count: -2
  template:
    command: /bin/web
    comand: /bin/web
    requests:
      cpu: 500m
  constraints:
    matchExpressions:
    - key: zone
      operator: LABEL_OPERATOR_IN
    cel: "machine.spec.capacity['gpu']"
---
apiVersion: troupe/v1
kind: Job
metadata: {name: good}
spec:
  template: {command: /bin/true, requests: {cpu: 100}}
---
apiVersion: troupe/v1
kind: Job
metadata: {name: huge, namespace: team-a}
spec:
  count: 20000
  template: {command: /bin/true, user: root}
---
apiVersion: troupe/v1
kind: Machine
metadata: {name: m1}
spec:
  capacity: {cpu: 8000}
`

// What apply says of badManifests, with or without --dry-run.
const badManifestsErrors = `troupe apply: FILE:1: invalid Job "default/web": 7 problems:
  FILE:5: metadata.labels[team]: value "a b" must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric (label-value)
  FILE:6: spec.gang_min: must be in [0, count], got 0 (range)
  FILE:7: spec.count: must be in [1, 1000000], got -2 (range)
  FILE:10: spec.template.comand: unknown field of troupe.v1.TaskTemplate (unknown-field)
  FILE:12: spec.template.requests[cpu]: want an integer, got "500m" (cpu is in millicores: 500 for half a core) (type)
  FILE:15: spec.constraints.match_expressions[0].values: In and NotIn need values (required)
  FILE:17: spec.constraints.cel: yields int, not bool (cel-compiles)
FILE:25: invalid Job "team-a/huge": 2 problems:
  FILE:29: spec.count: a job has at most 10000 tasks (policy job-limits; store your own to change it) (policy/job-limits)
  FILE:30: spec.template.user: tasks never run as root (not-root)
FILE:36: invalid Machine "m1": spec.capacity[memory]: must be positive (required)
`

// An invalid object's problems, every one on its line, in one run; the
// valid objects of the file are applied all the same (exit status 1), and
// --dry-run says the same.
func TestApplyListsEveryProblem(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	c := cell.Client()
	if _, err := clientlib.Create(ctx, c, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m0"},
		Spec:   &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 8 << 30}},
		Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(file, []byte(badManifests), 0o600); err != nil {
		t.Fatal(err)
	}
	u := cli{}.with("TROUPE_CONFIG=" + filepath.Join(dir, "none.yaml"))
	flags := append([]string{"--endpoint", cell.EndpointList()}, cell.AdminFlags()...)
	want := strings.ReplaceAll(badManifestsErrors, "FILE", file)
	for _, run := range []struct {
		args []string
		out  string
	}{
		{[]string{"apply", "--dry-run", "-f", file}, "job/default/good valid (dry run)\n"},
		{[]string{"apply", "-f", file}, "job/default/good created\n"},
	} {
		out, errOut, code := u.run(ctx, append(run.args, flags...)...)
		if code != 1 || out != run.out || errOut != want {
			t.Fatalf("troupe %s: exit status %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", strings.Join(run.args, " "), code, out, run.out, errOut, want)
		}
	}
	if _, err := clientlib.Get(ctx, c, clientlib.Jobs, "/jobs/default/good"); err != nil {
		t.Fatalf("the valid job: %v", err)
	}
	for _, key := range []string{"/jobs/default/web", "/jobs/team-a/huge"} {
		if _, err := clientlib.Get(ctx, c, clientlib.Jobs, key); !errors.Is(err, clientlib.ErrNotFound) {
			t.Fatalf("invalid job %s: %v", key, err)
		}
	}
}
