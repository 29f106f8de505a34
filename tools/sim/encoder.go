package sim

import (
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// The encoder (Simulator.encoder) is the simulator's second goroutine:
// it validates and encodes writes whose values depend only on what it is
// handed, while the events go on: a decision's placements as its plan
// makes them, and the next arrival's tasks.

// newTasks are a job's tasks, made and encoded for their creation by
// kind at time at (on the encoder when done is set).
type newTasks struct {
	at      time.Duration
	kind    string
	tasks   []*troupev1.Task
	encoded []clientlib.Encoded[*troupev1.Task]
	done    chan struct{} // closed when made
}

// ahead has job's tasks made on the encoder, for its arrival (nil: no
// scheduler serves it, which its arrival reports).
func (s *Simulator) ahead(job workload.Job) *newTasks {
	sc := s.schedulerFor(job)
	if sc == nil || s.encoder == nil {
		return nil
	}
	nt := &newTasks{at: job.Submit, kind: sc.cfg.Kind, done: make(chan struct{})}
	s.encoder <- func() {
		nt.make(s.store, job)
		close(nt.done)
	}
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
	// encoded are the batches' writes, each batch's filled in by the
	// encoder; done is closed once every batch sent is.
	encoded []*[]*framework.EncodedBinding
	done    chan struct{}
}

// encodeBatch is how many placements are sent to the encoder at once.
const encodeBatch = 32

// encodeBindings returns an encoder of placements committed by scheduler
// at commitAt (nil outside Run: they are encoded by the commit).
func (s *Simulator) encodeBindings(scheduler string, commitAt time.Time) *bindingEncoder {
	if s.encoder == nil {
		return nil
	}
	return &bindingEncoder{s: s, scheduler: scheduler, commitAt: commitAt, done: make(chan struct{})}
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
	e.s.encoder <- func() {
		encoded := make([]*framework.EncodedBinding, len(ps))
		for i, p := range ps {
			encoded[i] = framework.EncodeBinding(st, p, scheduler, at)
		}
		*out = encoded
	}
}

// flush sends what is left once the plan is made.
func (e *bindingEncoder) flush() {
	if e == nil {
		return
	}
	if len(e.batch) > 0 {
		e.send()
	}
	e.s.encoder <- func() { close(e.done) }
}

// wait sets the encoded writes of plan's placements once they are made.
func (e *bindingEncoder) wait(plan *framework.Plan) *framework.Plan {
	if e == nil {
		return plan
	}
	<-e.done
	i := 0
	for _, out := range e.encoded {
		for _, enc := range *out {
			plan.Placements[i].Encoded = enc
			i++
		}
	}
	return plan
}

// work runs the functions sent on ch, in turn.
func work(ch <-chan func()) {
	for fn := range ch {
		fn()
	}
}
