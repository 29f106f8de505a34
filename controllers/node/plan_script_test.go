package node_test

// Data-driven scripts for the node lifecycle controller's pure core,
// Plan, on github.com/cockroachdb/datadriven. Each testdata/*.txt is one
// script: it sets up machines, their leases and the tasks bound to them
// in a compact text form, moves the clock, and checks; a check prints
// the changes Plan returns for each machine and applies them to the
// script's state as the controller would commit them.
//
// Run
//
//	go test ./controllers/node -run TestPlanScripts -rewrite
//
// to replace every expected output with what the code does now, then
// review the diff.
//
// Commands (times print as offsets from the script's epoch, "+10s"):
//
//	machine name=M [phase=ready|lost|none] [cordon[=false]]
//	    Registers machine M (as its agent does: READY) or changes it.
//	lease machine=M [renewed=DUR] [duration=DUR] [holder=H] | lease machine=M none
//	    M's lease, renewed at the epoch + renewed (default: now),
//	    for duration (default 10s); none: M has no lease.
//	bind task=J-I machine=M
//	    A scheduler binds task I of job J to M (created if new).
//	advance DUR
//	    Moves the clock on.
//	check [dry]
//	    Plan for every machine, in name order, at now: prints the
//	    changes with their events and applies them (dry: prints only).
//	state
//	    The machines, their leases and the tasks.
//
// Every check also checks that Plan changes none of its arguments.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/controllers/internal/scripttest"
	"github.com/troupe-cluster/troupe/controllers/node"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func TestPlanScripts(t *testing.T) {
	scripttest.Run(t, func() *nodeScript {
		return &nodeScript{clock: scripttest.NewClock(), machines: map[string]*troupev1.Machine{}, leases: map[string]*troupev1.Lease{},
			tasks: map[string]*troupev1.Task{}}
	}, nodeCommands)
}

// nodeScript is the state of one script: what the controller's caches
// would hold.
type nodeScript struct {
	clock    *scripttest.Clock
	rev      uint64
	machines map[string]*troupev1.Machine
	leases   map[string]*troupev1.Lease
	tasks    map[string]*troupev1.Task // by name
}

var nodeCommands = map[string]func(*nodeScript, *scripttest.Args) string{
	"machine": (*nodeScript).cmdMachine,
	"lease":   (*nodeScript).cmdLease,
	"bind":    (*nodeScript).cmdBind,
	"advance": func(s *nodeScript, a *scripttest.Args) string { return s.clock.Advance(a) },
	"check":   (*nodeScript).cmdCheck,
	"state":   (*nodeScript).cmdState,
}

func (s *nodeScript) nextVersion() uint64 {
	s.rev++
	return s.rev
}

var machinePhases = map[string]troupev1.MachinePhase{
	"none": troupev1.MachinePhase_MACHINE_PHASE_UNSPECIFIED, "ready": troupev1.MachinePhase_MACHINE_PHASE_READY,
	"lost": troupev1.MachinePhase_MACHINE_PHASE_LOST,
}

func (s *nodeScript) cmdMachine(a *scripttest.Args) string {
	name := a.Required("name")
	m, ok := s.machines[name]
	if !ok {
		m = &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: name}, Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000}}}
		clientlib.Default(m)
	} else {
		m = proto.Clone(m).(*troupev1.Machine)
	}
	if p := a.Enum("phase", "", slices.Sorted(maps.Keys(machinePhases))...); p != "" {
		m.Status = &troupev1.MachineStatus{Phase: machinePhases[p]}
	}
	if a.Has("cordon") {
		m.Spec.Unschedulable = a.Flag("cordon")
	}
	m.Metadata.Version = s.nextVersion()
	s.machines[name] = m
	return describeMachine(m)
}

func (s *nodeScript) cmdLease(a *scripttest.Args) string {
	m := a.Required("machine")
	if a.Flag("none") {
		delete(s.leases, m)
		return describeLease(m, nil, s.clock.Now)
	}
	l := &troupev1.Lease{Metadata: &troupev1.ObjectMeta{Name: m}, Holder: a.Str("holder", "agent/"+m),
		Renewed: timestamppb.New(s.clock.Now), Duration: durationpb.New(a.Duration("duration", 10*time.Second))}
	if a.Has("renewed") {
		l.Renewed = timestamppb.New(scripttest.Epoch.Add(a.Duration("renewed", 0)))
	}
	l.Metadata.Version = s.nextVersion()
	s.leases[m] = l
	return describeLease(m, l, s.clock.Now)
}

func (s *nodeScript) cmdBind(a *scripttest.Args) string {
	name := a.Required("task")
	job, index, err := clientlib.ParseTaskName(name)
	if err != nil {
		a.Fatalf("%v", err)
	}
	t, ok := s.tasks[name]
	if !ok {
		t = &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: &troupev1.TaskSpec{Job: job, Index: index, Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 1000}}}}
	} else {
		t = proto.Clone(t).(*troupev1.Task)
	}
	t.Binding = &troupev1.TaskBinding{Machine: a.Required("machine"), BoundAt: timestamppb.New(s.clock.Now)}
	t.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_BOUND}
	t.Metadata.Version = s.nextVersion()
	s.tasks[name] = t
	return describeTask(t)
}

