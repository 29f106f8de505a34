package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {-time.Second, "0s"}, {45 * time.Second, "45s"}, {119 * time.Second, "119s"},
		{3*time.Minute + 12*time.Second, "3m12s"}, {25 * time.Minute, "25m"}, {5*time.Hour + 3*time.Minute, "5h3m"},
		{30 * time.Hour, "30h"}, {53 * time.Hour, "2d5h"}, {40 * 24 * time.Hour, "40d"},
	} {
		if got := age(now, ago(tc.d)); got != tc.want {
			t.Errorf("age(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	if got := age(now, nil); got != "-" {
		t.Errorf("age(nil) = %q", got)
	}
}

func sampleJob(name string, lbl map[string]string) *troupev1.Job {
	return &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "default", Labels: lbl, Version: 7, Created: ago(time.Minute)},
		Spec: &troupev1.JobSpec{Type: troupev1.JobType_JOB_TYPE_SERVICE, Scheduler: "service", Count: 3, Priority: 100,
			Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", "echo 'hi': yes"},
				Requests: map[string]int64{"cpu": 200, "memory": 32 << 20}, SimDuration: durationpb.New(time.Hour)},
			Constraints: &troupev1.Constraints{MatchLabels: map[string]string{"zone": "z1"}, DistinctMachines: true,
				MatchExpressions: []*troupev1.LabelRequirement{{Key: "disk", Operator: troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN, Values: []string{"hdd", "tape"}}}},
			Tolerations: []*troupev1.Toleration{{Key: "gpu", Value: "yes", Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}}},
		Status: &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_RUNNING, Running: 2, Pending: 1}}
}

func TestJobTable(t *testing.T) {
	jobs := []*troupev1.Job{sampleJob("web", nil), {Metadata: &troupev1.ObjectMeta{Name: "new", Namespace: "default"}}}
	var out bytes.Buffer
	if err := writeTable(&out, "", jobColumns(now, nil), jobs, false); err != nil {
		t.Fatal(err)
	}
	want := `NAMESPACE   NAME   TYPE      SCHEDULER   STATUS    TASKS   PENDING   RUNNING   SUCCEEDED   FAILED   AGE   REASON
default     web    service   service     RUNNING   3       1         2         0           0        60s   -
default     new    -                     -         0       0         0         0           0        -     -
`
	if out.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := writeTable(&out, "  ", jobColumns(now, nil), jobs[:1], true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "  NAMESPACE") || !strings.Contains(lines[0], "RETRIES   PRIORITY   REQUESTS") ||
		!strings.Contains(lines[1], "cpu=200m,memory=32Mi   zone=z1; disk notin (hdd,tape); distinct machines; tolerates gpu=yes:NoSchedule   60s") {
		t.Fatalf("wide table:\n%s", out.String())
	}
}

// EXIT is empty until a task's process exited; CPU and memory are written
// as the schedulers' reasons write them (clientlib.FormatQuantity).
func TestTaskAndMachineTables(t *testing.T) {
	task := func(name string, p troupev1.TaskPhase, exit int32) *troupev1.Task {
		return &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "default"}, Spec: &troupev1.TaskSpec{Job: "web"},
			Status: &troupev1.TaskStatus{Phase: p, ExitCode: exit}}
	}
	tasks := []*troupev1.Task{task("web-0", troupev1.TaskPhase_TASK_PHASE_RUNNING, 0), task("web-1", troupev1.TaskPhase_TASK_PHASE_PENDING, 0),
		task("web-2", troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, 0), task("web-3", troupev1.TaskPhase_TASK_PHASE_FAILED, 3),
		task("web-4", troupev1.TaskPhase_TASK_PHASE_STOPPED, 0)}
	var out bytes.Buffer
	if err := writeTable(&out, "", taskColumns(now), tasks, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	exitAt := strings.Index(lines[0], "EXIT")
	for i, want := range []string{"", "", "0", "3", ""} {
		if got := strings.Fields(lines[i+1][exitAt:])[0]; (want == "" && got == "0") || (want != "" && got != want) {
			t.Errorf("%s: EXIT %q, want %q\n%s", tasks[i].GetMetadata().GetName(), got, want, out.String())
		}
	}

	m := &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1"},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 64000, "memory": 256 << 30}}}
	cols, err := machineColumns(t.Context(), nil, now, false)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := writeTable(&out, "", cols, []*troupev1.Machine{m}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(squeeze(out.String()), "m1 - 64000m 256Gi") {
		t.Errorf("machine table:\n%s", out.String())
	}
}

func TestTaskAndEventLines(t *testing.T) {
	task := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: "web-1", Namespace: "default"}, Spec: &troupev1.TaskSpec{Job: "web", Index: 1, Attempt: 2},
		Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_FAILED, ExitCode: 3, Machine: "m1"}}
	if got := taskLine(task); got != "FAILED  on m1  attempt 2  exit 3" {
		t.Errorf("taskLine = %q", got)
	}
	e := &troupev1.Event{Metadata: &troupev1.ObjectMeta{Namespace: "default"}, InvolvedKind: "Task", InvolvedName: "web-1", Job: "web",
		Type: clientlib.EventWarning, Reason: "Failed", Message: "exit code 3", Count: 2}
	if name, s := eventLine(e); name != "default/web-1" || s != "Warning  Failed  (task) exit code 3 (x2)" {
		t.Errorf("eventLine = %q, %q", name, s)
	}
	var out bytes.Buffer
	p := &linePrinter{out: &out, now: func() time.Time { return now }}
	p.line("MODIFIED", "task", "default/web-1", taskLine(task))
	if want := "12:00:00  MODIFIED  task     default/web-1             FAILED  on m1  attempt 2  exit 3\n"; out.String() != want {
		t.Errorf("line %q, want %q", out.String(), want)
	}
}

// -o yaml writes manifests that DecodeManifests reads back as the same
// objects, separated by "---", apiVersion and kind first.
func TestYAMLRoundTrip(t *testing.T) {
	jobs := []*troupev1.Job{sampleJob("web", map[string]string{"app": "web", "build": "123", "on": "yes"}), sampleJob("api", nil)}
	var out bytes.Buffer
	if err := writeYAML(&out, clientlib.Jobs.Name, jobs); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.HasPrefix(text, "apiVersion: troupe/v1\nkind: Job\nmetadata:\n  name: web\n") || strings.Count(text, "\n---\n") != 1 ||
		strings.Contains(text, "{") {
		t.Fatalf("yaml:\n%s", text)
	}
	ms, err := clientlib.DecodeManifests(out.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if len(ms) != 2 {
		t.Fatalf("decoded %d objects", len(ms))
	}
	for i, m := range ms {
		if m.Kind != "Job" || !proto.Equal(m.Object, jobs[i]) {
			t.Errorf("object %d: decoded %v, want %v", i, m.Object, jobs[i])
		}
	}
}
