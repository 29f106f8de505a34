// Package sim is Troupe's discrete-event simulator: the production
// scheduler framework, plugins and commit code (schedulers/framework and
// schedulers/profiles) deciding and committing against the store's own
// transaction engine in memory (cellstore/memstore), under a virtual
// clock. As in the Omega paper's simulator, a scheduler takes a job from
// its queue, reads its snapshot of the cell when the decision starts,
// spends a modelled decision time (framework.DecisionTime), and commits
// when it ends, against the cell as it is then: parallel schedulers
// conflict exactly as they would in a cell, and the losers retry. What
// happens to a job after each decision is the production loop's
// scheduler.Policy; the simulator plugs in only virtual time and a view
// that the store updates as it commits, so a retry needs no refresh.
//
//	arrivals ──► queues ──► decide (snapshot at start) ──► commit (at start + t_decision)
//	                 ▲                                          │ conflicts, no fit
//	                 └──────────────────────────────────────────┘
//	task ends ──► release (counters given back) ──► waiting jobs wake
//
// The same seed gives the same run, bit for bit: one goroutine runs the
// events, ordered by (time, sequence), with a seeded random source per
// scheduler. A second, the encoder, does meanwhile work whose result
// depends only on what it is handed when the work is sent: the encoding
// of the writes of a decision's placements, as its plan is made, and of
// the next arrival's tasks. The events wait for that work only where
// they use it, and do what the encoder has not begun of it themselves.
package sim

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// SchedulerConfig is one simulated scheduler.
type SchedulerConfig struct {
	Name string
	// Kind is a built-in profile (batch, service, gang); it serves the
	// jobs whose Type is Kind's (gang serves batch jobs with a gang).
	Kind string
	// Serves is the job type the scheduler takes.
	Serves workload.Type
	// Partition and Partitions split the jobs it serves by hash among
	// the schedulers that serve them (Partitions <= 1: all).
	Partition, Partitions int
	// Modes override the profile's commit modes when set.
	Modes    *framework.Modes
	Decision framework.DecisionTime
}

// Config is a simulation.
type Config struct {
	Machines   []workload.Machine
	Schedulers []SchedulerConfig
	// Policy is what the schedulers do with a job after each decision,
	// as in the cell.
	Policy scheduler.Policy
	// Horizon ends the run (0: when the workload and the tasks are done).
	Horizon time.Duration
	Seed    uint64
	// Failures, if set, makes machines fail and return.
	Failures *Failures
	// Progress, if set, is called every progressEvery events with the
	// virtual time reached and the events run so far (a run's progress
	// for a person watching; it changes nothing in the run).
	Progress func(virtual time.Duration, events uint64)
	// Observe, if set, is called after each decision's commit with its
	// virtual time, the scheduler's name and the decision, as the cell's
	// instances report theirs (scheduler.Config.Observe). The machines of
	// the decision's plan are the scheduler's snapshot's, made again for
	// its next decision: read them before Observe returns.
	Observe func(at time.Duration, scheduler string, d scheduler.Decision)
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if len(c.Machines) == 0 {
		errs = append(errs, errors.New("sim: the cell has no machines"))
	}
	if len(c.Schedulers) == 0 {
		errs = append(errs, errors.New("sim: no schedulers"))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sim: %w", err))
	}
	if c.Failures != nil {
		errs = append(errs, c.Failures.validate())
	}
	names := map[string]bool{}
	for _, s := range c.Schedulers {
		if names[s.Name] {
			errs = append(errs, fmt.Errorf("sim: scheduler %q twice", s.Name))
		}
		names[s.Name] = true
	}
	return errors.Join(errs...)
}

