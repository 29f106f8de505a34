package sim

import (
	"sync/atomic"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// The encoder (Simulator.encoder) is the simulator's second goroutine:
// it validates and encodes writes whose values depend only on what it is
// handed, while the events go on: a decision's placements as its plan
// makes them, and the next arrival's tasks. Each piece of work is done by
// whichever comes to it first: the encoder, or the events once they need
// its result (or find the encoder's queue full), so that they wait at
// most for the piece the encoder is doing.

// work is one piece of the encoder's work.
type work struct {
	fn    func()
	taken atomic.Bool
	done  chan struct{} // closed when fn has run
}

func newWork(fn func()) *work { return &work{fn: fn, done: make(chan struct{})} }

// run does w unless it is taken already.
func (w *work) run() {
	if w.taken.CompareAndSwap(false, true) {
		w.fn()
		close(w.done)
	}
}

// wait returns once w is done, doing it if it is not taken yet.
func (w *work) wait() {
	w.run()
	<-w.done
}

// send hands w to the encoder, or does it now if the encoder's queue is
// full.
func (s *Simulator) send(w *work) {
	select {
	case s.encoder <- w:
	default:
		w.run()
	}
}

// encode runs the work sent on ch, in turn (what is taken already is
// passed over).
func encode(ch <-chan *work) {
	for w := range ch {
		w.run()
	}
}

// newTasks are a job's tasks, made and encoded for their creation by
// kind at time at (by made, when set: see work).
type newTasks struct {
	at      time.Duration
	kind    string
	tasks   []*troupev1.Task
	encoded []clientlib.Encoded[*troupev1.Task]
	made    *work
}

// ahead has job's tasks made on the encoder, for its arrival (nil: no
// scheduler serves it, which its arrival reports).
func (s *Simulator) ahead(job workload.Job) *newTasks {
	sc := s.schedulerFor(job)
	if sc == nil || s.encoder == nil {
		return nil
	}
	nt := &newTasks{at: job.Submit, kind: sc.cfg.Kind}
	nt.made = newWork(func() { nt.make(s.store, job) })
	s.send(nt.made)
	return nt
}

// make makes and encodes job's tasks.
func (nt *newTasks) make(st clientlib.Store, job workload.Job) {
	nt.tasks = Tasks(job, nt.kind, nt.at)
	nt.encoded = make([]clientlib.Encoded[*troupev1.Task], len(nt.tasks))
	for i, t := range nt.tasks {
		nt.encoded[i] = clientlib.EncodeObject(st, clientlib.Tasks, t)
	}
}

// bindingEncoder has the writes of a plan's placements encoded on the
// encoder as the plan is made (framework.Profile.Placed), in batches.
type bindingEncoder struct {
	s         *Simulator
	scheduler string
	commitAt  time.Time
	batch     []framework.Placement
	// encoded are the batches' writes, each batch's filled in by its
	// work in sent.
	encoded []*[]*framework.EncodedBinding
	sent    []*work
}

// encodeBatch is how many placements are sent to the encoder at once.
const encodeBatch = 32

// encodeBindings returns an encoder of placements committed by scheduler
// at commitAt (nil outside Run: they are encoded by the commit).
func (s *Simulator) encodeBindings(scheduler string, commitAt time.Time) *bindingEncoder {
	if s.encoder == nil {
		return nil
	}
	return &bindingEncoder{s: s, scheduler: scheduler, commitAt: commitAt}
}

func (e *bindingEncoder) add(p framework.Placement) {
	if e.batch = append(e.batch, p); len(e.batch) == encodeBatch {
		e.send()
	}
}

func (e *bindingEncoder) send() {
	ps, out := e.batch, new([]*framework.EncodedBinding)
	e.batch, e.encoded = nil, append(e.encoded, out)
	st, scheduler, at := e.s.store, e.scheduler, e.commitAt
	w := newWork(func() {
		encoded := make([]*framework.EncodedBinding, len(ps))
		for i, p := range ps {
			encoded[i] = framework.EncodeBinding(st, p, scheduler, at)
		}
		*out = encoded
	})
	e.sent = append(e.sent, w)
	e.s.send(w)
}

// flush sends what is left once the plan is made.
func (e *bindingEncoder) flush() {
	if e == nil {
		return
	}
	if len(e.batch) > 0 {
		e.send()
	}
}

// wait sets the encoded writes of plan's placements once they are made.
func (e *bindingEncoder) wait(plan *framework.Plan) *framework.Plan {
	if e == nil {
		return plan
	}
	for _, w := range e.sent {
		w.wait()
	}
	i := 0
	for _, out := range e.encoded {
		for _, enc := range *out {
			plan.Placements[i].Encoded = enc
			i++
		}
	}
	return plan
}
