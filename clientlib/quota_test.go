package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// quotaTask is task i of job in ns, pending, asking for cpu millicores.
func quotaTask(ns, job string, i, priority int32, cpu int64) *troupev1.Task {
	return &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, i), Namespace: ns},
		Spec: &troupev1.TaskSpec{Job: job, Index: i, Priority: priority, Template: &troupev1.TaskTemplate{Command: "x",
			Requests: map[string]int64{"cpu": cpu}}},
		Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING}}
}

func clone[T proto.Message](m T) T { return proto.Clone(m).(T) }

func newQuota(ns string, production, nonProduction map[string]int64) *troupev1.Quota {
	return &troupev1.Quota{Metadata: &troupev1.ObjectMeta{Name: ns},
		Spec: &troupev1.QuotaSpec{Production: production, NonProduction: nonProduction}}
}

// writeTask writes next over prev (nil: creates it; next nil: deletes
// prev) with its quota charge against q, in one group, and returns the
// outcome and the task as written.
func writeTask(ctx context.Context, s clientlib.Store, prev, next *troupev1.Task, q *troupev1.Quota) (*clientlib.Outcome, *troupev1.Task, error) {
	tx := clientlib.NewTxn(s)
	g := tx.Group()
	written := clientlib.ChargeQuota(g, prev, next, q)
	if next == nil {
		clientlib.DeleteObject(g, clientlib.Tasks, prev)
	} else {
		clientlib.PutObject(g, clientlib.Tasks, written)
	}
	out, err := tx.Commit(ctx)
	if err != nil || out.Err() != nil {
		return out, nil, errors.Join(err, out.Err())
	}
	if written != nil {
		key, _ := clientlib.Tasks.Key(written)
		written.Metadata.Version = out.Groups[0].VersionOf(key)
	}
	return out, written, nil
}

