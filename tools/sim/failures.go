package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// Failures is how machines fail and return (Config.Failures). A machine
// that is up fails after a time drawn from an exponential distribution of
// mean MTBF, and returns after a repair time drawn from Repair (in
// seconds). A failed machine is LOST, as the node controller marks a
// machine whose lease expired, and every task bound to it is unbound and
// replaced by its next attempt, pending, as the job controller replaces
// a lost task; its jobs are queued again. It takes no task until it
// returns READY (a placement committed on it meanwhile, decided before
// it failed, is lost at once, as the node controller's next check would
// release it). Each machine draws from a random stream of its own,
// seeded by the Config's Seed: a seed gives the same failures, whatever
// the schedulers do.
type Failures struct {
	MTBF   time.Duration
	Repair workload.Dist
}

// failureStreams is the first random stream of the machines' failures
// (stream failureStreams+i for machine i of Config.Machines); the
// schedulers' are 0, 1, ...
const failureStreams = 1 << 32

func (f *Failures) validate() error {
	if f.MTBF <= 0 {
		return fmt.Errorf("sim: failures: MTBF %v must be positive", f.MTBF)
	}
	if err := f.Repair.Check(float64(math.MaxInt64 / time.Second)); err != nil {
		return fmt.Errorf("sim: failures: repair: %w", err)
	}
	return nil
}

// failLater schedules machine m's next failure.
func (s *Simulator) failLater(m *simMachine) {
	up := time.Duration(m.failures.ExpFloat64() * float64(s.cfg.Failures.MTBF))
	s.background(s.now+up, func() { s.breakDown(m) })
}

// breakDown makes machine m fail: it is LOST, its tasks are lost, and it
// returns after its repair.
func (s *Simulator) breakDown(m *simMachine) {
	m.down = true
	s.stats.Failures++
	s.setPhase(m, troupev1.MachinePhase_MACHINE_PHASE_LOST, "failed")
	s.release(m)
	repair := time.Duration(s.cfg.Failures.Repair.Draw(m.failures) * float64(time.Second))
	s.background(s.now+repair, func() { s.repair(m) })
}

// repair brings machine m back READY, wakes the jobs its room could
// help, and schedules its next failure.
func (s *Simulator) repair(m *simMachine) {
	m.down = false
	s.setPhase(m, troupev1.MachinePhase_MACHINE_PHASE_READY, "")
	s.wake(s.view.Machine(m.name))
	s.failLater(m)
}

// setPhase writes machine m's phase.
func (s *Simulator) setPhase(m *simMachine, phase troupev1.MachinePhase, msg string) {
	u := proto.Clone(m.obj).(*troupev1.Machine)
	u.Status = &troupev1.MachineStatus{Phase: phase, Message: msg}
	tx := clientlib.NewTxn(s.store)
	clientlib.PutObject(tx.Group(), clientlib.Machines, u)
	out, err := tx.Commit(context.Background())
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		s.fail(fmt.Errorf("sim: machine %s to %v: %w", m.name, phase, err))
		return
	}
	u.Metadata.Version = out.Groups[0].Revision
	m.obj = u
}

// release takes every task bound to the failed machine m off it, in one
// request: each is unbound and becomes its next attempt, pending, and
// its job is queued again.
func (s *Simulator) release(m *simMachine) {
	if len(m.tasks) == 0 {
		return
	}
	refs := m.sortedTasks()
	tx := clientlib.NewTxn(s.store)
	lost := make([]*troupev1.Task, len(refs))
	for n, r := range refs {
		g := tx.Group()
		t := clientlib.Unbind(g, r.js.tasks[r.i])
		t.Spec.Attempt++
		t.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: "machine " + m.name + " lost"}
		clientlib.PutObject(g, clientlib.Tasks, t)
		lost[n] = t
	}
	out, err := tx.Commit(context.Background())
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		s.fail(fmt.Errorf("sim: release the tasks of machine %s: %w", m.name, err))
		return
	}
	for n, r := range refs {
		lost[n].Metadata.Version = out.Groups[n].Revision
		r.js.set(r.i, lost[n])
		s.bind(m, r.js, r.i, -1)
		r.js.runs[r.i]++ // its end event is void now
		r.js.done = false
		s.stats.lost(r.js.sched.index)
		s.enqueue(r.js)
	}
}

// newFailureStream returns the random stream of machine i's failures.
func newFailureStream(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, failureStreams+uint64(i)))
}