// Simulator runs one simulation. It is not safe for concurrent use.
type Simulator struct {
	cfg    Config
	now    time.Duration
	seq    uint64
	events eventQueue
	// backgrounded counts the events in events that do not keep a run
	// going (machines failing and returning).
	backgrounded int
	store        *memstore.Store
	view         *scheduler.MachineView
	scheds       []*simScheduler
	// encoder does, in turn, work whose result depends only on what it
	// is given, while the simulation goes on: the encoding of the writes
	// of a decision's placements as its plan is made (see decide) and of
	// the next arrival's tasks (see ahead); nil outside Run.
	encoder chan *work
	jobs    map[string]*jobState // by "<ns>/<name>"
	// waiting are the waits of jobs whose tasks fit nowhere, in the
	// order they began (as the cell's instances wake them); a task's end
	// wakes those it makes room for. waits counts the waits begun.
	waiting []jobWait
	waits   uint64
	// machines are the cell's machines at their index in the view's
	// snapshots (machines are never deleted).
	machines []*simMachine
	byName   map[string]*simMachine
	// evictable is what the tasks bound to each machine below a
	// priority come to (framework.Snapshot.Preemptible), for each
	// priority asked about so far.
	evictable map[int32][]framework.Evictable
	// cpuUsed is the CPU allocated now; cpuTime integrates it.
	cpuUsed       int64
	cpuTime       float64 // millicore-seconds
	cpuTotal      int64
	lastIntegrate time.Duration
	// capacity of every machine counter: the run fails the moment one is
	// exceeded (conservation). leastCapacity is the least of them by
	// resource: a counter at most that is within its machine's, found
	// without looking the counter up among every machine's.
	capacity      map[string]int64
	leastCapacity [2]int64 // cpu, memory
	// ending are the task runs to end at each instant, by job
	// (endAt).
	ending map[endKey][]endRef
	// counters is observe's buffer of a change set's counters, pending
	// decide's of the job's tasks to place.
	counters []scheduler.CounterValue
	pending  []*framework.Task
	// bound and ended are what the tasks of the simulator's account
	// share (it changes a task by copying it, never a message in
	// place): the status of a bound task, and the task a run ended as
	// (end), of which the simulator reads only that it is neither
	// pending nor bound.
	bound *troupev1.TaskStatus
	ended *troupev1.Task
	stats *Stats
	err   error
}

// New returns a simulator of cfg.
func New(cfg Config) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Simulator{cfg: cfg, view: scheduler.NewMachineView(), jobs: map[string]*jobState{}, byName: map[string]*simMachine{},
		evictable: map[int32][]framework.Evictable{}, stats: newStats(cfg.Schedulers), capacity: map[string]int64{},
		ending: map[endKey][]endRef{}, bound: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_BOUND},
		ended: &troupev1.Task{Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_SUCCEEDED}}}
	for n, m := range cfg.Machines {
		s.cpuTotal += m.CPU
		s.capacity[clientlib.AllocKey(m.Name, "cpu")], s.capacity[clientlib.AllocKey(m.Name, "memory")] = m.CPU, m.Memory
		if n == 0 {
			s.leastCapacity = [2]int64{m.CPU, m.Memory}
		}
		s.leastCapacity = [2]int64{min(s.leastCapacity[0], m.CPU), min(s.leastCapacity[1], m.Memory)}
	}
	// No watch follows the store (the view is fed by Observe), so it
	// keeps one change set: memory goes with what runs, not what ran.
	// Nothing is lost between the simulator and its store, so no commit
	// is retried, and the store remembers no outcome (DedupeWindow 0).
	store, err := memstore.NewWithConfig(memstore.Config{Now: func() time.Time { return epoch.Add(s.now) }, Retention: 1})
	if err != nil {
		return nil, err
	}
	s.store = store
	s.store.Observe(s.observe)
	for i, sc := range cfg.Schedulers {
		prof, modes, err := profiles.New(sc.Kind, rand.New(rand.NewPCG(cfg.Seed, uint64(i))))
		if err != nil {
			return nil, fmt.Errorf("sim: scheduler %s: %w", sc.Name, err)
		}
		if sc.Modes != nil {
			modes = *sc.Modes
		}
		sched := &simScheduler{cfg: sc, profile: prof, modes: modes, index: i}
		sched.snap.Running, sched.snap.Preemptible = s.running, s.preemptible
		s.scheds = append(s.scheds, sched)
	}
	objs, err := s.register()
	if err != nil {
		return nil, err
	}
	s.machines = make([]*simMachine, len(cfg.Machines))
	for n, m := range cfg.Machines {
		i, ok := s.view.Index(m.Name)
		if !ok || s.machines[i] != nil {
			return nil, fmt.Errorf("sim: machine %s twice or not in the view", m.Name)
		}
		s.machines[i] = &simMachine{name: m.Name, index: i, obj: objs[n], binding: &troupev1.TaskBinding{Machine: m.Name}}
		s.byName[m.Name] = s.machines[i]
		if cfg.Failures != nil {
			s.machines[i].failures = newFailureStream(cfg.Seed, n)
			s.failLater(s.machines[i])
		}
	}
	return s, nil
}