// counters reads ns's quota counters (clienttest.QuotaCounters).
func counters(ctx context.Context, t *testing.T, s clientlib.Store, ns string) string {
	t.Helper()
	out, err := clienttest.QuotaCounters(ctx, s, ns)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A task's charge follows it through its life: charged when created,
// nothing added while it stays live with the same requests, given back
// when it ends, charged again (bounded) when it is replaced, the
// difference when its requests change, released when deleted. The band
// is its priority's. A live task that holds no charge (from before
// quotas) is charged without bound, and a write conditioned on another
// version of the Quota fails.
func TestChargeQuotaFollowsTheTask(t *testing.T) {
	ctx := t.Context()
	s := newMem()
	q, err := clientlib.Create(ctx, s, clientlib.Quotas, newQuota("team-a", map[string]int64{"cpu": 2000, clientlib.QuotaTasks: 2}, nil))
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, prev, next *troupev1.Task, want string) *troupev1.Task {
		t.Helper()
		_, written, err := writeTask(ctx, s, prev, next, q)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := counters(ctx, t, s, "team-a"); got != want {
			t.Fatalf("%s: counters %s, want %s", what, got, want)
		}
		return written
	}
	with := func(t *troupev1.Task, change func(*troupev1.Task)) *troupev1.Task {
		c := clone(t)
		change(c)
		return c
	}

	web := step("create", nil, quotaTask("team-a", "web", 0, 100, 500), "production/cpu=500 production/tasks=1")
	if c := web.GetCharge(); c.GetBand() != clientlib.BandProduction || c.GetAmounts()["cpu"] != 500 || c.GetAmounts()[clientlib.QuotaTasks] != 1 {
		t.Fatalf("charge %v", c)
	}
	before, _ := s.Get(ctx, clientlib.QuotaUsedKey("team-a", clientlib.BandProduction, "cpu"))
	web = step("bind", web, with(web, func(t *troupev1.Task) {
		t.Binding = &troupev1.TaskBinding{Machine: "m1"}
		t.Status.Phase = troupev1.TaskPhase_TASK_PHASE_BOUND
	}), "production/cpu=500 production/tasks=1")
	if after, _ := s.Get(ctx, clientlib.QuotaUsedKey("team-a", clientlib.BandProduction, "cpu")); after.GetVersion() != before.GetVersion() {
		t.Fatalf("a write of a live task with the same charge touched its counter (version %d, was %d)", after.GetVersion(), before.GetVersion())
	}
	web = step("fail", web, with(web, func(t *troupev1.Task) {
		t.Binding = nil
		t.Status.Phase = troupev1.TaskPhase_TASK_PHASE_FAILED
	}), "production/cpu=0 production/tasks=0")
	if web.GetCharge() != nil {
		t.Fatalf("an ended task holds %v", web.GetCharge())
	}
	web = step("replace", web, with(web, func(t *troupev1.Task) {
		t.Spec.Attempt++
		t.Spec.Template.Requests["cpu"] = 700
		t.Status.Phase = troupev1.TaskPhase_TASK_PHASE_PENDING
	}), "production/cpu=700 production/tasks=1")
	web = step("update the pending task's requests", web, with(web, func(t *troupev1.Task) { t.Spec.Template.Requests["cpu"] = 1200 }),
		"production/cpu=1200 production/tasks=1")
	batch := step("create a non-production task", nil, quotaTask("team-a", "batch", 0, 99, 5000),
		"non-production/cpu=5000 non-production/tasks=1 production/cpu=1200 production/tasks=1")

	// Before quotas: a running production task without a charge, though
	// over the cpu limit, is charged when next written, without bound.
	old := quotaTask("team-a", "old", 0, 200, 1500)
	old.Status.Phase = troupev1.TaskPhase_TASK_PHASE_RUNNING
	old, err = clientlib.Create(ctx, s, clientlib.Tasks, old)
	if err != nil {
		t.Fatal(err)
	}
	old = step("catch up", old, with(old, func(t *troupev1.Task) { t.Status.Restarts = 1 }),
		"non-production/cpu=5000 non-production/tasks=1 production/cpu=2700 production/tasks=2")

	// A charge of a quota as read before it changed fails on its version.
	stale := clone(q)
	q.Spec.Production["cpu"] = 10_000
	if q, err = clientlib.Update(ctx, s, clientlib.Quotas, q); err != nil {
		t.Fatal(err)
	}
	out, _, err := writeTask(ctx, s, nil, quotaTask("team-a", "web", 1, 100, 100), stale)
	var ce *clientlib.ConflictError
	if !errors.As(err, &ce) || out.Groups[0].Conflict.Key != clientlib.QuotaKey("team-a") ||
		out.Groups[0].Conflict.Reason != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
		t.Fatalf("a charge against a stale quota: %v", err)
	}

	step("delete", web, nil, "non-production/cpu=5000 non-production/tasks=1 production/cpu=1500 production/tasks=1")
	step("delete", batch, nil, "non-production/cpu=0 non-production/tasks=0 production/cpu=1500 production/tasks=1")
	step("stop", old, with(old, func(t *troupev1.Task) { t.Status.Phase = troupev1.TaskPhase_TASK_PHASE_STOPPED }),
		"non-production/cpu=0 non-production/tasks=0 production/cpu=0 production/tasks=0")
}

// Two clients race for the last unit of a quota: one commit wins, the
// other's group fails with the quota's refusal, a *QuotaError that names
// the namespace, band, resource, what is used, the limit and what was
// asked; the counters are what the winner left (its commit's version).
// Many rounds, each in a fresh namespace.
func TestQuotaRaceForTheLastUnit(t *testing.T) {
	s := newMem()
	raceForTheLastUnit(t, func(int) clientlib.Store { return s }, "race", 50)
}

// The same race between two job-controller clients of a store of three
// shards, where each task's group spans the job's shard and the
// namespace's counters' shard (a cross-shard commit whose adds the store
// reserves while it prepares); the controller's identity may charge.
func TestQuotaRaceAcrossShards(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cell := clienttest.StartShards(ctx, t, 3)
	if err := cell.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	clients := []clientlib.Store{
		cell.ClientAs(pki.Identity{Role: pki.RoleController, Name: "one"}),
		cell.ClientAs(pki.Identity{Role: pki.RoleController, Name: "two"}),
	}
	router := keyspace.NewRouter(3)
	ns := ""
	for i := 0; ns == ""; i++ { // the first namespace whose counters are off the job's shard
		if c := fmt.Sprintf("shards-%d", i); router.Shard(clientlib.QuotaUsedKey(c, clientlib.BandNonProduction, "cpu")) !=
			router.Shard(clientlib.Tasks.Prefix+c+"/job/0") {
			ns = c
		}
	}
	admin := cell.Client()
	raceForTheLastUnit(t, func(i int) clientlib.Store {
		if i < 0 {
			return admin
		}
		return clients[i]
	}, ns, 5)
}

