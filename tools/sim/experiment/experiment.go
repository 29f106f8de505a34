// Package experiment runs the simulator's experiments, after the Omega
// paper's evaluation (Schwarzkopf et al., EuroSys 2013, section 5):
// sweeps of one parameter (service decision time, batch schedulers,
// conflict modes, batch arrival rate), every point run over several
// seeds, runs in parallel, and the results written as CSV, JSON, plots
// (PNG and SVG, with error bars) and a Markdown report that says how to
// rerun it.
//
//	Sweep ──► points (series × x) ──► runs (runner × point × seed) ──► Runner ──► sim.Stats
//	                                                                      │
//	Results: per run and role (batch, service) ◄──────────────────────────┘
//	         mean and stddev over seeds ──► CSV, JSON, plots, report.md
//
// A run goes through a Runner: InMemory (sim.New and Run) by default; a
// runner against a real store has the same signature, and a second
// runner's results are reported beside the first's (Compare). The
// output does not depend on how many runs go at once: each run is
// deterministic and results are kept in order.
package experiment

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// Runner runs one simulation of cfg over src.
type Runner func(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error)

// InMemory is the default Runner: the simulator over the store's engine
// in memory.
func InMemory(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error) {
	s, err := sim.New(cfg)
	if err != nil {
		return nil, err
	}
	return s.Run(ctx, src)
}

// NamedRunner is a Runner and the name results carry.
type NamedRunner struct {
	Name string
	Run  Runner
	// Exclusive runners play in wall time (against a real store): each
	// of their runs goes alone, with no other run beside it.
	Exclusive bool
}

// Params are the settings of one point: the schedulers, and how the
// workload is played to them.
type Params struct {
	// Batch and Service schedulers (the batch ones split the batch jobs
	// by hash), of profile kinds BatchProfile and ServiceProfile (built
	// in or profiles.Register'ed).
	Batch, Service                 int
	BatchProfile, ServiceProfile   string
	BatchDecision, ServiceDecision framework.DecisionTime
	// Conflict and Txn, when set, override every scheduler's profile's
	// commit modes.
	Conflict *framework.ConflictMode
	Txn      *framework.TxnMode
	// BatchRate multiplies the batch jobs' arrival rate
	// (workload.ScaleArrivals); the horizon is divided by it, so the
	// batch jobs span the whole run.
	BatchRate float64
	// MaxAttempts, Backoff, MaxBackoff and AbandonAfter are the
	// schedulers' policy (scheduler.Policy): decisions retried at once
	// after conflicts before a job backs off, the first wait of a job
	// that fits nowhere and the longest (0: the cell's default), and
	// decisions before a job is abandoned.
	MaxAttempts, AbandonAfter int
	Backoff, MaxBackoff       time.Duration
	// Policy names a preset (scheduler.PolicyPreset) that replaces the
	// four knobs above: "" or "default" keeps them, "google" is Google's
	// lightweight simulator's retry policy (scheduler.GooglePolicy).
	Policy string
	// Horizon ends each run, in the workload's time (0: when every task
	// has ended).
	Horizon time.Duration
	// MTBF, if positive, makes machines fail after a mean MTBF up and
	// return after a mean Repair (both exponential; sim.Failures).
	MTBF, Repair time.Duration
}

// DefaultParams are one batch and one service scheduler with the Omega
// paper's decision times, the profiles' own commit modes, the workload's
// own rates, and the cell's policy (scheduler.DefaultPolicy) with a
// 10 s back-off, except that a job is abandoned after 1,000 decisions
// (Omega).
func DefaultParams() Params {
	return Params{Batch: 1, Service: 1, BatchProfile: profiles.Batch, ServiceProfile: profiles.Service,
		BatchDecision: framework.DefaultDecisionTime, ServiceDecision: framework.DefaultDecisionTime,
		BatchRate: 1, MaxAttempts: scheduler.DefaultPolicy(0).MaxAttempts, AbandonAfter: 1000, Backoff: 10 * time.Second}
}