// register creates the cell's machines in the store and returns them,
// in the Config's order.
func (s *Simulator) register() ([]*troupev1.Machine, error) {
	const per = 500
	var objs []*troupev1.Machine
	for i := 0; i < len(s.cfg.Machines); i += per {
		tx := clientlib.NewTxn(s.store)
		batch := s.cfg.Machines[i:min(i+per, len(s.cfg.Machines))]
		for _, m := range batch {
			objs = append(objs, MachineObject(m))
			clientlib.PutObject(tx.Group(), clientlib.Machines, objs[len(objs)-1])
		}
		out, err := tx.Commit(context.Background())
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("sim: register machines: %w", err)
		}
		for n, g := range out.Groups {
			objs[i+n].Metadata.Version = g.Revision
		}
	}
	return objs, nil
}

// observe keeps the machine view current from the store's change sets,
// as a scheduler's cache follows a watch.
func (s *Simulator) observe(cs *storev1.ChangeSet) {
	counters := s.counters[:0]
	flush := func() {
		s.view.SetCounters(counters)
		counters = counters[:0]
	}
	for _, ev := range cs.GetEvents() {
		kv := ev.GetKv()
		switch k := kv.GetKey(); {
		case len(k) > len(clientlib.AllocPrefix) && k[:len(clientlib.AllocPrefix)] == clientlib.AllocPrefix:
			if ev.GetType() == storev1.EventType_EVENT_TYPE_DELETE {
				flush()
				s.view.DeleteCounter(k)
				continue
			}
			value, err := clientlib.CounterValue(k, kv.GetValue())
			if err != nil {
				s.fail(err)
				continue
			}
			if s.aboveLeastCapacity(k, value) {
				if limit, ok := s.capacity[k]; ok && value > limit {
					s.fail(fmt.Errorf("sim: at %v %s is %d, over the machine's capacity %d", s.now, k, value, limit))
				}
			}
			counters = append(counters, scheduler.CounterValue{Key: k, Value: value, Version: kv.GetVersion()})
		case len(k) > len(clientlib.Machines.Prefix) && k[:len(clientlib.Machines.Prefix)] == clientlib.Machines.Prefix:
			m, err := clientlib.Decode(clientlib.Machines, kv.GetValue(), kv.GetVersion())
			if err != nil {
				s.fail(err)
				continue
			}
			flush()
			s.view.SetMachine(m)
		}
	}
	flush()
	s.counters = counters
}

// aboveLeastCapacity reports whether value, of the counter at key, may
// exceed its machine's capacity: it is above the least capacity of its
// resource, or its resource is neither cpu nor memory.
func (s *Simulator) aboveLeastCapacity(key string, value int64) bool {
	switch key[strings.LastIndexByte(key, '/')+1:] {
	case "cpu":
		return value > s.leastCapacity[0]
	case "memory":
		return value > s.leastCapacity[1]
	}
	return true
}

