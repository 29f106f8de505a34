package framework_test

import (
	"testing"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/plugins/resourcefit"
)

// running tells the snapshot which tasks are bound to each machine.
func (h *harness) running(snap *framework.Snapshot) *framework.Snapshot {
	tasks, _, err := clientlib.List(h.ctx, h.store, clientlib.Tasks, "")
	if err != nil {
		h.t.Fatal(err)
	}
	running := map[string][]*framework.Running{}
	for _, t := range tasks {
		if m := t.GetBinding().GetMachine(); m != "" {
			key, _ := clientlib.Tasks.Key(t)
			ft := framework.NewTask(key, t)
			running[m] = append(running[m], &framework.Running{Key: key, Task: t, Job: ft.Job, Priority: ft.Priority, Requests: ft.Requests})
		}
	}
	snap.Running = func(m string) []*framework.Running { return running[m] }
	return snap
}

func (h *harness) withPriority(tasks []*framework.Task, p int32) []*framework.Task {
	for _, t := range tasks {
		t.Task.Spec.Priority = p
		updated, err := clientlib.Update(h.ctx, h.store, clientlib.Tasks, t.Task)
		if err != nil {
			h.t.Fatal(err)
		}
		*t = *framework.NewTask(t.Key, updated)
	}
	return tasks
}

func TestPreemptionEvictsFewestLowestPriority(t *testing.T) {
	h := newHarness(t)
	low := h.withPriority(h.pending("low", 2, 250), 0)
	mid := h.withPriority(h.pending("mid", 2, 250), 10)
	h.commit(h.snapshot(1000), append(low, mid...), framework.Modes{})
	urgent := h.withPriority(h.pending("urgent", 1, 400), 50)

	profile := framework.Profile{Filters: []framework.FilterPlugin{resourcefit.New()}, Preempt: true}
	plan := framework.Schedule(profile, h.running(h.snapshot(1000)), urgent)
	if len(plan.Placements) != 1 {
		t.Fatalf("urgent task not placed: %+v", plan.Failures)
	}
	victims := plan.Placements[0].Victims
	if len(victims) != 2 || victims[0].Job != "ns/low" || victims[1].Job != "ns/low" {
		t.Fatalf("victims %v, want the two low-priority tasks", victims)
	}
	res, err := framework.CommitPlan(h.ctx, h.store, plan, framework.Modes{}, "batch-0", now)
	if err != nil || len(res.Committed) != 1 {
		t.Fatalf("commit: %+v %v", res, err)
	}
	for _, v := range victims {
		task, err := clientlib.Get(h.ctx, h.store, clientlib.Tasks, v.Key)
		if err != nil || task.GetBinding() != nil || task.GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_PENDING {
			t.Fatalf("victim %s: %v %v", v.Key, task, err)
		}
		if kv, _ := h.store.Get(h.ctx, "/bindings/m1/ns/low/"+v.Key[len(v.Key)-1:]); kv != nil {
			t.Fatalf("victim %s kept its binding", v.Key)
		}
	}
	if kv, _ := h.store.Get(h.ctx, "/alloc/m1/cpu"); string(kv.GetValue()) != "900" {
		t.Fatalf("counter %s, want 1000 - 500 + 400 = 900", kv.GetValue())
	}
}

func TestProductionDoesNotPreemptProduction(t *testing.T) {
	if framework.CanPreempt(200, 150) || !framework.CanPreempt(200, 50) || framework.CanPreempt(50, 50) || !framework.CanPreempt(99, 0) {
		t.Fatal("CanPreempt rules")
	}
	h := newHarness(t)
	prod := h.withPriority(h.pending("prod", 4, 250), 150)
	h.commit(h.snapshot(1000), prod, framework.Modes{})
	more := h.withPriority(h.pending("more", 1, 250), 200)
	plan := framework.Schedule(framework.Profile{Filters: []framework.FilterPlugin{resourcefit.New()}, Preempt: true}, h.running(h.snapshot(1000)), more)
	if len(plan.Placements) != 0 || len(plan.Failures) != 1 {
		t.Fatalf("production preempted production: %+v", plan.Placements)
	}
}
