package clientlib

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Object is what every kind's Go type is: a protobuf message with
// metadata, and vtprotobuf's generated encoding, which Encode and Decode
// use (reflection's cost a good share of a scheduler's CPU).
type Object interface {
	proto.Message
	GetMetadata() *troupev1.ObjectMeta
	MarshalVT() ([]byte, error)
	UnmarshalVT(b []byte) error
	// InvalidUTF8 is the path of a string that is not UTF-8 ("": none).
	InvalidUTF8() string
}

// Kind describes one kind of object: its name, where its objects live in
// the keyspace, and how to make an empty one. Kinds are values; the
// package defines one per type of the object model (Machines, Jobs, ...).
type Kind[T Object] struct {
	// Name is the kind's name in manifests and policies ("Machine").
	Name string
	// Namespaced kinds need metadata.namespace.
	Namespaced bool
	// Prefix is the key prefix of every object of the kind.
	Prefix string
	// key returns the key of obj: prefix (the kind's Prefix) and what
	// follows, in one concatenation (every object written or read is
	// keyed).
	key func(prefix string, obj T) (string, error)
	new func() T
	// onPut and onDelete, if set, add what every write of an object of
	// the kind writes beside it, in the same group.
	onPut, onDelete func(g *Group, obj T)
}

// Key returns the store key of obj.
func (k Kind[T]) Key(obj T) (string, error) {
	if obj.GetMetadata() == nil {
		return "", fmt.Errorf("%s: metadata is required", k.Name)
	}
	key, err := k.key(k.Prefix, obj)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", k.Name, obj.GetMetadata().GetName(), err)
	}
	return key, nil
}

// New returns an empty object of the kind.
func (k Kind[T]) New() T { return k.new() }

// segment checks one path segment of a key.
func segment(what, s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%s is empty", what)
	}
	if strings.Contains(s, "/") {
		return "", fmt.Errorf("%s %q contains '/'", what, s)
	}
	return s, nil
}

func byName[T Object](prefix string, obj T) (string, error) {
	name, err := segment("name", obj.GetMetadata().GetName())
	return prefix + name, err
}

func byNamespaceName[T Object](prefix string, obj T) (string, error) {
	ns, err := segment("namespace", obj.GetMetadata().GetNamespace())
	if err != nil {
		return "", err
	}
	name, err := segment("name", obj.GetMetadata().GetName())
	return prefix + ns + "/" + name, err
}

// TaskRef is a task's identity, "<namespace>/<job>/<index>": the name of
// its Binding and Run and the tail of their keys.
func TaskRef(namespace, job string, index int32) string {
	return namespace + "/" + job + "/" + strconv.Itoa(int(index))
}

// TaskName is the metadata.name of a job's task.
func TaskName(job string, index int32) string { return job + "-" + strconv.Itoa(int(index)) }

// ParseTaskName splits a task's metadata.name, "<job>-<index>".
func ParseTaskName(name string) (job string, index int32, err error) {
	i := strings.LastIndex(name, "-")
	if i <= 0 {
		return "", 0, fmt.Errorf("task name %q is not <job>-<index>", name)
	}
	n, err := strconv.ParseUint(name[i+1:], 10, 31)
	if err != nil {
		return "", 0, fmt.Errorf("task name %q is not <job>-<index>: the index is not a number", name)
	}
	return name[:i], int32(n), nil
}

// taskRef checks a "<namespace>/<job>/<index>" name.
func taskRef(name string) (string, error) {
	// Cut, not Split: every Binding written or read is checked.
	ns, rest, ok1 := strings.Cut(name, "/")
	job, index, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || ns == "" || job == "" || strings.Contains(index, "/") {
		return "", fmt.Errorf("name %q is not <namespace>/<job>/<index>", name)
	}
	if _, err := strconv.ParseUint(index, 10, 31); err != nil {
		return "", fmt.Errorf("name %q: index is not a number", name)
	}
	return name, nil
}

// machineScoped keys an object by its machine and task reference.
func machineScoped(prefix, machine, name string) (string, error) {
	m, err := segment("machine", machine)
	if err != nil {
		return "", err
	}
	ref, err := taskRef(name)
	return prefix + m + "/" + ref, err
}

