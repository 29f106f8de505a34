package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// get jobs says in its REASON column why a job's tasks wait: Refused
// while the cell's policies refuse the job, OverQuota while its quota
// holds them back, its scheduler's reason (its
// JobScheduling) while some are pending, "-" otherwise; describe job
// shows the scheduler's word in a Scheduling section, the machines each
// filter refused most first.
func TestJobReasonAndSchedulingSection(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	endpoint := append([]string{"-endpoint", cell.EndpointList()}, cell.AdminFlags()...)
	unschedulable := &troupev1.SchedulingStatus{Scheduler: "batch-0", Reason: "Unschedulable",
		Message:  "0/3 machines fit: 2× ResourceFit (insufficient cpu: requested 4, free 2), 1× Schedulable (machine is unschedulable)",
		Refused:  map[string]int32{"ResourceFit": 2, "Schedulable": 1},
		Machines: 3, Unplaced: 2, Time: timestamppb.New(time.Now().Add(-30 * time.Minute))}
	for name, st := range map[string]*troupev1.JobStatus{
		"stuck":  {Phase: troupev1.JobPhase_JOB_PHASE_PENDING, Pending: 2},
		"held":   {Phase: troupev1.JobPhase_JOB_PHASE_PENDING, Admission: "namespace default is over its cpu quota"},
		"denied": {Phase: troupev1.JobPhase_JOB_PHASE_PENDING, Admission: clientlib.AdmissionRefused + "spec.count: at most 1 tasks here (policy/job-limits)"},
		"placed": {Phase: troupev1.JobPhase_JOB_PHASE_RUNNING, Running: 2},
		"fresh":  {Phase: troupev1.JobPhase_JOB_PHASE_PENDING, Pending: 2},
	} {
		if _, err := clientlib.Create(ctx, cell.Client(), clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:   &troupev1.JobSpec{Count: 2, Scheduler: "batch", Template: &troupev1.TaskTemplate{Command: "/bin/true"}},
			Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler's word on stuck, held and placed (a word left from
	// before), and on a job of the same name in another namespace.
	for _, job := range []string{"default/stuck", "default/held", "default/placed", "other/fresh"} {
		ns, name, _ := strings.Cut(job, "/")
		if _, err := clientlib.Create(ctx, cell.Client(), clientlib.JobSchedulings, &troupev1.JobScheduling{
			Metadata: &troupev1.ObjectMeta{Name: name, Namespace: ns}, Status: unschedulable}); err != nil {
			t.Fatal(err)
		}
	}
	troupe := func(args ...string) string {
		t.Helper()
		out, errOut, code := cli{}.run(ctx, append(args, endpoint...)...)
		if code != 0 {
			t.Fatalf("troupe %s: exit status %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}

	for _, args := range [][]string{{"get", "jobs"}, {"get", "jobs", "-n", "default"}, {"get", "jobs", "stuck", "fresh"}} {
		out := troupe(args...)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		if header := strings.Fields(rows[0]); header[len(header)-1] != "REASON" {
			t.Fatalf("%s: no REASON column last:\n%s", args, out)
		}
		want := map[string]string{"stuck": "Unschedulable", "held": "OverQuota", "denied": "Refused", "placed": "-", "fresh": "-"}
		if len(args) > 2 && args[2] == "stuck" {
			want = map[string]string{"stuck": "Unschedulable", "fresh": "-"}
		}
		for _, row := range rows[1:] {
			f := strings.Fields(row)
			if got := f[len(f)-1]; got != want[f[1]] {
				t.Errorf("%s: job %s has REASON %q, want %q:\n%s", args, f[1], got, want[f[1]], out)
			}
			delete(want, f[1])
		}
		if len(want) > 0 {
			t.Errorf("%s: no row of %v:\n%s", args, want, out)
		}
	}

	out := squeeze(troupe("describe", "job", "stuck"))
	section := []string{"Scheduling:", "Reason: Unschedulable", "Scheduler: batch-0",
		"Time: " + unschedulable.GetTime().AsTime().UTC().Format(time.RFC3339) + " (30m ago)", "Unplaced: 2 task(s)",
		"Message: " + squeeze(unschedulable.GetMessage()), "Refused: by filter, of 3 machine(s)", "FILTER MACHINES\n ResourceFit 2\n Schedulable 1\n"}
	at := 0
	for _, w := range section {
		i := strings.Index(out[at:], w)
		if i < 0 {
			t.Fatalf("describe job stuck: no %q after position %d (in order: %q):\n%s", w, at, section, out)
		}
		at += i + len(w)
	}
	if out := troupe("describe", "job", "fresh"); !strings.Contains(squeeze(out), "Scheduling: <none>") {
		t.Fatalf("describe job fresh: no Scheduling: <none> in:\n%s", out)
	}
}
