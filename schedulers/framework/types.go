package framework

import (
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Code is a plugin verdict's kind.
type Code int

const (
	// Success: the task may run there.
	Success Code = iota
	// Unschedulable: the task cannot run there in the current cell.
	Unschedulable
	// Error: the plugin could not decide; the task is not placed this
	// round.
	Error
)

// Status is a plugin's verdict. A nil *Status is Success.
type Status struct {
	Code    Code
	Plugin  string
	Reasons []string
	// Refused and Machines are, in the status of a task that Schedule
	// found fits nowhere (Unschedulable), what its reason says in
	// words: how many machines each filter plugin refused, and how many
	// machines the decision looked at ("0/Machines machines fit: ...").
	// A task larger than any machine's free room (Snapshot.MaxFree)
	// counts every machine as refused by the profile's FitFilter, if it
	// has one. Nil and 0 in plugins' verdicts.
	Refused  map[string]int
	Machines int
	// explain works the reasons out when they are first asked for.
	explain func() []string
}

// NewStatus returns a status of code from plugin with reasons.
func NewStatus(code Code, plugin string, reasons ...string) *Status {
	return &Status{Code: code, Plugin: plugin, Reasons: reasons}
}

// Explained returns a status of code from plugin whose reasons explain
// works out only when they are asked for (Explain): a filter refuses most
// machines of a full cell, and a decision reads one reason per plugin.
func Explained(code Code, plugin string, explain func() []string) *Status {
	return &Status{Code: code, Plugin: plugin, explain: explain}
}

// Explain returns the status's reasons.
func (s *Status) Explain() []string {
	if s.explain != nil {
		s.Reasons, s.explain = s.explain(), nil
	}
	return s.Reasons
}

// IsSuccess reports whether s is nil or Success.
func (s *Status) IsSuccess() bool { return s == nil || s.Code == Success }

func (s *Status) String() string {
	if s.IsSuccess() {
		return "success"
	}
	kind := "unschedulable"
	if s.Code == Error {
		kind = "error"
	}
	return fmt.Sprintf("%s (%s): %s", kind, s.Plugin, strings.Join(s.Explain(), "; "))
}

// Machine is one machine as a decision sees it. The scheduler fills it
// from its cache; Allocated sums the requests placed on it (the store's
// /alloc counters), and JobTasks counts tasks per job on it.
type Machine struct {
	Name      string
	Object    *troupev1.Machine // for CEL constraints; read-only
	Labels    map[string]string
	Taints    []*troupev1.Taint
	Capacity  map[string]int64
	Allocated map[string]int64
	// AllocVersions are the store versions of the machine's counters, for
	// coarse-grained conflict detection. The counters of a MachineView
	// include the machine's claims counter, if it has one, under
	// clientlib.ClaimsCounter (in Allocated: the placements committed on
	// the machine in CoarseClaims mode; in AllocVersions: its claim
	// sequence number, which CoarseClaims commits require); no task
	// requests it, so filters and scores never see it.
	AllocVersions map[string]uint64
	JobTasks      map[string]int
	// Unschedulable machines (cordoned, lost) get no new tasks.
	Unschedulable bool
	// usage is Capacity and Allocated of CPU and Memory, flat, if
	// usage.of is this machine (see Flatten).
	usage flatUsage
}

// Usage is how much CPU and Memory a machine has and has allocated,
// flat: 0 of a resource it lacks or has no counter of.
type Usage struct {
	CPUCapacity, MemoryCapacity   int64
	CPUAllocated, MemoryAllocated int64
}

// flatUsage is a machine's Usage, recorded by Flatten on the machine of,
// and whether it has CPU and Memory at all (for its Room).
type flatUsage struct {
	Usage
	hasCPU, hasMemory bool
	of                *Machine
}

// Flatten records m's Usage from its maps, so that scores read it, and
// RoomOf m's room, without map lookups (Machine.Usage). A copy of m
// (c := *m) does not have it (the copy's Allocated is usually about to
// change): whoever changes a machine's Capacity or Allocated, or copies
// it, flattens it again (or FlattenAs), or leaves them to read the maps.
func (m *Machine) Flatten() {
	cpu, hasCPU := m.Capacity[CPU]
	memory, hasMemory := m.Capacity[Memory]
	m.usage = flatUsage{Usage: Usage{
		CPUCapacity: cpu, MemoryCapacity: memory,
		CPUAllocated: m.Allocated[CPU], MemoryAllocated: m.Allocated[Memory],
	}, hasCPU: hasCPU, hasMemory: hasMemory, of: m}
}

// FlattenAs flattens m, whose Capacity and Allocated are o's (a copy of
// o with other fields changed), by taking o's Usage if o is flattened.
func (m *Machine) FlattenAs(o *Machine) {
	if o.usage.of != o {
		m.Flatten()
		return
	}
	m.usage = o.usage
	m.usage.of = m
}

// FlattenAllocated flattens m, whose Capacity is o's (a copy of o with
// other counters), by taking o's capacity if o is flattened: only m's
// Allocated is read.
func (m *Machine) FlattenAllocated(o *Machine) {
	m.FlattenAs(o)
	m.usage.CPUAllocated, m.usage.MemoryAllocated = m.Allocated[CPU], m.Allocated[Memory]
}

// allocate adds t's requests to m's Allocated (a map of m's own),
// keeping its Usage.
func (m *Machine) allocate(t *Task) {
	for r, v := range t.Requests {
		m.Allocated[r] += v
	}
	if m.usage.of != m {
		m.Flatten()
		return
	}
	cpu, memory, only := t.CPUMemory()
	if !only {
		cpu, memory = t.Requests[CPU], t.Requests[Memory]
	}
	m.usage.CPUAllocated += cpu
	m.usage.MemoryAllocated += memory
}

// Usage returns m's Usage as Flatten last recorded it on m (false: not
// flattened, read the maps).
func (m *Machine) Usage() (Usage, bool) { return m.usage.Usage, m.usage.of == m }

// flatFree returns, from m's Usage, what m has free of r and whether it
// has r at all; ok is false unless r is CPU or Memory and m is
// flattened.
func (m *Machine) flatFree(r string) (free int64, has, ok bool) {
	u := &m.usage
	if u.of != m {
		return 0, false, false
	}
	switch r {
	case CPU:
		return u.CPUCapacity - u.CPUAllocated, u.hasCPU, true
	case Memory:
		return u.MemoryCapacity - u.MemoryAllocated, u.hasMemory, true
	}
	return 0, false, false
}

// Running is a task bound to a machine, as preemption sees it.
type Running struct {
	Key      string
	Task     *troupev1.Task // at the version the snapshot read
	Job      string
	Priority int32
	Requests map[string]int64
}

// ProductionPriority starts the production band: tasks at or above it
// never preempt one another. It is clientlib's, which quota bands share.
const ProductionPriority = clientlib.ProductionPriority

// CanPreempt reports whether a task of priority p may evict a task of
// priority victim: only a lower priority, and never production by
// production; that is, a priority below PreemptsBelow(p).
func CanPreempt(p, victim int32) bool {
	return victim < p && !(victim >= ProductionPriority && p >= ProductionPriority)
}

// PreemptsBelow returns the priority below which a task of priority p
// may evict tasks (CanPreempt).
func PreemptsBelow(p int32) int32 { return min(p, ProductionPriority) }

// Free returns how much of resource r is left.
func (m *Machine) Free(r string) int64 {
	if free, _, ok := m.flatFree(r); ok {
		return free
	}
	return m.Capacity[r] - m.Allocated[r]
}

// Fits reports whether m has room for request req of resource r: a
// request of zero or less asks for nothing; otherwise m must have r and
// at least req of it free.
func (m *Machine) Fits(r string, req int64) bool {
	if req <= 0 {
		return true
	}
	if free, has, ok := m.flatFree(r); ok {
		return has && req <= free
	}
	c, ok := m.Capacity[r]
	return ok && req <= c-m.Allocated[r]
}

// The resources the free-room index of a decision covers (see
// FitFilter, Room): every task asks for them. The filters check any
// other resource on the machines the index finds.
const (
	CPU    = "cpu"
	Memory = "memory"
)

// Room is what a machine has free of CPU and Memory (Machine.Free), flat.
type Room struct{ CPU, Memory int64 }

// Evictable is what some of a machine's tasks come to: how many, and how
// much CPU and Memory they request in all (requests of zero or less
// counting as nothing; more of either will do).
type Evictable struct {
	Tasks    int
	Requests Room
}

// RoomOf returns m's Room: -1 of a resource m does not have, so that
// Room.fits answers as Machine.Fits does.
func RoomOf(m *Machine) Room { return Room{CPU: m.room(CPU), Memory: m.room(Memory)} }

func (m *Machine) room(r string) int64 {
	if free, has, ok := m.flatFree(r); ok {
		if !has {
			return -1
		}
		return free
	}
	c, ok := m.Capacity[r]
	if !ok {
		return -1
	}
	return c - m.Allocated[r]
}

// roomCovers reports whether requests ask for nothing but CPU and
// Memory, which a Room answers for.
func roomCovers(requests map[string]int64) bool {
	for r := range requests {
		if r != CPU && r != Memory {
			return false
		}
	}
	return true
}

// plus returns r with o added.
func (r Room) plus(o Room) Room { return Room{CPU: r.CPU + o.CPU, Memory: r.Memory + o.Memory} }

// Fits reports whether a task asking for cpu and memory may fit a
// machine with room r: when it does not, the machine lacks room.
func (r Room) Fits(cpu, memory int64) bool {
	return (cpu <= 0 || cpu <= r.CPU) && (memory <= 0 || memory <= r.Memory)
}

// Snapshot is the cell as a decision reads it. Schedule does not change
// it: placements it decides are assumed in an overlay.
type Snapshot struct {
	Machines []*Machine
	// MaxFree, if set, bounds what any schedulable machine has free, by
	// resource: a task requesting more fits nowhere, found without
	// examining every machine of a full cell.
	MaxFree map[string]int64
	// Rooms, if set, is RoomOf(Machines[i]) at Rooms[i]: with a
	// FitFilter, a decision reads the machines' room from it, flat,
	// instead of from their maps (without it, Schedule builds it).
	Rooms []Room
	// Preemptible, if set, returns what the tasks bound to each machine
	// with a priority below below come to, at the machine's index:
	// preemption passes over the machines where it may evict nothing,
	// or (with a FitFilter) where evicting all it may would leave too
	// little room, without calling Running. Schedule reads what it
	// returns only until it returns.
	Preemptible func(below int32) []Evictable
	// Fixed, if not 0, numbers the machines and what of them Static
	// filters read (labels, taints, objects, schedulability): one
	// builder's snapshots with the same Fixed have the same machines
	// with the same such attributes, whatever their counters, so a
	// profile's Cache keeps what the static verdicts over every machine
	// come to from one decision to the next (MachineView numbers its
	// snapshots by the machine objects it has been given). A Cache must
	// then serve the snapshots of one builder only. 0: not known.
	Fixed uint64
	// Running returns the tasks bound to a machine. Preemption calls it,
	// only for tasks that fit nowhere, so a scheduler answers it from its
	// cache on demand; nil means no machine runs anything.
	Running func(machine string) []*Running
}

// Task is one pending task to place.
type Task struct {
	// Key is the task's store key; Job is "<namespace>/<job>".
	Key, Job string
	Task     *troupev1.Task
	Requests map[string]int64
	Priority int32
	// requests are Requests of CPU and Memory, flat, if requests.of is
	// this task and it requests nothing else (see CPUMemory).
	requests flatRequests
}

// flatRequests are a task's requests of CPU and Memory, recorded by
// NewTask on the task of when it requests nothing else.
type flatRequests struct {
	cpu, memory int64
	of          *Task
}

// NewTask describes a stored task for scheduling.
func NewTask(key string, t *troupev1.Task) *Task {
	ft := &Task{
		Key:      key,
		Job:      t.GetMetadata().GetNamespace() + "/" + t.GetSpec().GetJob(),
		Task:     t,
		Requests: t.GetSpec().GetTemplate().GetRequests(),
		Priority: t.GetSpec().GetPriority(),
	}
	if onlyCPUMemory(ft.Requests) {
		ft.requests = flatRequests{cpu: ft.Requests[CPU], memory: ft.Requests[Memory], of: ft}
	}
	return ft
}

// CPUMemory returns what t requests of CPU and Memory (0: nothing), and
// true if it requests nothing else (no other request above zero); false
// also when t was not made by NewTask, or is a copy of such a task (its
// Requests may have changed): then read Requests.
func (t *Task) CPUMemory() (cpu, memory int64, only bool) {
	if t.requests.of != t {
		return 0, 0, false
	}
	return t.requests.cpu, t.requests.memory, true
}

// resources returns the resources of amounts, sorted, in buf's array if
// it has room: a task asks for a few, and the callers, for every task
// of a decision, need not allocate.
func resources(amounts map[string]int64, buf []string) []string {
	buf = buf[:0]
	for r := range amounts {
		buf = append(buf, r)
	}
	slices.Sort(buf)
	return buf
}

// onlyCPUMemory reports whether requests ask for nothing above zero but
// CPU and Memory.
func onlyCPUMemory(requests map[string]int64) bool {
	for r, v := range requests {
		if v > 0 && r != CPU && r != Memory {
			return false
		}
	}
	return true
}

// FilterPlugin decides whether a task may run on a machine.
type FilterPlugin interface {
	Name() string
	Filter(t *Task, m *Machine) *Status
}

// Static marks a FilterPlugin whose verdict depends only on the task's
// equivalence class and the machine's fixed attributes (labels, taints,
// object, schedulability), never on allocations: it is evaluated once
// per class and machine (see Cache).
type Static interface {
	Static()
}

// FitFilter marks a FilterPlugin that refuses exactly the machines where
// one of the task's requests does not fit (Machine.Fits). When it is the
// first of a profile's filters that are not Static, Schedule passes over
// the machines without room for a task's CPU and Memory (by their Room)
// without running any filter on them, and works out what the filters
// would have said of them only for a task that fits nowhere; for a task
// that asks for nothing else, it does not run the FitFilter on the
// machines with room either. The plan is the same: those machines are
// refused, and these accepted, either way.
type FitFilter interface {
	FilterPlugin
	FitFilter()
}

// ScorePlugin ranks a feasible machine for a task, from 0 (worst) to 100.
type ScorePlugin interface {
	Name() string
	Score(t *Task, m *Machine) int64
}

// PreScorePlugin is a ScorePlugin that needs the whole cell to score one
// task (such as spreading over failure domains): Schedule calls PreScore
// once per task with every machine as the plan has left it, and scores
// with the plugin it returns.
type PreScorePlugin interface {
	ScorePlugin
	PreScore(t *Task, machines []*Machine) ScorePlugin
}

// AssumingScore is a ScorePlugin that a PreScorePlugin returns and that
// can follow the plan: Schedule keeps it for the job's following tasks
// of the same class and tells it of each machine it places one of the
// job's tasks on (Assume, with the machine as the placement leaves it),
// instead of calling PreScore again, which would have counted the same.
type AssumingScore interface {
	ScorePlugin
	Assume(m *Machine)
}

// WeightedScore is a score plugin and its weight in the total.
type WeightedScore struct {
	Plugin ScorePlugin
	Weight int64
}

// MaxScore is the best score a plugin gives.
const MaxScore = 100