// The kinds of the object model and their keys (see ARCHITECTURE.md).
var (
	Machines = Kind[*troupev1.Machine]{Name: "Machine", Prefix: "/machines/",
		key: byName[*troupev1.Machine], new: func() *troupev1.Machine { return &troupev1.Machine{} }}
	Leases = Kind[*troupev1.Lease]{Name: "Lease", Prefix: "/leases/",
		key: byName[*troupev1.Lease], new: func() *troupev1.Lease { return &troupev1.Lease{} }}
	Jobs = Kind[*troupev1.Job]{Name: "Job", Namespaced: true, Prefix: "/jobs/",
		key: byNamespaceName[*troupev1.Job], new: func() *troupev1.Job { return &troupev1.Job{} },
		onPut: putJobStop, onDelete: deleteJobStop}
	Tasks = Kind[*troupev1.Task]{Name: "Task", Namespaced: true, Prefix: "/tasks/",
		key: func(prefix string, t *troupev1.Task) (string, error) {
			ns, err := segment("namespace", t.GetMetadata().GetNamespace())
			if err != nil {
				return "", err
			}
			job, err := segment("spec.job", t.GetSpec().GetJob())
			if err != nil {
				return "", err
			}
			// The name is checked against <job>-<index> without making
			// that string: the key is the one allocation.
			var buf [11]byte
			index := strconv.AppendInt(buf[:0], int64(t.GetSpec().GetIndex()), 10)
			if name := t.GetMetadata().GetName(); len(name) != len(job)+1+len(index) || name[:len(job)] != job ||
				name[len(job)] != '-' || name[len(job)+1:] != string(index) {
				return "", fmt.Errorf("name must be %q (<job>-<index>)", TaskName(job, t.GetSpec().GetIndex()))
			}
			return prefix + ns + "/" + job + "/" + string(index), nil
		},
		new: func() *troupev1.Task { return &troupev1.Task{} }}
	Bindings = Kind[*troupev1.Binding]{Name: "Binding", Prefix: "/bindings/",
		key: func(prefix string, b *troupev1.Binding) (string, error) {
			return machineScoped(prefix, b.GetMachine(), b.GetMetadata().GetName())
		},
		new: func() *troupev1.Binding { return &troupev1.Binding{} }}
	Runs = Kind[*troupev1.Run]{Name: "Run", Prefix: "/runs/",
		key: func(prefix string, r *troupev1.Run) (string, error) {
			return machineScoped(prefix, r.GetMachine(), r.GetMetadata().GetName())
		},
		new: func() *troupev1.Run { return &troupev1.Run{} }}
	Schedulers = Kind[*troupev1.SchedulerInfo]{Name: "SchedulerInfo", Prefix: "/schedulers/",
		key: byName[*troupev1.SchedulerInfo], new: func() *troupev1.SchedulerInfo { return &troupev1.SchedulerInfo{} }}
	ValidationPolicies = Kind[*troupev1.ValidationPolicy]{Name: "ValidationPolicy", Prefix: "/policies/",
		key: byName[*troupev1.ValidationPolicy], new: func() *troupev1.ValidationPolicy { return &troupev1.ValidationPolicy{} }}
	// RunAsPolicies say which host users a namespace's tasks may run as:
	// at most one per namespace, named after it (/runas/<namespace>); the
	// kind is not namespaced, so that writing a namespace's jobs does not
	// imply writing its users.
	RunAsPolicies = Kind[*troupev1.RunAsPolicy]{Name: "RunAsPolicy", Prefix: "/runas/",
		key: byName[*troupev1.RunAsPolicy], new: func() *troupev1.RunAsPolicy { return &troupev1.RunAsPolicy{} }}
	// Quotas limit what a namespace's live tasks hold, per priority band:
	// at most one per namespace, named after it (/quotas/<namespace>);
	// not namespaced, like RunAsPolicies, so that writing a namespace's
	// jobs does not imply raising its quota (see quota.go).
	Quotas = Kind[*troupev1.Quota]{Name: "Quota", Prefix: "/quotas/",
		key: byName[*troupev1.Quota], new: func() *troupev1.Quota { return &troupev1.Quota{} }}
	// JobSchedulings are schedulers' word on jobs' pending tasks, one per
	// job, named after it and kept with it (/scheduling/<namespace>/<job>):
	// a kind of their own because schedulers may not write jobs.
	JobSchedulings = Kind[*troupev1.JobScheduling]{Name: "JobScheduling", Namespaced: true, Prefix: "/scheduling/",
		key: byNamespaceName[*troupev1.JobScheduling], new: func() *troupev1.JobScheduling { return &troupev1.JobScheduling{} }}
	// Events are those of jobs and their tasks, kept with the job
	// (/events/<namespace>/<job>/<name>); MachineEvents those of machines
	// (/machineevents/<machine>/<name>). Both hold Events: EventsOf says
	// which an event belongs to.
	Events = Kind[*troupev1.Event]{Name: "Event", Namespaced: true, Prefix: "/events/",
		key: func(prefix string, e *troupev1.Event) (string, error) {
			ns, err := segment("namespace", e.GetMetadata().GetNamespace())
			if err != nil {
				return "", err
			}
			job, err := segment("job", e.GetJob())
			if err != nil {
				return "", err
			}
			name, err := segment("name", e.GetMetadata().GetName())
			return prefix + ns + "/" + job + "/" + name, err
		},
		new: func() *troupev1.Event { return &troupev1.Event{} }}
	MachineEvents = Kind[*troupev1.Event]{Name: "Event", Prefix: "/machineevents/",
		key: func(prefix string, e *troupev1.Event) (string, error) {
			m, err := segment("involved_name", e.GetInvolvedName())
			if err != nil {
				return "", err
			}
			name, err := segment("name", e.GetMetadata().GetName())
			return prefix + m + "/" + name, err
		},
		new: func() *troupev1.Event { return &troupev1.Event{} }}
)