func (s *Simulator) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// Run simulates until the workload is exhausted and every task has ended
// (or Horizon, or ctx ends), and returns the measures.
func (s *Simulator) Run(ctx context.Context, jobs workload.Source) (*Stats, error) {
	if err := s.prefill(ctx, workload.PrefillOf(jobs)); err != nil {
		return nil, err
	}
	// A short queue: the events do the work themselves when the
	// encoder falls behind.
	s.encoder = make(chan *work, len(s.scheds)+1)
	defer close(s.encoder)
	go encode(s.encoder)
	next, err := jobs.Next()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err == nil {
		s.arriveAt(next, jobs)
	}
	for n := uint64(0); s.events.Len() > s.backgrounded && s.err == nil; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("sim: stopped at %v of virtual time: %w", s.now, ctx.Err())
		}
		if n%progressEvery == 0 && s.cfg.Progress != nil {
			s.cfg.Progress(s.now, n)
		}
		ev := heap.Pop(&s.events).(*event)
		if ev.background {
			s.backgrounded--
		}
		if s.cfg.Horizon > 0 && ev.at > s.cfg.Horizon {
			break
		}
		s.integrate(ev.at)
		s.now = ev.at
		ev.fn()
	}
	if s.err != nil {
		return nil, s.err
	}
	s.stats.finish(s.now, s.jobs)
	if s.now > 0 {
		s.stats.CPUUtilisation = s.cpuTime / (float64(s.cpuTotal) * s.now.Seconds())
	}
	return s.stats, nil
}

// progressEvery is how many events run between two calls of
// Config.Progress.
const progressEvery = 1 << 16

// integrate accounts the CPU allocated until t.
func (s *Simulator) integrate(t time.Duration) {
	s.cpuTime += float64(s.cpuUsed) * (t - s.lastIntegrate).Seconds()
	s.lastIntegrate = t
}

// at schedules fn at virtual time t.
func (s *Simulator) at(t time.Duration, fn func()) { s.push(t, fn, false) }

// background schedules fn at virtual time t, as an event that does not
// keep the run going: it ends when only such events are left.
func (s *Simulator) background(t time.Duration, fn func()) {
	s.push(t, fn, true)
	s.backgrounded++
}

func (s *Simulator) push(t time.Duration, fn func(), background bool) {
	s.seq++
	heap.Push(&s.events, &event{at: max(t, s.now), seq: s.seq, fn: fn, background: background})
}

// arriveAt schedules job's arrival, its tasks made ahead.
func (s *Simulator) arriveAt(job workload.Job, jobs workload.Source) {
	made := s.ahead(job)
	s.at(job.Submit, func() { s.arrive(job, made, jobs) })
}

// arrive submits job: its tasks are created pending, and its scheduler
// queues it. The next arrival is read and scheduled.
func (s *Simulator) arrive(job workload.Job, made *newTasks, jobs workload.Source) {
	if err := s.submit(job, made); err != nil {
		s.fail(err)
		return
	}
	next, err := jobs.Next()
	switch {
	case errors.Is(err, io.EOF):
	case err != nil:
		s.fail(err)
	default:
		s.arriveAt(next, jobs)
	}
}

// createTasks creates js's tasks, pending, in the store, and follows
// them: those made ahead if they are for now, else made at once.
func (s *Simulator) createTasks(js *jobState, made *newTasks) error {
	if made == nil || made.at != s.now { // none, or made ahead for another time (an arrival scheduled late)
		made = &newTasks{at: s.now, kind: js.sched.cfg.Kind}
		made.make(s.store, js.job)
	} else {
		made.made.wait()
	}
	tx := clientlib.NewTxn(s.store)
	tasks := made.tasks
	for _, e := range made.encoded {
		clientlib.PutEncoded(tx.Group(), clientlib.Tasks, e)
	}
	out, err := tx.Commit(context.Background())
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		return err
	}
	js.tasks, js.ftasks, js.keys = make([]*troupev1.Task, len(tasks)), make([]*framework.Task, len(tasks)), make([]string, len(tasks))
	js.runs, js.slots = make([]int, len(tasks)), make([]int32, len(tasks))
	for i, g := range out.Groups {
		tasks[i].Metadata.Version = g.Revision
		js.set(int32(i), tasks[i])
	}
	return nil
}