// raceForTheLastUnit runs rounds of the race: store(-1) sets up, store(0)
// and store(1) race. Namespaces are prefix-<round>.
func raceForTheLastUnit(t *testing.T, store func(i int) clientlib.Store, prefix string, rounds int) {
	ctx := t.Context()
	for round := range rounds {
		ns := fmt.Sprintf("%s-%d", prefix, round)
		q, err := clientlib.Create(ctx, store(-1), clientlib.Quotas, newQuota(ns, nil, map[string]int64{clientlib.QuotaTasks: 2, "cpu": 10_000}))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := writeTask(ctx, store(-1), nil, quotaTask(ns, "job", 0, 0, 300), q); err != nil {
			t.Fatal(err)
		}
		type result struct {
			task *troupev1.Task
			out  *clientlib.Outcome
			err  error
		}
		results := make([]result, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				<-start
				tk := quotaTask(ns, "job", int32(i+1), 0, 300)
				out, _, err := writeTask(ctx, store(i), nil, tk, q)
				results[i] = result{tk, out, err}
			})
		}
		close(start)
		wg.Wait()

		var winner *clientlib.Outcome
		refused := 0
		for i, r := range results {
			var ce *clientlib.ConflictError
			switch {
			case r.err == nil:
				winner = r.out
			case errors.As(r.err, &ce):
				qe := clientlib.QuotaRefusal(r.out.Groups[0].Conflict, r.task, q)
				err := fmt.Errorf("client %d: %w", i, qe)
				var got *clientlib.QuotaError
				if qe == nil || !errors.As(err, &got) || !errors.Is(err, clientlib.ErrOverQuota) {
					t.Fatalf("round %d: client %d's conflict %v is not the quota's refusal", round, i, ce)
				}
				want := clientlib.QuotaError{Namespace: ns, Band: clientlib.BandNonProduction, Resource: clientlib.QuotaTasks, Used: got.Used, Limit: 2, Asked: 1}
				if *got != want || (got.Used != 2 && got.Used != 1) {
					t.Fatalf("round %d: %+v, want %+v with 1 or 2 used", round, *got, want)
				}
				refused++
			default:
				t.Fatalf("round %d: client %d: %v", round, i, r.err)
			}
		}
		if winner == nil || refused != 1 {
			t.Fatalf("round %d: %d refused, winner %v; want one of each", round, refused, winner)
		}
		if got, want := counters(ctx, t, store(-1), ns), "non-production/cpu=600 non-production/tasks=2"; got != want {
			t.Fatalf("round %d: counters %s, want %s", round, got, want)
		}
		for _, r := range []string{"cpu", clientlib.QuotaTasks} {
			key := clientlib.QuotaUsedKey(ns, clientlib.BandNonProduction, r)
			if kv, err := store(-1).Get(ctx, key); err != nil || kv.GetVersion() != winner.Groups[0].VersionOf(key) {
				t.Fatalf("round %d: %s at version %d (%v), want the winner's %d", round, key, kv.GetVersion(), err, winner.Groups[0].VersionOf(key))
			}
		}
	}
	// What the refusal says, once.
	e := clientlib.QuotaError{Namespace: "team-a", Band: clientlib.BandProduction, Resource: "cpu", Used: 64000, Limit: 64000, Asked: 500}
	if got, want := e.Error(), "namespace team-a production quota: cpu 64000m used of 64000m, 500m more asked"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// Goroutines create, end and delete tasks of one namespace through