// EventsOf returns the kind an event is stored as: MachineEvents for a
// machine's, Events for a job's or a task's.
func EventsOf(e *troupev1.Event) Kind[*troupev1.Event] {
	if e.GetInvolvedKind() == Machines.Name {
		return MachineEvents
	}
	return Events
}

// DecodeCounter reads a counter key's value (decimal text) into a
// Counter named after the key's last segment.
func DecodeCounter(key string, value []byte, version uint64) (*troupev1.Counter, error) {
	v, err := CounterValue(key, value)
	if err != nil {
		return nil, err
	}
	// The counter and its metadata in one allocation: a scheduler's cache
	// decodes each counter a placement changes, and its old value.
	c := &struct {
		counter troupev1.Counter
		meta    troupev1.ObjectMeta
	}{}
	c.meta.Name, c.meta.Version = key, version
	c.counter.Metadata, c.counter.Value = &c.meta, v
	return &c.counter, nil
}

// CounterValue reads a counter key's value (decimal text).
func CounterValue(key string, value []byte) (int64, error) {
	v, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("counter %s: %w", key, err)
	}
	return v, nil
}

// Encode returns the stored form of obj: its encoding without
// metadata.version, which belongs to the key, not the value. obj is only
// read. The encoding is deterministic (map entries in key order: see
// troupev1's keysDescending), the same bytes as
// proto.MarshalOptions{Deterministic: true} gives.
func Encode[T Object](obj T) ([]byte, error) {
	if obj.GetMetadata().GetVersion() == 0 {
		return obj.MarshalVT()
	}
	if t, ok := any(obj).(*troupev1.Task); ok { // the most written kind, without reflection
		return TaskAt(t, 0).MarshalVT()
	}
	return withoutVersion(obj.ProtoReflect()).Interface().(T).MarshalVT()
}

// TaskAt returns a shallow copy of t whose metadata is a copy of its own at
// version (0: without one), sharing every other field's value with t: a
// task to encode or to change and write, made from one read from a cache
// or a snapshot, whose messages are replaced, never changed in place.
// TaskAt and MetaAt name the fields, as reflection cost as much as
// encoding the task (TestTaskAtKeepsEveryField and
// TestMetaAtKeepsEveryField see that none is left out).
func TaskAt(t *troupev1.Task, version uint64) *troupev1.Task {
	return &troupev1.Task{Metadata: MetaAt(t.GetMetadata(), version), Spec: t.GetSpec(), Binding: t.GetBinding(),
		Status: t.GetStatus(), Charge: t.GetCharge()}
}

// MetaAt returns a shallow copy of m at version (0: without one), sharing
// its maps and messages.
func MetaAt(m *troupev1.ObjectMeta, version uint64) *troupev1.ObjectMeta {
	return &troupev1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), Uid: m.GetUid(), Labels: m.GetLabels(),
		Annotations: m.GetAnnotations(), Version: version, Created: m.GetCreated()}
}

// withoutVersion returns a shallow copy of object m with its metadata
// copied without the version: the copy shares every other field's value
// with m (a deep copy of a task costs more than encoding it), so it is
// for reading only.
func withoutVersion(m protoreflect.Message) protoreflect.Message {
	out := shallowCopy(m)
	fd := m.Descriptor().Fields().ByName("metadata")
	meta := MetaAt(m.Get(fd).Message().Interface().(*troupev1.ObjectMeta), 0)
	out.Set(fd, protoreflect.ValueOfMessage(meta.ProtoReflect()))
	return out
}

// shallowCopy returns a new message whose populated fields hold m's
// values (messages, lists and maps shared, not copied).
func shallowCopy(m protoreflect.Message) protoreflect.Message {
	out := m.New()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		out.Set(fd, v)
		return true
	})
	return out
}

// Decode decodes a stored value of kind k written at version.
func Decode[T Object](k Kind[T], value []byte, version uint64) (T, error) {
	obj := k.New()
	if err := obj.UnmarshalVT(value); err != nil {
		return obj, fmt.Errorf("decode %s: %w", k.Name, err)
	}
	if obj.GetMetadata() == nil {
		return obj, fmt.Errorf("decode %s: no metadata", k.Name)
	}
	obj.GetMetadata().Version = version
	return obj, nil
}