// Validate says what is wrong with p.
func (p Params) Validate() error {
	switch {
	case p.Batch < 0 || p.Service < 0 || p.Batch+p.Service == 0:
		return fmt.Errorf("%d batch and %d service schedulers: need at least one, none negative", p.Batch, p.Service)
	case !(p.BatchRate > 0):
		return fmt.Errorf("batch arrival rate factor %v: must be positive", p.BatchRate)
	case p.MaxAttempts <= 0 || p.Backoff <= 0 || p.AbandonAfter < 0:
		return fmt.Errorf("max attempts %d and back-off %v must be positive, abandon-after %d not negative", p.MaxAttempts, p.Backoff, p.AbandonAfter)
	case p.MaxBackoff != 0 && p.MaxBackoff < p.Backoff:
		return fmt.Errorf("max back-off %v is below the back-off %v", p.MaxBackoff, p.Backoff)
	case p.Horizon < 0:
		return fmt.Errorf("horizon %v is negative", p.Horizon)
	}
	if p.Policy != "" {
		if _, err := scheduler.PolicyPreset(p.Policy, p.Backoff); err != nil {
			return err
		}
	}
	for _, d := range []framework.DecisionTime{p.BatchDecision, p.ServiceDecision} {
		if d.Job < 0 || d.Task < 0 {
			return fmt.Errorf("decision time %+v is negative", d)
		}
	}
	for _, kind := range []string{p.BatchProfile, p.ServiceProfile} {
		if _, err := p.modes(kind); err != nil {
			return err
		}
	}
	return nil
}

// modes returns the commit modes of a scheduler of kind: nil (the
// profile's own) unless Conflict or Txn override them. It builds the
// profile, so an unknown kind is an error.
func (p Params) modes(kind string) (*framework.Modes, error) {
	_, modes, err := profiles.New(kind, rand.New(rand.NewPCG(0, 0)))
	if err != nil || (p.Conflict == nil && p.Txn == nil) {
		return nil, err
	}
	if p.Conflict != nil {
		modes.Conflict = *p.Conflict
	}
	if p.Txn != nil {
		modes.Txn = *p.Txn
	}
	return &modes, nil
}

// policy is the schedulers' policy.
func (p Params) policy() scheduler.Policy {
	if p.Policy == scheduler.GooglePolicyName {
		return scheduler.GooglePolicy()
	}
	pol := scheduler.DefaultPolicy(p.Backoff)
	pol.MaxAttempts, pol.AbandonAfter = p.MaxAttempts, p.AbandonAfter
	if p.MaxBackoff > 0 {
		pol.MaxBackoff = p.MaxBackoff
	}
	return pol
}

// Config is the simulation of p on cell with seed. The schedulers are
// named batch-<i> and service-<i>.
func (p Params) Config(cell []workload.Machine, seed uint64) (sim.Config, error) {
	cfg := sim.Config{Machines: cell, Policy: p.policy(), Seed: seed,
		Horizon: time.Duration(float64(p.Horizon) / p.BatchRate)}
	if p.MTBF > 0 {
		cfg.Failures = &sim.Failures{MTBF: p.MTBF, Repair: workload.Dist{Dist: "exponential", Mean: p.Repair.Seconds()}}
	}
	for _, g := range []struct {
		serves workload.Type
		n      int
		kind   string
		d      framework.DecisionTime
	}{{workload.Batch, p.Batch, p.BatchProfile, p.BatchDecision}, {workload.Service, p.Service, p.ServiceProfile, p.ServiceDecision}} {
		modes, err := p.modes(g.kind)
		if err != nil {
			return sim.Config{}, err
		}
		for i := range g.n {
			cfg.Schedulers = append(cfg.Schedulers, sim.SchedulerConfig{Name: fmt.Sprintf("%s-%d", g.serves, i), Kind: g.kind,
				Serves: g.serves, Partition: i, Partitions: g.n, Modes: modes, Decision: g.d})
		}
	}
	return cfg, nil
}

// Experiment is a sweep over a workload, run by one runner or compared
// between two.
type Experiment struct {
	Sweep Sweep
	// XS are the values swept (nil: the sweep's own).
	XS       []float64
	Base     Params
	Workload *Workload
	Seeds    []uint64
	// Runners: the first is reported; a second is compared with it.
	Runners []NamedRunner
	// Parallel is how many runs go at once (<= 0: GOMAXPROCS).
	Parallel int
	// Command reruns the experiment, and Provenance says what made it
	// (commit, Go version), for the report.
	Command, Provenance string
	// Progress, if set, gets a line per finished run.
	Progress io.Writer
	// status, if set (a terminal), shows the runs in flight.
	status *status
}

