package clientlib_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

var epoch = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func newMem() *memstore.Store {
	return memstore.New(func() time.Time { return epoch }, time.Minute)
}

func meta(name, ns string) *troupev1.ObjectMeta {
	return &troupev1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"team": "infra"}, Annotations: map[string]string{"note": "x"}}
}

func sampleTask() *troupev1.Task {
	return &troupev1.Task{Metadata: meta("web-3", "prod"), Spec: &troupev1.TaskSpec{
		Job: "web", Index: 3, Type: troupev1.JobType_JOB_TYPE_SERVICE, Priority: 100, Scheduler: "service",
		Template: &troupev1.TaskTemplate{Command: "/bin/web", Args: []string{"-p", "80"}, Env: map[string]string{"A": "1"},
			Requests: map[string]int64{"cpu": 500, "memory": 1 << 30}},
		Submitted: timestamppb.New(epoch),
	}, Binding: &troupev1.TaskBinding{Machine: "m1", Scheduler: "service-0", BoundAt: timestamppb.New(epoch)}}
}

// roundTrip checks key, encoding and decoding of one object of kind k.
func roundTrip[T clientlib.Object](t *testing.T, k clientlib.Kind[T], obj T, wantKey string) {
	t.Helper()
	key, err := k.Key(obj)
	if err != nil || key != wantKey {
		t.Fatalf("%s key: %q %v, want %q", k.Name, key, err, wantKey)
	}
	obj.GetMetadata().Version = 42 // belongs to the key: not stored
	b, err := clientlib.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	if obj.GetMetadata().GetVersion() != 42 {
		t.Fatalf("%s: Encode changed the object", k.Name)
	}
	got, err := clientlib.Decode(k, b, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMetadata().GetVersion() != 7 {
		t.Fatalf("%s: decoded version %d, want 7", k.Name, got.GetMetadata().GetVersion())
	}
	got.GetMetadata().Version = 42
	if !proto.Equal(got, obj) {
		t.Fatalf("%s round trip:\n got %v\nwant %v", k.Name, got, obj)
	}
}

func TestRoundTripEveryKind(t *testing.T) {
	roundTrip(t, clientlib.Machines, &troupev1.Machine{Metadata: meta("m1", ""), Spec: &troupev1.MachineSpec{
		Capacity: map[string]int64{"cpu": 8000, "memory": 32 << 30, "gpu": 2},
		Taints:   []*troupev1.Taint{{Key: "dedicated", Value: "ml", Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}},
	}, Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}}, "/machines/m1")
	roundTrip(t, clientlib.Leases, &troupev1.Lease{Metadata: meta("m1", ""), Holder: "agent-m1",
		Renewed: timestamppb.New(epoch), Duration: durationpb.New(10 * time.Second)}, "/leases/m1")
	roundTrip(t, clientlib.Jobs, &troupev1.Job{Metadata: meta("web", "prod"), Spec: &troupev1.JobSpec{
		Type: troupev1.JobType_JOB_TYPE_SERVICE, Priority: 100, Scheduler: "service", Count: 5, GangMin: 0,
		Template:    &troupev1.TaskTemplate{Command: "/bin/web"},
		Constraints: &troupev1.Constraints{MatchLabels: map[string]string{"zone": "a"}, Cel: "machine.labels.arch == 'amd64'", SpreadLabel: "rack"},
		Tolerations: []*troupev1.Toleration{{Key: "dedicated", Operator: troupev1.TolerationOperator_TOLERATION_OPERATOR_EXISTS}},
	}, Status: &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_RUNNING, Running: 5}}, "/jobs/prod/web")
	roundTrip(t, clientlib.Tasks, sampleTask(), "/tasks/prod/web/3")
	large := sampleTask()
	large.Metadata.Name, large.Spec.Index = "web-123456", 123456
	roundTrip(t, clientlib.Tasks, large, "/tasks/prod/web/123456")
	roundTrip(t, clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod/web/3", ""), Machine: "m1", Scheduler: "service-0",
		BoundAt: timestamppb.New(epoch), Task: sampleTask().GetSpec()}, "/bindings/m1/prod/web/3")
	roundTrip(t, clientlib.Runs, &troupev1.Run{Metadata: meta("prod/web/3", ""), Machine: "m1", Phase: troupev1.RunPhase_RUN_PHASE_FAILED,
		ExitCode: 2, Reason: "exit status 2", Started: timestamppb.New(epoch), Finished: timestamppb.New(epoch.Add(time.Second)), Restarts: 1}, "/runs/m1/prod/web/3")
	roundTrip(t, clientlib.Schedulers, &troupev1.SchedulerInfo{Metadata: meta("batch-0", ""), Kind: "batch",
		Heartbeat: timestamppb.New(epoch), Counters: &troupev1.SchedulerCounters{Attempts: 10, Conflicts: 2, Placements: 8, Busyness: 0.25}}, "/schedulers/batch-0")
	roundTrip(t, clientlib.ValidationPolicies, &troupev1.ValidationPolicy{Metadata: meta("limits", ""), Spec: &troupev1.ValidationPolicySpec{
		Kinds: []string{"Job"}, Rules: []*troupev1.ValidationRule{{Expression: "object.spec.count <= 1000", Message: "too many tasks", FieldPath: "spec.count"}},
	}}, "/policies/limits")
}

