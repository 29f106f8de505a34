package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// Two batch schedulers compete for the same 300 tasks on 20 machines:
// every task is placed, no machine is over capacity, and the counters
// match the tasks bound to each machine.
func TestCompetingBatchSchedulers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	admin := cell.Client()
	const machines, tasks = 20, 300
	for i := range machines {
		if _, err := clientlib.Create(ctx, admin, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%02d", i)},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 5000, "memory": 1 << 30}}}); err != nil {
			t.Fatal(err)
		}
	}
	var scheds []*scheduler.Scheduler
	for i := range 2 {
		prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(uint64(i), 9)))
		if err != nil {
			t.Fatal(err)
		}
		events, err := clientlib.NewEventRecorder(admin, clientlib.DefaultEventRecorderConfig("batch-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		go events.Run(ctx)
		s, err := scheduler.New(cell.Client(), scheduler.Config{Name: "batch-" + strconv.Itoa(i), Kind: profiles.Batch,
			Profile: prof, Modes: modes, Policy: scheduler.DefaultPolicy(50 * time.Millisecond), PublishInterval: 20 * time.Millisecond,
			Events: events, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
		go s.Run(ctx)
	}
	for i := range tasks {
		job := fmt.Sprintf("j%d", i%6)
		if _, err := clientlib.Create(ctx, admin, clientlib.Tasks, &troupev1.Task{
			Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, int32(i/6)), Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: job, Index: int32(i / 6), Scheduler: profiles.Batch, Submitted: timestamppb.Now(),
				Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 300}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One task too big for any machine stays pending.
	if _, err := clientlib.Create(ctx, admin, clientlib.Tasks, &troupev1.Task{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("huge", 0), Namespace: "ns"},
		Spec: &troupev1.TaskSpec{Job: "huge", Scheduler: profiles.Batch,
			Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 9000}}},
	}); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "every task bound", func() (bool, string) {
		all, _, err := clientlib.List(ctx, admin, clientlib.Tasks, "")
		if err != nil {
			t.Fatal(err)
		}
		bound := 0
		for _, tk := range all {
			if tk.GetBinding().GetMachine() != "" {
				bound++
			}
		}
		return bound == tasks, fmt.Sprintf("%d of %d tasks bound", bound, tasks)
	})
	// Audit: counters equal the requests bound per machine, within capacity.
	all, _, _ := clientlib.List(ctx, admin, clientlib.Tasks, "")
	want := map[string]int64{}
	for _, tk := range all {
		if m := tk.GetBinding().GetMachine(); m != "" {
			want[m] += tk.GetSpec().GetTemplate().GetRequests()["cpu"]
			if _, err := clientlib.Get(ctx, admin, clientlib.Bindings, clientlib.Bindings.Prefix+m+"/"+clientlib.TaskRef("ns", tk.GetSpec().GetJob(), tk.GetSpec().GetIndex())); err != nil {
				t.Fatalf("binding of %s: %v", tk.GetMetadata().GetName(), err)
			}
		} else if tk.GetSpec().GetJob() != "huge" {
			t.Fatalf("task %s unbound", tk.GetMetadata().GetName())
		}
	}
	for i := range machines {
		m := fmt.Sprintf("m%02d", i)
		kv, err := admin.Get(ctx, clientlib.AllocKey(m, "cpu"))
		if err != nil {
			t.Fatal(err)
		}
		got := int64(0)
		if kv != nil {
			got, _ = strconv.ParseInt(string(kv.GetValue()), 10, 64)
		}
		if got != want[m] || got > 5000 {
			t.Fatalf("%s: counter %d, bound requests %d, capacity 5000", m, got, want[m])
		}
	}
	var placements, conflicts uint64
	for _, s := range scheds {
		st := s.Stats()
		placements += st.Placements
		conflicts += st.Conflicts
		t.Logf("scheduler: %d placements, %d conflicts (fraction %.3f), busyness %.2f, %v per task, mean wait %v",
			st.Placements, st.Conflicts, st.ConflictFraction, st.Busyness, st.DecisionPerTask, st.MeanWait)
	}
	if placements != tasks {
		t.Fatalf("schedulers report %d placements, want %d", placements, tasks)
	}
	if scheds[0].Stats().Unschedulable+scheds[1].Stats().Unschedulable == 0 {
		t.Fatal("the oversized task was never reported unschedulable")
	}
	// The jobs' events say what the schedulers did: placements, and why
	// the oversized task fits nowhere.
	for job, reason := range map[string]string{"j0": "Scheduled", "huge": "FailedScheduling"} {
		wait.Until(ctx, t, "a "+reason+" event of job "+job, func() (bool, string) {
			evs, _, err := clientlib.List(ctx, admin, clientlib.Events, "ns/"+job+"/")
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(evs, func(e *troupev1.Event) bool { return e.GetReason() == reason })
			if i >= 0 && reason == "FailedScheduling" && !strings.Contains(evs[i].GetMessage(), "9000m cpu") {
				t.Fatalf("FailedScheduling event without the reason: %v", evs[i])
			}
			return i >= 0, fmt.Sprint(evs)
		})
	}
	// Each instance publishes its counters, in its record and in
	// Prometheus format.
	for i, s := range scheds {
		want := s.Stats().Placements
		wait.Until(ctx, t, fmt.Sprintf("the record of batch-%d with %d placements", i, want), func() (bool, string) {
			rec, err := clientlib.Get(ctx, admin, clientlib.Schedulers, clientlib.Schedulers.Prefix+"batch-"+strconv.Itoa(i))
			return err == nil && rec.GetCounters().GetPlacements() == want && rec.GetKind() == profiles.Batch, fmt.Sprint(rec, err)
		})
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(s.Collector())
		expected := fmt.Sprintf(`
# HELP troupe_scheduler_placements_total Placements committed.
# TYPE troupe_scheduler_placements_total counter
troupe_scheduler_placements_total{scheduler="batch-%d"} %d
`, i, want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "troupe_scheduler_placements_total"); err != nil {
			t.Fatal(err)
		}
	}
}
