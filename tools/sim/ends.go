package sim

// Task ends: a run's end is scheduled when the task is placed; the ends
// of one job at one instant are one event and one commit, after which the
// waiting jobs the freed room helps are queued again.

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// endKey names the tasks of one job whose runs end at one instant.
type endKey struct {
	js *jobState
	at time.Duration
}

// endRef is the run of a task that is to end: its index and which of its
// runs (jobState.runs) it is.
type endRef struct {
	i   int32
	run int
}

// endAt schedules the end of the current run of task i of js at virtual
// time t. The ends of one job at one instant (its tasks placed by one
// decision, whose runs last the job's duration) are one event and one
// commit, as a node agent reports its tasks' ends together: the store,
// the schedulers' view and the waiting jobs see what they would see
// after the same ends one by one at that instant.
func (s *Simulator) endAt(js *jobState, i int32, t time.Duration) {
	k := endKey{js, t}
	refs, ok := s.ending[k]
	if !ok {
		s.at(t, func() {
			refs := s.ending[k]
			delete(s.ending, k)
			s.end(js, refs)
		})
	}
	s.ending[k] = append(refs, endRef{i, js.runs[i]})
}

// end finishes the runs refs of js's tasks that are still current (not
// preempted or lost since): their bindings go and they leave the store
// in one commit, their requests are given back, they become the
// simulator's ended task, and the schedulers' waiting jobs that their
// machines' room helps wake.
func (s *Simulator) end(js *jobState, refs []endRef) {
	tx := clientlib.NewTxn(s.store)
	ending := refs[:0]
	for _, r := range refs {
		if js.runs[r.i] != r.run {
			continue
		}
		if err := End(tx.Group(), js.tasks[r.i]); err != nil {
			s.fail(err)
			return
		}
		ending = append(ending, r)
	}
	if len(ending) == 0 {
		return
	}
	out, err := tx.Commit(context.Background())
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		s.fail(fmt.Errorf("sim: end %d tasks of %s: %w", len(ending), js.job.ID, err))
		return
	}
	// The machines whose room may wake jobs, if any job waits.
	var (
		machines []*simMachine
		seen     map[*simMachine]bool
	)
	if len(s.waiting) > 0 {
		machines, seen = make([]*simMachine, 0, len(ending)), make(map[*simMachine]bool, len(ending))
	}
	for _, r := range ending {
		m := s.byName[js.tasks[r.i].GetBinding().GetMachine()]
		js.set(r.i, s.ended)
		s.bind(m, js, r.i, -1)
		if seen != nil && !seen[m] {
			machines, seen[m] = append(machines, m), true
		}
	}
	if js.ended += len(ending); js.done && js.ended == len(js.tasks) {
		s.retire(js)
	}
	for _, m := range machines {
		s.wake(s.view.Machine(m.name))
	}
}

// retire forgets job js, all of whose tasks ran to their end (and left
// the store, End): the simulator keeps no state of it, so that a run's
// memory follows what runs, not what has run.
func (s *Simulator) retire(js *jobState) { delete(s.jobs, js.key) }

// wake queues again the waiting jobs that the free room of machine m
// could help: one of their pending tasks fits it now. The others keep
// waiting for their backoff (or another release).
func (s *Simulator) wake(m *framework.Machine) {
	kept := s.waiting[:0]
	for _, w := range s.waiting {
		if !w.js.waiting || w.js.wait != w.n {
			continue // queued since (and maybe waiting again, from a later place)
		}
		if scheduler.Wakes(w.js.sched.profile, w.js.waitingFor(), m) {
			s.enqueue(w.js)
			continue
		}
		kept = append(kept, w)
	}
	s.waiting = kept
}