// submit creates job's tasks (made may hold them, see ahead) and queues
// the job for its scheduler.
func (s *Simulator) submit(job workload.Job, made *newTasks) error {
	js := &jobState{job: job, key: "sim/" + job.ID, first: -1, on: map[string]int{}}
	sched := s.schedulerFor(job)
	if sched == nil {
		return fmt.Errorf("sim: no scheduler serves %s job %s", job.Type, job.ID)
	}
	js.sched = sched
	if err := s.createTasks(js, made); err != nil {
		return fmt.Errorf("sim: submit job %s: %w", job.ID, err)
	}
	js.measured = true
	s.jobs[js.key] = js
	s.stats.submitted(sched.index, len(job.Tasks))
	s.enqueue(js)
	return nil
}

// schedulerFor returns the scheduler that takes job: among those serving
// its type, the one whose partition its hash falls in.
func (s *Simulator) schedulerFor(job workload.Job) *simScheduler {
	var serving []*simScheduler
	for _, sc := range s.scheds {
		if sc.cfg.Serves == job.Type {
			serving = append(serving, sc)
		}
	}
	if len(serving) == 0 {
		return nil
	}
	h := fnv.New32a()
	h.Write([]byte(job.ID))
	return serving[int(h.Sum32()%uint32(len(serving)))]
}

// enqueue puts js in its scheduler's queue and starts a decision if the
// scheduler is idle.
func (s *Simulator) enqueue(js *jobState) {
	if js.queued || js.done {
		return
	}
	js.queued, js.waiting = true, false
	sc := js.sched
	sc.queue = append(sc.queue, js)
	if !sc.busy {
		s.decide(sc)
	}
}

// decide starts sc's next decision: the job at the head of its queue is
// decided on the cell as it is now, and committed after the decision
// time.
func (s *Simulator) decide(sc *simScheduler) {
	if len(sc.queue) == 0 {
		sc.busy = false
		return
	}
	js := sc.queue[0]
	sc.queue = sc.queue[1:]
	js.queued = false
	// A buffer of the simulator's: the decision is made, and done
	// with the slice, before the next begins.
	s.pending = js.appendPending(s.pending[:0])
	pending := s.pending
	if s.cfg.Policy.Begin(&js.policy, len(pending), true) != scheduler.Decide {
		s.decide(sc)
		return
	}
	if js.first < 0 {
		js.first = s.now
		s.stats.waited(sc.index, s.now-js.job.Submit)
	}
	sc.busy = true
	if js.onAt == nil {
		js.onAt = make([]scheduler.MachineTasks, 0, len(js.on))
		for name, n := range js.on {
			js.onAt = append(js.onAt, scheduler.MachineTasks{At: s.byName[name].index, Tasks: n})
		}
	}
	s.view.RefillAt(&sc.snap, js.onAt, js.key)
	took := sc.cfg.Decision.For(len(pending))
	start := s.now
	enc := s.encodeBindings(sc.cfg.Name, epoch.Add(start+took))
	p := sc.profile
	if enc != nil {
		p.Placed = enc.add
	}
	plan := framework.Schedule(p, &sc.snap.Snapshot, pending)
	enc.flush()
	s.at(s.now+took, func() { s.finishDecision(sc, js, enc.wait(plan), start) })
}