func TestKeyErrors(t *testing.T) {
	for name, err := range map[string]error{
		"no metadata":             keyErr(clientlib.Machines, &troupev1.Machine{}),
		"empty name":              keyErr(clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{}}),
		"slash in name":           keyErr(clientlib.Machines, &troupev1.Machine{Metadata: meta("a/b", "")}),
		"no namespace":            keyErr(clientlib.Jobs, &troupev1.Job{Metadata: meta("web", "")}),
		"task name":               keyErr(clientlib.Tasks, &troupev1.Task{Metadata: meta("web-9", "prod"), Spec: &troupev1.TaskSpec{Job: "web", Index: 3}}),
		"task name, index longer": keyErr(clientlib.Tasks, &troupev1.Task{Metadata: meta("web-30", "prod"), Spec: &troupev1.TaskSpec{Job: "web", Index: 3}}),
		"task name, leading zero": keyErr(clientlib.Tasks, &troupev1.Task{Metadata: meta("web-03", "prod"), Spec: &troupev1.TaskSpec{Job: "web", Index: 3}}),
		"task name, other job":    keyErr(clientlib.Tasks, &troupev1.Task{Metadata: meta("wex-3", "prod"), Spec: &troupev1.TaskSpec{Job: "web", Index: 3}}),
		"task name, no dash":      keyErr(clientlib.Tasks, &troupev1.Task{Metadata: meta("web_3", "prod"), Spec: &troupev1.TaskSpec{Job: "web", Index: 3}}),
		"task name, job only":     keyErr(clientlib.Tasks, &troupev1.Task{Metadata: meta("web", "prod"), Spec: &troupev1.TaskSpec{Job: "web", Index: 3}}),
		"binding name":            keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod/web", ""), Machine: "m1"}),
		"binding name, 4 parts":   keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod/web/3/4", ""), Machine: "m1"}),
		"binding name, no ns":     keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("/web/3", ""), Machine: "m1"}),
		"binding name, no job":    keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod//3", ""), Machine: "m1"}),
		"binding name, no index":  keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod/web/", ""), Machine: "m1"}),
		"binding name, not index": keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod/web/x", ""), Machine: "m1"}),
		"binding machine":         keyErr(clientlib.Bindings, &troupev1.Binding{Metadata: meta("prod/web/3", "")}),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func keyErr[T clientlib.Object](k clientlib.Kind[T], obj T) error {
	_, err := k.Key(obj)
	return err
}

