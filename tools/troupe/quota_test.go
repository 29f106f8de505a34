package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// The example quota applies (and again, unchanged); `troupe get quota`
// lists what each namespace's tasks hold and its limits, every
// namespace or those named (one that has neither is an error), or the
// Quota objects with -o yaml; `troupe describe quota` adds the jobs
// waiting for it; `troupe delete -f` removes it, and the use stays
// counted.
func TestQuotaCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	c := cell.Client()
	troupe := cli{}.with("TROUPE_CONFIG=" + filepath.Join(t.TempDir(), "none.yaml"))
	flags := append([]string{"--endpoint", cell.EndpointList()}, cell.AdminFlags()...)
	run := func(code int, out, errOut []string, args ...string) string {
		t.Helper()
		return troupe.expect(ctx, t, code, out, errOut, append(args, flags...)...)
	}
	example := filepath.Join("..", "..", "deploy", "examples", "quota.yaml")
	run(0, lines("quota/team-a valid (dry run)"), nil, "apply", "--dry-run", "-f", example)
	run(0, lines("No quotas found."), nil, "get", "quota")
	run(0, lines("quota/team-a created"), nil, "apply", "-f", example)
	run(0, lines("quota/team-a unchanged"), nil, "apply", "-f", example)

	// What the job controller writes: tasks charged, and a job waiting.
	q, err := clientlib.Get(ctx, c, clientlib.Quotas, clientlib.QuotaKey("team-a"))
	if err != nil {
		t.Fatal(err)
	}
	for i, ns := range []string{"team-a", "team-a", "team-b"} {
		task := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("web", int32(i)), Namespace: ns},
			Spec: &troupev1.TaskSpec{Job: "web", Index: int32(i), Priority: 100, Template: &troupev1.TaskTemplate{Command: "x",
				Requests: map[string]int64{"cpu": 1500, "memory": 1 << 30}}},
			Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING}}
		tx := clientlib.NewTxn(c)
		g := tx.Group()
		quota := q
		if ns != "team-a" {
			quota = nil
		}
		clientlib.PutObject(g, clientlib.Tasks, clientlib.ChargeQuota(g, nil, task, quota))
		if out, err := tx.Commit(ctx); err != nil || out.Err() != nil {
			t.Fatalf("charge task %d: %v %v", i, err, out.Err())
		}
	}
	job, err := clientlib.Create(ctx, c, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "big", Namespace: "team-a"},
		Spec: &troupev1.JobSpec{Count: 1, Template: &troupev1.TaskTemplate{Command: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	job.Status = &troupev1.JobStatus{Admission: "namespace team-a production quota: tasks 100 used of 100, 7 task(s) waiting"}
	if _, err := clientlib.Update(ctx, c, clientlib.Jobs, job); err != nil {
		t.Fatal(err)
	}

	run(0, lines(
		"NAMESPACE BAND RESOURCE USED LIMIT",
		"team-a production cpu 3000m 64000m",
		"team-a production memory 2Gi 256Gi",
		"team-a production tasks 2 100",
		"team-a non-production cpu 0m 16000m",
		"team-a non-production tasks 0 1000",
		"team-b production cpu 1500m -",
		"team-b production tasks 1 -",
	), nil, "get", "quota")
	if out := run(0, lines("team-a production cpu 3000m 64000m 4%"), nil, "get", "quota", "team-a", "-o", "wide"); strings.Contains(out, "team-b") {
		t.Fatalf("get quota team-a listed team-b:\n%s", out)
	}
	if out := run(0, lines("team-b production tasks 1 -"), nil, "get", "quota", "-n", "team-b"); strings.Contains(out, "team-a") {
		t.Fatalf("get quota -n team-b listed team-a:\n%s", out)
	}
	run(1, lines("team-b production tasks 1"), lines("quota or quota use of namespace nobody not found"), "get", "quota", "team-b", "nobody")
	out := run(0, lines("kind: Quota", "name: team-a"), nil, "get", "quota", "-o", "yaml")
	if ms, err := clientlib.DecodeManifests([]byte(out)); err != nil || len(ms) != 1 {
		t.Fatalf("get quota -o yaml: %v\n%s", err, out)
	}
	run(0, lines("Name: team-a", "Labels: team=a", "Usage:", "BAND RESOURCE USED LIMIT", "production cpu 3000m 64000m",
		"Waiting jobs:", "big 0 production quota: tasks 100 used of 100, 7 task(s) waiting"), nil, "describe", "quota", "team-a")
	run(0, lines("Name: team-b", "Quota: <none>", "production tasks 1 -", "Waiting jobs: <none>"), nil, "describe", "quota", "team-b")
	run(0, lines("Admission: namespace team-a production quota"), nil, "describe", "job", "team-a/big")

	run(0, lines("quota/team-a deleted"), nil, "delete", "-f", example)
	run(0, lines("team-a production cpu 3000m -"), nil, "get", "quota", "team-a")
}