// finishDecision commits plan, at the end of its decision time.
func (s *Simulator) finishDecision(sc *simScheduler, js *jobState, plan *framework.Plan, start time.Duration) {
	if sc.modes.Txn.GangRule() && len(plan.Failures) > 0 {
		plan = &framework.Plan{Failures: plan.Failures} // a gang is placed whole or not at all
	}
	res, err := framework.CommitPlan(context.Background(), s.store, plan, sc.modes, sc.cfg.Name, epoch.Add(s.now))
	if err != nil {
		s.fail(fmt.Errorf("sim: commit of job %s: %w", js.job.ID, err))
		return
	}
	out := scheduler.Outcome{Placed: len(res.Committed), Conflicted: len(res.Conflicted), Stopped: len(res.Stopped), Unfit: len(plan.Failures)}
	s.stats.decided(sc.index, start, s.now, out)
	for _, p := range res.Committed {
		s.placed(js, p, res)
	}
	if !js.placed && len(js.unbound) == 0 {
		js.placed = true
		s.stats.placedAll(sc.index, s.now-js.job.Submit)
	}
	attempt := js.policy.Attempt()
	a := s.cfg.Policy.After(&js.policy, out)
	if s.cfg.Observe != nil {
		s.cfg.Observe(s.now, sc.cfg.Name, scheduler.Decision{Job: js.key, Attempt: attempt, Plan: plan, Result: res, Action: a})
	}
	switch a.Step {
	case scheduler.Done:
		js.done = len(js.unbound) == 0 // unless it preempted tasks of its own
		js.onAt = nil
	case scheduler.Abandon:
		js.done, js.onAt = true, nil
		s.stats.abandoned(sc.index)
	case scheduler.Retry:
		// Decided again at once, ahead of the queue, on the view the
		// commit has already updated.
		sc.queue = append([]*jobState{js}, sc.queue...)
		js.queued = true
	case scheduler.BackOff:
		s.at(s.now+a.Delay, func() { s.enqueue(js) })
	case scheduler.Wait:
		s.waits++
		n := s.waits
		js.waiting, js.wait = true, n
		s.waiting = append(s.waiting, jobWait{js, n})
		s.at(s.now+a.Delay, func() {
			if js.waiting && js.wait == n { // not woken (and waiting again) since
				s.enqueue(js)
			}
		})
	}
	s.decide(sc)
}

// placed records a committed placement: its victims go back to pending
// (their jobs queued again), the task is bound, and it ends after its
// duration.
func (s *Simulator) placed(js *jobState, p framework.Placement, res *framework.Result) {
	version := res.TaskVersions[p.Task.Key] // one shard: the whole commit's revision
	for _, v := range p.Victims {
		victim, i := s.jobs[v.Job], v.Task.GetSpec().GetIndex()
		t := victim.clone(i, version)
		s.bind(s.byName[t.GetBinding().GetMachine()], victim, i, -1)
		t.Binding = nil
		t.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: "preempted by " + p.Task.Key}
		victim.set(i, t)
		victim.runs[i]++ // its end event is void now
		victim.done = false
		s.stats.preempted(victim.sched.index)
		s.enqueue(victim)
	}
	i := p.Task.Task.GetSpec().GetIndex()
	m := s.byName[p.Machine.Name]
	t := js.clone(i, version)
	t.Binding, t.Status = m.binding, s.bound
	js.set(i, t)
	s.bind(m, js, i, 1)
	js.runs[i]++
	if m.down {
		s.release(m) // decided before the machine failed: lost at once
		return
	}
	if d := js.job.Tasks[i].Duration; d > 0 {
		s.endAt(js, i, s.now+d)
	}
}

