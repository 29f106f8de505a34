package cell_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// actors runs what a cell runs around its store, as separate processes
// of their roles would (`troupe scheduler`, `troupe controller`,
// `troupe agent`), each role with its own certificate: the batch
// scheduler, the job, node and garbage-collection controllers, and
// hollow machines' agents. stop ends them all at once, wherever they
// are in their work.
func actors(ctx context.Context, t *testing.T, store *clienttest.Store, machines int) (stop func()) {
	t.Helper()
	actx, cancel := context.WithCancel(ctx)
	newClient := func(role string) (*clientlib.Client, error) {
		return store.ClientAs(pki.Identity{Role: role, Name: "quota-test"}), nil
	}
	roles, err := cell.NewRoles(actx, newClient, prometheus.NewRegistry(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := roles.StartSchedulers([]cell.SchedulerSpec{{Name: "batch-0", Kind: profiles.Batch}}, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := roles.StartControllers(500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	hollow := store.ClientAs(pki.Identity{Role: pki.RoleAgent, Name: "hollow-*"})
	var wg sync.WaitGroup
	for i := range machines {
		a, err := agent.New(hollow, agent.Config{Machine: cell.HollowName(i), Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30},
			Taints: []*troupev1.Taint{agent.HollowTaint()}, Runtime: &runtime.Sim{DefaultDuration: 10 * time.Second},
			LeaseDuration: 3 * time.Second, RenewInterval: 600 * time.Millisecond, StopGrace: time.Second, Now: time.Now, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := a.Run(actx); err != nil && actx.Err() == nil {
				t.Errorf("agent %d: %v", i, err)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// Quota with every actor of a cell restarted while tasks are charged,
// waiting and ending, over a store of three shards (a task's charge
// commits across shards) that checks every role's certificate (the job
// controller's charges pass authorization). Two jobs want 8 tasks of a
// namespace whose quota holds 5: the tasks that fit are created, the
// others wait with the reason in their job's status; short tasks end
// and give their charge back, admitting the waiting ones. Then every
// actor stops at once and starts again. At every look the counters are
// within the quota, and once the cell has settled they equal the
// charges of the tasks; deleting the jobs gives everything back.
func TestQuotaAcrossARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	store := clienttest.StartShards(ctx, t, 3)
	admin := store.Client()
	stop := actors(ctx, t, store, 2)
	defer func() { stop() }()

	limits := map[string]int64{clientlib.QuotaTasks: 5, "cpu": 3000}
	if _, err := clientlib.Create(ctx, admin, clientlib.Quotas, &troupev1.Quota{Metadata: &troupev1.ObjectMeta{Name: "e2e"},
		Spec: &troupev1.QuotaSpec{NonProduction: limits}}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []struct {
		name string
		run  time.Duration
	}{{"long", time.Hour}, {"short", 2 * time.Second}} {
		if _, err := clientlib.Create(ctx, admin, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: j.name, Namespace: "e2e"},
			Spec: tolerating(&troupev1.JobSpec{Count: 4, Template: &troupev1.TaskTemplate{Command: "x", SimDuration: durationpb.New(j.run),
				Requests: map[string]int64{"cpu": 500}}})}); err != nil {
			t.Fatal(err)
		}
	}

	// look reads the counters (each read linearizable) and fails the
	// test at once if one is over its limit; it returns them printed.
	look := func() string {
		got, err := clienttest.QuotaCounters(ctx, admin, "e2e")
		if err != nil {
			return err.Error()
		}
		for r, limit := range limits {
			kv, err := admin.Get(ctx, clientlib.QuotaUsedKey("e2e", clientlib.BandNonProduction, r))
			if err != nil {
				return err.Error()
			}
			if n, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion()); err == nil && n.GetValue() > limit {
				t.Fatalf("counter of %s is %d, over its limit %d", r, n.GetValue(), limit)
			}
		}
		return got
	}
	job := func(name string) (*troupev1.Job, []*troupev1.Task, error) {
		j, err := clientlib.Get(ctx, admin, clientlib.Jobs, "/jobs/e2e/"+name)
		if err != nil {
			return nil, nil, err
		}
		ts, _, err := clientlib.List(ctx, admin, clientlib.Tasks, "e2e/"+name+"/")
		return j, ts, err
	}
	wait.Until(ctx, t, "the quota full and a job waiting for it", func() (bool, string) {
		used := look()
		var saw []string
		waiting := false
		for _, name := range []string{"long", "short"} {
			j, ts, err := job(name)
			if err != nil {
				return false, err.Error()
			}
			adm := j.GetStatus().GetAdmission()
			waiting = waiting || strings.Contains(adm, "task(s) waiting")
			saw = append(saw, fmt.Sprintf("%s: %d tasks %v, %q", name, len(ts), phases(ts), adm))
		}
		return waiting && strings.Contains(used, "non-production/tasks=5"), used + "; " + strings.Join(saw, "; ")
	})

	stop() // every actor, in the middle of its work
	stop = actors(ctx, t, store, 2)
	wait.Until(ctx, t, "short done, long running, the counters equal to the charges", func() (bool, string) {
		used := look()
		var saw []string
		done := true
		for name, want := range map[string]string{"long": "TASK_PHASE_RUNNING", "short": "TASK_PHASE_SUCCEEDED"} {
			j, ts, err := job(name)
			if err != nil {
				return false, err.Error()
			}
			p := phases(ts)
			done = done && p[want] == 4 && j.GetStatus().GetAdmission() == ""
			saw = append(saw, fmt.Sprintf("%s: %v %q", name, p, j.GetStatus().GetAdmission()))
		}
		err := clienttest.CheckQuotaCharges(ctx, admin, "e2e")
		return done && err == nil && used == "non-production/cpu=2000 non-production/tasks=4", fmt.Sprint(used, "; ", err, "; ", saw)
	})

	for _, name := range []string{"long", "short"} {
		if err := clientlib.Delete(ctx, admin, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "e2e"}}); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(ctx, t, "everything given back", func() (bool, string) {
		used := look()
		ts, _, err := clientlib.List(ctx, admin, clientlib.Tasks, "e2e/")
		return used == "non-production/cpu=0 non-production/tasks=0" && len(ts) == 0 && err == nil, fmt.Sprint(used, "; ", len(ts), " tasks ", err)
	})
	if err := clienttest.CheckQuotaCharges(ctx, admin, "e2e"); err != nil {
		t.Fatal(err)
	}
}