func (s *nodeScript) cmdCheck(a *scripttest.Args) string {
	dry := a.Flag("dry")
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.machines)) {
		m, lease := s.machines[name], s.leases[name]
		var bound []*troupev1.Task
		for _, tn := range slices.Sorted(maps.Keys(s.tasks)) {
			if t := s.tasks[tn]; t.GetBinding().GetMachine() == name {
				bound = append(bound, t)
			}
		}
		mIn, leaseIn := proto.Clone(m), proto.Clone(lease)
		boundIn := cloneTasks(bound)
		ch := node.Plan(m, lease, bound, s.clock.Now)
		if !proto.Equal(mIn, m) || !proto.Equal(leaseIn, lease) || !slices.EqualFunc(boundIn, bound, func(x, y *troupev1.Task) bool { return proto.Equal(x, y) }) {
			a.Fatalf("Plan changed its arguments")
		}
		if ch.Status == nil && len(ch.Release) == 0 {
			continue
		}
		if ch.Status != nil {
			out = append(out, fmt.Sprintf("%s: status %s", name, describeStatus(ch.Status)))
		} else {
			out = append(out, name+": status unchanged")
		}
		for _, r := range ch.Release {
			line := fmt.Sprintf("  release %s: %s -> %s", r.From.GetMetadata().GetName(), describeTaskState(r.From), describeTaskState(r.To))
			if m := r.From.GetBinding().GetMachine(); m != "" {
				line += " (unbinds from " + m + ")"
			}
			out = append(out, line)
		}
		for _, e := range ch.Events(len(ch.Release)) {
			out = append(out, fmt.Sprintf("  event %s %s %s %s: %s", e.Type, e.Reason, e.InvolvedKind, e.Name, e.Message))
		}
		if dry {
			continue
		}
		if ch.Status != nil {
			m = proto.Clone(m).(*troupev1.Machine)
			m.Status = ch.Status
			m.Metadata.Version = s.nextVersion()
			s.machines[name] = m
		}
		for _, r := range ch.Release {
			t := proto.Clone(r.To).(*troupev1.Task)
			t.Metadata.Version = s.nextVersion()
			s.tasks[t.GetMetadata().GetName()] = t
		}
	}
	if len(out) == 0 {
		return "no changes"
	}
	return strings.Join(out, "\n")
}

func (s *nodeScript) cmdState(*scripttest.Args) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.machines)) {
		out = append(out, describeMachine(s.machines[name]), "  "+describeLease(name, s.leases[name], s.clock.Now))
	}
	for _, name := range slices.Sorted(maps.Keys(s.tasks)) {
		out = append(out, describeTask(s.tasks[name]))
	}
	return strings.Join(out, "\n")
}

func cloneTasks(ts []*troupev1.Task) []*troupev1.Task {
	out := make([]*troupev1.Task, len(ts))
	for i, t := range ts {
		out[i] = proto.Clone(t).(*troupev1.Task)
	}
	return out
}

func lower(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

func describeStatus(st *troupev1.MachineStatus) string {
	line := lower(st.GetPhase().String(), "MACHINE_PHASE_")
	if st.GetMessage() != "" {
		line += fmt.Sprintf(" message=%q", st.GetMessage())
	}
	return line
}

func describeMachine(m *troupev1.Machine) string {
	line := fmt.Sprintf("machine %s: %s", m.GetMetadata().GetName(), describeStatus(m.GetStatus()))
	if m.GetSpec().GetUnschedulable() {
		line += " cordoned"
	}
	return line
}

func describeLease(m string, l *troupev1.Lease, now time.Time) string {
	if l == nil {
		return "lease of " + m + ": none"
	}
	expires := l.GetRenewed().AsTime().Add(l.GetDuration().AsDuration())
	live := "live"
	if !expires.After(now) {
		live = "expired"
	}
	return fmt.Sprintf("lease of %s: holder=%s renewed=%s duration=%v expires=%s (%s)", m, l.GetHolder(), scripttest.At(l.GetRenewed()),
		l.GetDuration().AsDuration(), scripttest.At(timestamppb.New(expires)), live)
}

func describeTask(t *troupev1.Task) string {
	return t.GetMetadata().GetName() + " " + describeTaskState(t)
}

func describeTaskState(t *troupev1.Task) string {
	st := t.GetStatus()
	line := lower(st.GetPhase().String(), "TASK_PHASE_")
	if m := t.GetBinding().GetMachine(); m != "" {
		line += " on=" + m
	}
	if st.GetReason() != "" {
		line += fmt.Sprintf(" reason=%q", st.GetReason())
	}
	if st.GetFinished() != nil {
		line += " finished=" + scripttest.At(st.GetFinished())
	}
	return line
}