// bind records that task i of js runs on machine m (delta 1), or no
// longer (-1).
func (s *Simulator) bind(m *simMachine, js *jobState, i int32, delta int) {
	if delta > 0 {
		js.slots[i] = int32(len(m.tasks))
		m.tasks = append(m.tasks, taskRef{js, i})
	} else { // swap-remove, the last slot cleared: an ended job is not kept
		n := len(m.tasks) - 1
		at, last := js.slots[i], m.tasks[n]
		m.tasks[at], last.js.slots[last.i] = last, at
		m.tasks[n], m.tasks = taskRef{}, m.tasks[:n]
	}
	m.running = nil
	t := js.job.Tasks[i]
	for below, ev := range s.evictable {
		if js.job.Priority < below {
			count(&ev[m.index], t, delta)
		}
	}
	s.cpuUsed += int64(delta) * t.CPU
}

// count adds delta tasks like t to e.
func count(e *framework.Evictable, t workload.Task, delta int) {
	e.Tasks += delta
	e.Requests.CPU += int64(delta) * t.CPU
	e.Requests.Memory += int64(delta) * t.Memory
}

// preemptible answers preemption's question: what the tasks below a
// priority come to on each machine (framework.Snapshot.Preemptible),
// kept up to date from the first time it is asked.
func (s *Simulator) preemptible(below int32) []framework.Evictable {
	if ev, ok := s.evictable[below]; ok {
		return ev
	}
	ev := make([]framework.Evictable, len(s.machines))
	for i, m := range s.machines {
		for _, r := range m.tasks {
			if r.js.job.Priority < below {
				count(&ev[i], r.js.job.Tasks[r.i], 1)
			}
		}
	}
	s.evictable[below] = ev
	return ev
}

// running answers preemption's question: the tasks bound to machine,
// by job key and index.
func (s *Simulator) running(machine string) []*framework.Running {
	m := s.byName[machine]
	if m.running != nil {
		return m.running
	}
	refs := m.sortedTasks()
	m.running = make([]*framework.Running, 0, len(refs))
	for _, r := range refs {
		// As framework.NewTask describes the task, without making the
		// description, which a bound task has no use for.
		t := r.js.tasks[r.i]
		m.running = append(m.running, &framework.Running{Key: r.js.taskKey(r.i), Task: t, Job: r.js.key,
			Priority: t.GetSpec().GetPriority(), Requests: t.GetSpec().GetTemplate().GetRequests()})
	}
	return m.running
}

// simMachine is what the simulator knows of one machine: its object as
// stored, the tasks bound to it, preemption's view of them until they
// change, and whether it has failed (with Config.Failures, the random
// stream of its failures).
type simMachine struct {
	name  string
	index int // in the view's snapshots
	obj   *troupev1.Machine
	// binding is the binding of the tasks bound to it, which they share.
	binding *troupev1.TaskBinding
	// tasks are the tasks bound to it, in no order (see bind).
	tasks    []taskRef
	running  []*framework.Running // nil: to be worked out
	down     bool
	failures *rand.Rand
}

// sortedTasks returns the tasks bound to m by job key and index.
func (m *simMachine) sortedTasks() []taskRef {
	return slices.SortedFunc(slices.Values(m.tasks), func(a, b taskRef) int {
		return cmp.Or(strings.Compare(a.js.key, b.js.key), cmp.Compare(a.i, b.i))
	})
}

// jobWait is wait number n of a job.
type jobWait struct {
	js *jobState
	n  uint64
}

// taskRef is task i of a job.
type taskRef struct {
	js *jobState
	i  int32
}

// simScheduler is one simulated scheduler. snap is the snapshot of its
// decisions, refilled for each (scheduler.Refilled): a scheduler's
// decision is over, its plan committed, when it starts the next.
type simScheduler struct {
	cfg     SchedulerConfig
	profile framework.Profile
	modes   framework.Modes
	index   int
	queue   []*jobState
	busy    bool
	snap    scheduler.Refilled
}

// event is something that happens at a virtual time; ties keep their
// order of scheduling.
type event struct {
	at         time.Duration
	seq        uint64
	fn         func()
	background bool // see Simulator.background
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
