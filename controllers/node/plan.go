package node

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Changes is what Plan decides for one machine, in the order the
// controller commits it.
type Changes struct {
	// Status is the machine's new status; nil when it stays as it is.
	// LOST when its lease has run out (or it has none), READY again once
	// the lease is renewed.
	Status *troupev1.MachineStatus
	// Release are the tasks to take off a machine whose lease has run
	// out, in the order given, each its own transaction, once Status is
	// written (none if that write fails).
	Release []Release

	machine string
	expired string // why the machine is lost, for its event
}

// Release is one task taken off a lost machine: To over From, on the
// condition that the task still has From's version, in a transaction
// that also unbinds it (clientlib.Unbind: its Binding deleted, its
// requests given back). To is From unbound and LOST, for its job to
// replace it.
type Release struct {
	From, To *troupev1.Task
}

// Event is an event to record: the arguments of clientlib.EventRecorder's
// Record.
type Event struct {
	InvolvedKind, Namespace, Scope, Name string
	Type, Reason, Message                string
}

func machineEvent(machine, eventType, reason, message string) Event {
	return Event{InvolvedKind: clientlib.Machines.Name, Scope: machine, Name: machine, Type: eventType, Reason: reason, Message: message}
}

// Events returns the events to record once Status is written and
// released of the tasks of Release are: MachineLost (how long ago the
// lease expired, how many tasks were released) or MachineReady. None
// when Status is nil.
func (c Changes) Events(released int) []Event {
	switch c.Status.GetPhase() {
	case troupev1.MachinePhase_MACHINE_PHASE_LOST:
		return []Event{machineEvent(c.machine, clientlib.EventWarning, "MachineLost", fmt.Sprintf("%s; %d task(s) released", c.expired, released))}
	case troupev1.MachinePhase_MACHINE_PHASE_READY:
		return []Event{machineEvent(c.machine, clientlib.EventNormal, "MachineReady", "Lease renewed: the machine is READY again")}
	}
	return nil
}

// Plan decides what follows for machine m at now, from its lease (nil:
// it has none) and the tasks bound to it (tasks bound elsewhere are
// ignored). A machine whose lease has run out (renewed + duration is not
// after now) is marked LOST, and every task bound to it is released,
// for as long as it stays without a live lease; a LOST machine whose
// lease is live again is READY again. A machine's other phases, and its
// spec (cordon included), are the agent's and the operators': Plan
// leaves them alone. It reads nothing but its arguments and changes none
// of them.
func Plan(m *troupev1.Machine, lease *troupev1.Lease, bound []*troupev1.Task, now time.Time) Changes {
	name := m.GetMetadata().GetName()
	expires := lease.GetRenewed().AsTime().Add(lease.GetDuration().AsDuration())
	alive := lease != nil && expires.After(now)
	lost := m.GetStatus().GetPhase() == troupev1.MachinePhase_MACHINE_PHASE_LOST
	ch := Changes{machine: name}
	switch {
	case !alive && !lost:
		ch.Status = &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_LOST, Message: "lease expired"}
		ch.expired = "No lease"
		if lease != nil {
			ch.expired = fmt.Sprintf("Lease of %s expired %v ago", lease.GetHolder(), now.Sub(expires).Round(time.Millisecond))
		}
	case alive && lost:
		ch.Status = &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}
	}
	if alive {
		return ch
	}
	for _, t := range bound {
		if t.GetBinding().GetMachine() != name {
			continue
		}
		u := proto.Clone(t).(*troupev1.Task)
		u.Binding = nil
		u.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_LOST, Reason: "machine " + name + " lost",
			Finished: timestamppb.New(now)}
		ch.Release = append(ch.Release, Release{From: t, To: u})
	}
	return ch
}