func TestCreateGetUpdateDelete(t *testing.T) {
	ctx := context.Background()
	s := newMem()
	m := &troupev1.Machine{Metadata: meta("m1", ""), Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}}
	created, err := clientlib.Create(ctx, s, clientlib.Machines, m)
	if err != nil {
		t.Fatal(err)
	}
	if created.GetMetadata().GetVersion() == 0 || created.GetMetadata().GetUid() == "" || created.GetMetadata().GetCreated() == nil {
		t.Fatalf("created object lacks version, uid or creation time: %v", created.GetMetadata())
	}
	if m.GetMetadata().GetUid() != "" {
		t.Fatal("Create changed the caller's object")
	}
	var ce *clientlib.ConflictError
	if _, err := clientlib.Create(ctx, s, clientlib.Machines, m); !errors.As(err, &ce) || ce.Conflicts[0].Reason != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
		t.Fatalf("second create: %v, want a version conflict", err)
	}
	got, err := clientlib.Get(ctx, s, clientlib.Machines, "/machines/m1")
	if err != nil || !proto.Equal(got, created) {
		t.Fatalf("get: %v %v, want %v", got, err, created)
	}
	got.Spec.Unschedulable = true
	updated, err := clientlib.Update(ctx, s, clientlib.Machines, got)
	if err != nil || updated.GetMetadata().GetVersion() <= created.GetMetadata().GetVersion() {
		t.Fatalf("update: %v %v", updated, err)
	}
	// An update from a stale read conflicts and names the current version.
	created.Spec.Taints = []*troupev1.Taint{{Key: "x", Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}}
	if _, err := clientlib.Update(ctx, s, clientlib.Machines, created); !errors.As(err, &ce) || ce.Conflicts[0].CurrentVersion != updated.GetMetadata().GetVersion() {
		t.Fatalf("stale update: %v, want a conflict at version %d", err, updated.GetMetadata().GetVersion())
	}
	if _, err := clientlib.Update(ctx, s, clientlib.Machines, m); err == nil || !strings.Contains(err.Error(), "no version") {
		t.Fatalf("update without version: %v", err)
	}
	list, _, err := clientlib.List(ctx, s, clientlib.Machines, "")
	if err != nil || len(list) != 1 || !list[0].GetSpec().GetUnschedulable() {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := clientlib.Delete(ctx, s, clientlib.Machines, created); !errors.As(err, &ce) {
		t.Fatalf("delete of a stale version: %v", err)
	}
	if err := clientlib.Delete(ctx, s, clientlib.Machines, updated); err != nil {
		t.Fatal(err)
	}
	if _, err := clientlib.Get(ctx, s, clientlib.Machines, "/machines/m1"); !errors.Is(err, clientlib.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestListWithin(t *testing.T) {
	ctx := context.Background()
	s := newMem()
	for _, job := range []string{"web", "db"} {
		for i := range int32(3) {
			task := sampleTask()
			task.Metadata.Name, task.Spec.Job, task.Spec.Index = clientlib.TaskName(job, i), job, i
			if _, err := clientlib.Create(ctx, s, clientlib.Tasks, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	web, _, err := clientlib.List(ctx, s, clientlib.Tasks, "prod/web/")
	if err != nil || len(web) != 3 {
		t.Fatalf("tasks of web: %d %v", len(web), err)
	}
	all, _, err := clientlib.List(ctx, s, clientlib.Tasks, "")
	if err != nil || len(all) != 6 {
		t.Fatalf("all tasks: %d %v", len(all), err)
	}
}

// A transaction in the scheduler's shape: read a task, then bind it and
// take capacity in one group; a second binder with the same read loses.
func TestTxnPlacement(t *testing.T) {
	ctx := context.Background()
	s := newMem()
	task, err := clientlib.Create(ctx, s, clientlib.Tasks, sampleTask())
	if err != nil {
		t.Fatal(err)
	}
	place := func(machine string, cpu int64) (*clientlib.Outcome, error) {
		tx := clientlib.NewTxn(s).Atomic()
		kv, err := tx.Read(ctx, "/tasks/prod/web/3")
		if err != nil || kv == nil {
			t.Fatalf("read: %v %v", kv, err)
		}
		bound := proto.Clone(task).(*troupev1.Task)
		bound.Binding = &troupev1.TaskBinding{Machine: machine}
		clientlib.PutObject(tx.Group(), clientlib.Tasks, bound).
			Add("/alloc/"+machine+"/cpu", cpu, 0, 4000)
		return tx.Commit(ctx)
	}
	first, err := place("m1", 500)
	if err != nil || !first.Committed() {
		t.Fatalf("first placement: %v %v", first, err)
	}
	second, err := place("m2", 500)
	if err != nil {
		t.Fatal(err)
	}
	var ce *clientlib.ConflictError
	if second.Committed() || !errors.As(second.Err(), &ce) || ce.Conflicts[0].Key != "/tasks/prod/web/3" {
		t.Fatalf("second placement: %v, want a conflict on the task", second.Err())
	}
	if kv, _ := s.Get(ctx, "/alloc/m2/cpu"); kv != nil {
		t.Fatal("the losing atomic transaction took capacity")
	}
	// Bounds: the counter refuses to overcommit.
	tx := clientlib.NewTxn(s)
	tx.Group().Add("/alloc/m1/cpu", 3600, 0, 4000)
	out, err := tx.Commit(ctx)
	if err != nil || out.Committed() || out.Groups[0].Conflict.Reason != storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED {
		t.Fatalf("overcommit: %v %v", out, err)
	}
	// RequireRead needs a read first.
	tx = clientlib.NewTxn(s)
	tx.Group().RequireRead("/never/read").Put("/x", nil)
	if _, err := tx.Commit(ctx); err == nil {
		t.Fatal("RequireRead of an unread key accepted")
	}
	if _, err := clientlib.NewTxn(s).Commit(ctx); err == nil {
		t.Fatal("empty transaction accepted")
	}
	// Objects written in a transaction are validated like any other.
	invalid := sampleTask()
	invalid.Spec.Template.Command = ""
	tx = clientlib.NewTxn(s)
	clientlib.PutObject(tx.Group(), clientlib.Tasks, invalid)
	if _, err := tx.Commit(ctx); !errors.Is(err, clientlib.ErrInvalid) {
		t.Fatalf("transaction with an invalid task: %v", err)
	}
}

func TestParseTaskName(t *testing.T) {
	for _, tc := range []struct {
		name, job string
		index     int32
		ok        bool
	}{
		{"web-3", "web", 3, true},
		{"my-job-12", "my-job", 12, true},
		{"web", "", 0, false},
		{"-3", "", 0, false},
		{"web-x", "", 0, false},
	} {
		job, index, err := clientlib.ParseTaskName(tc.name)
		if (err == nil) != tc.ok || job != tc.job || index != tc.index {
			t.Errorf("ParseTaskName(%q) = %q, %d, %v", tc.name, job, index, err)
		}
	}
}

// Encode leaves out the version without changing the object (it may be
// shared with other readers, a cache's), and a write stores the same
// bytes whatever version the object was read at.
func TestEncodeReadsOnly(t *testing.T) {
	task := sampleTask()
	bare, err := clientlib.Encode(task)
	if err != nil {
		t.Fatal(err)
	}
	task.Metadata.Version = 42
	before := proto.Clone(task)
	b, err := clientlib.Encode(task)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(task, before) {
		t.Fatalf("Encode changed the object: %v, was %v", task, before)
	}
	if string(b) != string(bare) {
		t.Fatal("the encoding of a task read at version 42 differs from its encoding without version")
	}
	got, err := clientlib.Decode(clientlib.Tasks, b, 42)
	if err != nil || !proto.Equal(got, task) {
		t.Fatalf("decoded %v, %v; want %v", got, err, task)
	}
}

// Encode keeps every field of the metadata but the version: each set in
// turn, whatever fields the metadata may gain.
func TestEncodeKeepsEveryMetadataField(t *testing.T) {
	fields := (&troupev1.ObjectMeta{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		task := sampleTask()
		task.Metadata.Version = 42 // read at a version: Encode copies the metadata without it
		m := task.GetMetadata().ProtoReflect()
		setMetaField(t, m, fd)
		b, err := clientlib.Encode(task)
		if err != nil {
			t.Fatal(err)
		}
		got, err := clientlib.Decode(clientlib.Tasks, b, task.GetMetadata().GetVersion())
		if err != nil || !proto.Equal(got, task) {
			t.Fatalf("%s set: decoded %v, %v; want %v", fd.Name(), got, err, task)
		}
	}
}

// MetaAt copies every field of the metadata but the version, which it
// sets: each field in turn is set and must be in the copy.
func TestMetaAtKeepsEveryField(t *testing.T) {
	fields := (&troupev1.ObjectMeta{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		meta := &troupev1.ObjectMeta{Name: "t", Namespace: "sim", Version: 3}
		setMetaField(t, meta.ProtoReflect(), fd)
		want := proto.CloneOf(meta)
		want.Version = 7
		if got := clientlib.MetaAt(meta, 7); !proto.Equal(got, want) {
			t.Fatalf("%s set: MetaAt gives %v, want %v", fd.Name(), got, want)
		}
	}
}

// TaskAt keeps every field of the task: each field but the metadata in
// turn is set, and the copy at the task's own version must equal it.
func TestTaskAtKeepsEveryField(t *testing.T) {
	fields := (&troupev1.Task{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "metadata" {
			continue // TestMetaAtKeepsEveryField
		}
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			t.Fatalf("Task field %s is not a message: set it here", fd.Name())
		}
		task := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: "t", Namespace: "sim", Version: 3}}
		m := task.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message())) // present, empty
		if got := clientlib.TaskAt(task, 3); !proto.Equal(got, task) {
			t.Fatalf("%s set: TaskAt gives %v, want %v", fd.Name(), got, task)
		}
	}
}

// setMetaField sets field fd of m, an ObjectMeta, to a value other than
// its zero, for tests that set each of its fields in turn, whatever fields
// it gains: a map gets one entry, a message (a timestamp) an hour past
// epoch, a string "set", a uint64 9. A field of another kind fails t,
// saying to add one.
func setMetaField(t testing.TB, m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	t.Helper()
	switch {
	case fd.IsMap():
		m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
	case fd.Message() != nil:
		m.Set(fd, protoreflect.ValueOfMessage(timestamppb.New(epoch.Add(time.Hour)).ProtoReflect()))
	case fd.Kind() == protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString("set"))
	case fd.Kind() == protoreflect.Uint64Kind:
		m.Set(fd, protoreflect.ValueOfUint64(9))
	default:
		t.Fatalf("field %s: no value of kind %v here: add one", fd.Name(), fd.Kind())
	}
}