// ChargeQuota, each in its own transaction, against a quota most of them
// do not fit in: after every commit (audited from the store's change
// sets) every counter equals the charges of the tasks and stays within
// its limit; at the end, with every task deleted, the counters are zero.
func TestConcurrentChargesKeepTheInvariant(t *testing.T) {
	ctx := t.Context()
	s := newMem()
	audit := clienttest.NewQuotaAudit()
	s.Observe(audit.Observe)
	q, err := clientlib.Create(ctx, s, clientlib.Quotas, newQuota("busy",
		map[string]int64{"cpu": 3000, clientlib.QuotaTasks: 4}, map[string]int64{"cpu": 2000, clientlib.QuotaTasks: 5}))
	if err != nil {
		t.Fatal(err)
	}
	const workers, tasks = 8, 12
	var wg sync.WaitGroup
	refusals := make([]int, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range tasks {
				tk := quotaTask("busy", fmt.Sprintf("w%d", w), int32(i), int32(w%2)*100, int64(100*(1+i%4)))
				_, created, err := writeTask(ctx, s, nil, tk, q)
				if err != nil {
					refusals[w]++
					continue
				}
				switch i % 3 {
				case 0: // ends, then goes
					ended := clone(created)
					ended.Status.Phase = troupev1.TaskPhase_TASK_PHASE_SUCCEEDED
					if _, created, err = writeTask(ctx, s, created, ended, q); err != nil {
						t.Errorf("end: %v", err)
						return
					}
					fallthrough
				case 1: // goes
					if _, _, err := writeTask(ctx, s, created, nil, q); err != nil {
						t.Errorf("delete: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := audit.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range refusals {
		n += r
	}
	if n == 0 {
		t.Fatal("the quota refused nothing: the test shows nothing")
	}
	left, _, err := clientlib.List(ctx, s, clientlib.Tasks, "busy/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range left {
		if _, _, err := writeTask(ctx, s, tk, nil, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := audit.Err(); err != nil {
		t.Fatal(err)
	}
	for key, v := range audit.Counters() {
		if v != 0 {
			t.Fatalf("counter %s is %d with no task left", key, v)
		}
	}
	t.Logf("%d commits audited, %d charges refused", audit.Commits(), n)
}

// A Quota is named after a namespace, cluster-scoped, and limits
// resources or tasks by non-negative amounts; manifests take it.
func TestValidateQuota(t *testing.T) {
	check := func(edit func(*troupev1.Quota)) error {
		q := newQuota("team-a", map[string]int64{"cpu": 64000, "memory": 1 << 40, clientlib.QuotaTasks: 100, "example.com/fpga": 2},
			map[string]int64{clientlib.QuotaTasks: 0})
		edit(q)
		return clientlib.Validate(clientlib.Quotas, q)
	}
	if err := check(func(*troupev1.Quota) {}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, field, rule string
		edit              func(*troupev1.Quota)
	}{
		{"name", "metadata.name", "dns-label", func(q *troupev1.Quota) { q.Metadata.Name = "team.a" }},
		{"namespaced", "metadata.namespace", "not-namespaced", func(q *troupev1.Quota) { q.Metadata.Namespace = "team-a" }},
		{"negative", "spec.production[cpu]", "non-negative", func(q *troupev1.Quota) { q.Spec.Production["cpu"] = -1 }},
		{"negative tasks", "spec.non_production[tasks]", "non-negative", func(q *troupev1.Quota) { q.Spec.NonProduction[clientlib.QuotaTasks] = -1 }},
		{"resource", "spec.non_production[cores]", "resource-name", func(q *troupev1.Quota) { q.Spec.NonProduction["cores"] = 1 }},
	} {
		var ve *clientlib.ValidationError
		if err := check(c.edit); !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Field != c.field || ve.Errors[0].Rule != c.rule {
			t.Errorf("%s: %v, want %s (%s)", c.name, err, c.field, c.rule)
		}
	}
	ms, err := clientlib.DecodeManifests([]byte("apiVersion: troupe/v1\nkind: Quota\nmetadata: {name: team-a}\n" +
		"spec:\n  production: {cpu: 64000, tasks: 100}\n  nonProduction: {memory: 1099511627776}\n"))
	if err != nil || len(ms) != 1 {
		t.Fatalf("%v %v", ms, err)
	}
	q, ok := ms[0].Object.(*troupev1.Quota)
	if !ok || q.GetSpec().GetProduction()[clientlib.QuotaTasks] != 100 || q.GetSpec().GetNonProduction()["memory"] != 1<<40 {
		t.Fatalf("decoded %v", ms[0].Object)
	}
	if key, err := clientlib.Quotas.Key(q); err != nil || key != "/quotas/team-a" {
		t.Fatalf("key %q %v", key, err)
	}
}