// Run runs every point of the sweep with every runner and seed.
func (e *Experiment) Run(ctx context.Context) (*Results, error) {
	switch {
	case len(e.Seeds) == 0:
		return nil, fmt.Errorf("experiment: no seeds")
	case len(e.Runners) == 0 || len(e.Runners) > 2:
		return nil, fmt.Errorf("experiment: %d runners; one, or two to compare", len(e.Runners))
	}
	xs := e.XS
	if xs == nil {
		xs = e.Sweep.XS
	}
	points, err := e.Sweep.Points(e.Base, xs)
	if err != nil {
		return nil, err
	}
	res := &Results{Sweep: e.Sweep.Name, Title: e.Sweep.Title, Doc: e.Sweep.Doc, XLabel: e.Sweep.XLabel, LogX: e.Sweep.LogX,
		XS: xs, Base: e.Base, Workload: e.Workload.Desc, Cell: describeCell(e.Workload.Cell), Seeds: e.Seeds,
		Command: e.Command, Provenance: e.Provenance, Points: points}
	for _, r := range e.Runners {
		res.Runners = append(res.Runners, r.Name)
		for pi := range points {
			for _, seed := range e.Seeds {
				res.Runs = append(res.Runs, Run{Runner: r.Name, Point: pi, Seed: seed})
			}
		}
	}
	if err := e.runAll(ctx, res); err != nil {
		return nil, err
	}
	res.summarise()
	return res, nil
}

// runAll fills res.Runs, up to Parallel at once; the first error stops
// the rest.
func (e *Experiment) runAll(ctx context.Context, res *Results) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	parallel := e.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	runners := map[string]NamedRunner{}
	for _, r := range e.Runners {
		runners[r.Name] = r
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
		next = make(chan int)
		// alone is held for writing by an exclusive run, for reading
		// by the others.
		alone sync.RWMutex
	)
	for range min(parallel, len(res.Runs)) {
		wg.Go(func() {
			for i := range next {
				run := &res.Runs[i]
				p := res.Points[run.Point]
				r := runners[run.Runner]
				lock, unlock := alone.RLock, alone.RUnlock
				if r.Exclusive {
					lock, unlock = alone.Lock, alone.Unlock
				}
				lock()
				start := time.Now()
				err := e.run(ctx, r.Run, p, run, i)
				run.Wall = time.Since(start)
				unlock()
				mu.Lock()
				done++
				line := ""
				if err != nil {
					cancel(fmt.Errorf("experiment: %s, %s, seed %d (%s): %w", p, run.Runner, run.Seed, e.Sweep.Name, err))
				} else if e.Progress != nil {
					line = fmt.Sprintf("%s: %d/%d runs (%s, %s, seed %d: %v of virtual time in %v)", e.Sweep.Name, done, len(res.Runs),
						p, run.Runner, run.Seed, seconds(run.Stats.DurationSeconds).Round(time.Second), run.Wall.Round(time.Millisecond))
				}
				if e.status != nil {
					e.status.finish(i, line)
				} else if line != "" {
					fmt.Fprintln(e.Progress, line)
				}
				mu.Unlock()
			}
		})
	}
	for i := range res.Runs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// run runs one point with one seed, run id of the experiment's.
func (e *Experiment) run(ctx context.Context, runner Runner, p Point, run *Run, id int) error {
	src, err := e.Workload.Source(run.Seed)
	if err != nil {
		return err
	}
	if p.Params.BatchRate != 1 {
		if src, err = workload.ScaleArrivals(src, workload.Batch, p.Params.BatchRate); err != nil {
			return err
		}
	}
	cfg, err := p.Params.Config(e.Workload.Cell, run.Seed)
	if err != nil {
		return err
	}
	if e.status != nil {
		label := "virtual time" // a single run
		if e.Sweep.Name != "" {
			label = fmt.Sprintf("%s seed %d:", p, run.Seed)
		}
		cfg.Progress = e.status.start(id, label, cfg.Horizon)
	}
	if run.Stats, err = runner(ctx, cfg, src); err != nil {
		return err
	}
	run.Stats.Workload = workload.ReportOf(src)
	run.roles(cfg)
	return nil
}
