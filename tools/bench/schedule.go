package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// ScheduleConfig is one run of the scheduling benchmark: Schedulers batch
// scheduler instances in one process (sharing its cell cache; the jobs
// split among them by hash, Omega's load-split) place Tasks tasks, submitted in jobs of TasksPerJob while
// they run, on Machines hollow machines of a real in-process store.
type ScheduleConfig struct {
	Machines, Tasks, TasksPerJob int
	Schedulers                   int
	Conflict                     framework.ConflictMode
	// Shards of the store (default 1). With more, a placement's task and
	// machine keys mostly fall on different shards: cross-shard commits.
	Shards int
	// HollowAgents runs a node agent with the simulated runtime for each
	// machine (it registers the machine, renews its lease, watches its
	// bindings and "runs" them); without, machines are only registered.
	HollowAgents bool
	// Dir holds the store's data.
	Dir string
	// Seed draws the tasks' requests and the schedulers' machine orders.
	Seed uint64
	// Progress, if set, is told the placements so far now and then.
	Progress func(placed int)
	Logger   *zap.Logger
}

// ScheduleResult is what one run measured. Waits run from a task's
// submission to its binding.
type ScheduleResult struct {
	Schedulers       int     `json:"schedulers"`
	Conflict         string  `json:"conflict"`
	Machines         int     `json:"machines"`
	Tasks            int     `json:"tasks"`
	Shards           int     `json:"shards"`
	Placed           int     `json:"placed"`
	Seconds          float64 `json:"seconds"`
	PlacementsPerSec float64 `json:"placements_per_sec"`
	Attempts         uint64  `json:"attempts"`
	Conflicts        uint64  `json:"conflicts"`
	// ConflictFraction is conflicts per placement, over all schedulers.
	ConflictFraction float64   `json:"conflict_fraction"`
	P50WaitMs        float64   `json:"p50_wait_ms"`
	P99WaitMs        float64   `json:"p99_wait_ms"`
	Busyness         []float64 `json:"busyness"`
	// CPUPerPlacementUs is the process's CPU time (user and system: the
	// store, the caches and the schedulers together) from the first
	// submission until the last placement, in microseconds per
	// placement: what other work on the machine disturbs less than
	// PlacementsPerSec.
	CPUPerPlacementUs float64 `json:"cpu_us_per_placement"`
	// Overcommitted counts machines whose bound tasks request more than
	// their capacity; CounterMismatches those whose /alloc counters differ
	// from the requests of their bound tasks. Both must be zero.
	Overcommitted     int `json:"overcommitted_machines"`
	CounterMismatches int `json:"counter_mismatches"`
	// GOGC is the garbage collector setting of the process, when the
	// caller set one.
	GOGC int `json:"gogc,omitempty"`
}

// Machine and task shapes: 32 cores and 128 GiB per machine; tasks of a
// job request one of these, so 100,000 tasks fill about a third of
// 10,000 machines.
var (
	benchCPU    = []int64{250, 500, 1000, 2000}
	benchMemory = []int64{512 << 20, 1 << 30, 2 << 30, 4 << 30}
)

// RunSchedule runs one scheduling benchmark and audits the result.
func RunSchedule(ctx context.Context, cfg ScheduleConfig) (ScheduleResult, error) {
	res := ScheduleResult{Schedulers: cfg.Schedulers, Conflict: conflictName(cfg.Conflict), Machines: cfg.Machines, Tasks: cfg.Tasks, Shards: max(cfg.Shards, 1)}
	if cfg.Machines <= 0 || cfg.Tasks <= 0 || cfg.TasksPerJob <= 0 || cfg.Schedulers <= 0 {
		return res, errors.New("schedule bench: machines, tasks, tasks per job and schedulers must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cell, err := localstore.Start(ctx, localstore.Config{Dir: cfg.Dir, Replicas: 1, Shards: max(cfg.Shards, 1), Logger: cfg.Logger})
	if err != nil {
		return res, err
	}
	defer cell.Close()
	// The schedulers present a scheduler's identity, so their commits pay
	// for authorization as in a cell; the setup and the hollow agents
	// are the admin's.
	newClient := func(role string) (*clientlib.Client, error) {
		cc := clientlib.DefaultConfig(cell.Endpoints()...)
		cc.Logger = cfg.Logger
		var err error
		if cc.TLS, err = cell.Credentials(pki.Identity{Role: role, Name: "bench"}); err != nil {
			return nil, err
		}
		return clientlib.New(cc)
	}
	admin, err := newClient(pki.RoleAdmin)
	if err != nil {
		return res, err
	}
	defer admin.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if cfg.HollowAgents {
		if err := startHollowAgents(runCtx, admin, cfg); err != nil {
			return res, err
		}
	} else if err := putAll(ctx, admin, cfg.Machines, func(g *clientlib.Group, i int) { clientlib.PutObject(g, clientlib.Machines, benchMachine(i)) }); err != nil {
		return res, fmt.Errorf("register machines: %w", err)
	}
	// The instances share one process, so they share its cell cache.
	cacheClient, err := newClient(pki.RoleScheduler)
	if err != nil {
		return res, err
	}
	defer cacheClient.Close()
	cellCache := scheduler.NewCellCache(cacheClient, cfg.Logger)
	scheds := make([]*scheduler.Scheduler, cfg.Schedulers)
	errc := make(chan error, cfg.Schedulers)
	for i := range scheds {
		prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(cfg.Seed, uint64(i))))
		if err != nil {
			return res, err
		}
		modes.Conflict = cfg.Conflict
		cl, err := newClient(pki.RoleScheduler)
		if err != nil {
			return res, err
		}
		defer cl.Close()
		s, err := scheduler.New(cl, scheduler.Config{Name: "batch-" + strconv.Itoa(i), Kind: profiles.Batch,
			Partition: i, Partitions: cfg.Schedulers, Profile: prof, Modes: modes, Policy: scheduler.DefaultPolicy(100 * time.Millisecond),
			Cache: cellCache, Logger: cfg.Logger})
		if err != nil {
			return res, err
		}
		scheds[i] = s
		go func() { errc <- s.Run(runCtx) }()
	}
	go cellCache.Run(runCtx)
	if err := cellCache.WaitForSync(ctx); err != nil {
		return res, err
	}

	// Submit the jobs while the schedulers run, as fast as the store
	// takes them.
	rng := rand.New(rand.NewPCG(cfg.Seed, 1<<32))
	cpu0 := processCPU()
	submitErr := make(chan error, 1)
	go func() {
		var job string
		var template *troupev1.TaskTemplate // the job's, shared by its tasks as the job controller's are
		submitErr <- putAll(runCtx, admin, cfg.Tasks, func(g *clientlib.Group, i int) {
			if i%cfg.TasksPerJob == 0 {
				job = fmt.Sprintf("job%06d", i/cfg.TasksPerJob)
				template = &troupev1.TaskTemplate{Command: "/bin/true",
					Requests: map[string]int64{"cpu": benchCPU[rng.IntN(len(benchCPU))], "memory": benchMemory[rng.IntN(len(benchMemory))]}}
			}
			idx := int32(i % cfg.TasksPerJob)
			clientlib.PutObject(g, clientlib.Tasks, &troupev1.Task{
				Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, idx), Namespace: "bench"},
				Spec: &troupev1.TaskSpec{Job: job, Index: idx, Type: troupev1.JobType_JOB_TYPE_BATCH, Scheduler: profiles.Batch,
					Submitted: timestamppb.Now(), Template: template},
				Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING},
			})
		})
	}()

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	placed := 0
	for placed < cfg.Tasks {
		placed = 0
		for _, s := range scheds {
			placed += int(s.Stats().Placements)
		}
		if cfg.Progress != nil {
			cfg.Progress(placed)
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%d of %d tasks placed: %w", placed, cfg.Tasks, ctx.Err())
		case err := <-errc:
			return res, fmt.Errorf("a scheduler stopped: %w", err)
		case err := <-submitErr:
			if err != nil {
				return res, fmt.Errorf("submit tasks: %w", err)
			}
		case <-tick.C:
		}
	}
	res.CPUPerPlacementUs = float64(cpuPerOp(processCPU()-cpu0, int64(placed)).Nanoseconds()) / 1e3
	for _, s := range scheds {
		st := s.Stats()
		res.Attempts += st.Attempts
		res.Conflicts += st.Conflicts
		res.Busyness = append(res.Busyness, st.Busyness)
	}
	stop()
	if err := audit(ctx, admin, &res); err != nil {
		return res, err
	}
	if res.Placed > 0 {
		res.ConflictFraction = float64(res.Conflicts) / float64(res.Placed)
	}
	return res, nil
}

// startHollowAgents starts an agent with the simulated runtime for each
// machine (tasks "run" for an hour) and waits until every machine has
// registered.
func startHollowAgents(ctx context.Context, c *clientlib.Client, cfg ScheduleConfig) error {
	rt := &runtime.Sim{DefaultDuration: time.Hour}
	for i := range cfg.Machines {
		m := benchMachine(i)
		a, err := agent.New(c, agent.Config{Machine: m.GetMetadata().GetName(), Capacity: m.GetSpec().GetCapacity(), Labels: m.GetMetadata().GetLabels(),
			Runtime: rt, LeaseDuration: time.Hour, RenewInterval: 30 * time.Minute, StopGrace: time.Second, Now: time.Now, Logger: cfg.Logger})
		if err != nil {
			return err
		}
		go a.Run(ctx)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ms, _, err := clientlib.List(ctx, c, clientlib.Machines, "")
		if err != nil {
			return fmt.Errorf("hollow agents: %w", err)
		}
		if len(ms) == cfg.Machines {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hollow agents: %d of %d machines registered: %w", len(ms), cfg.Machines, ctx.Err())
		case <-tick.C:
		}
	}
}

// putAll writes n objects, put by put(g, i) into group g, in requests of
// up to 500 groups.
func putAll(ctx context.Context, c clientlib.Store, n int, put func(g *clientlib.Group, i int)) error {
	const per = 500
	for i := 0; i < n; i += per {
		tx := clientlib.NewTxn(c)
		for j := i; j < min(i+per, n); j++ {
			put(tx.Group(), j)
		}
		out, err := tx.Commit(ctx)
		if err == nil {
			err = out.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// audit reads every task and counter back from the store: waits, the
// placement rate, and machines over capacity or with counters that
// disagree with their tasks.
func audit(ctx context.Context, c *clientlib.Client, res *ScheduleResult) error {
	tasks, _, err := clientlib.List(ctx, c, clientlib.Tasks, "")
	if err != nil {
		return fmt.Errorf("audit: list tasks: %w", err)
	}
	machines, _, err := clientlib.List(ctx, c, clientlib.Machines, "")
	if err != nil {
		return fmt.Errorf("audit: list machines: %w", err)
	}
	kvs, _, err := c.List(ctx, clientlib.AllocPrefix)
	if err != nil {
		return fmt.Errorf("audit: list counters: %w", err)
	}
	counters := map[string]int64{}
	for _, kv := range kvs {
		ctr, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		counters[kv.GetKey()] = ctr.GetValue()
	}
	bound := map[string]map[string]int64{}
	var waits []time.Duration
	var first, last time.Time
	for _, t := range tasks {
		b := t.GetBinding()
		if b.GetMachine() == "" {
			continue
		}
		res.Placed++
		if bound[b.GetMachine()] == nil {
			bound[b.GetMachine()] = map[string]int64{}
		}
		for r, q := range t.GetSpec().GetTemplate().GetRequests() {
			bound[b.GetMachine()][r] += q
		}
		sub, at := t.GetSpec().GetSubmitted().AsTime(), b.GetBoundAt().AsTime()
		waits = append(waits, at.Sub(sub))
		if first.IsZero() || sub.Before(first) {
			first = sub
		}
		if at.After(last) {
			last = at
		}
	}
	for _, m := range machines {
		name := m.GetMetadata().GetName()
		over, mismatch := false, false
		for r, capacity := range m.GetSpec().GetCapacity() {
			if bound[name][r] > capacity {
				over = true
			}
			if counters[clientlib.AllocKey(name, r)] != bound[name][r] {
				mismatch = true
			}
		}
		if over {
			res.Overcommitted++
		}
		if mismatch {
			res.CounterMismatches++
		}
	}
	if res.Placed > 0 {
		res.Seconds = last.Sub(first).Seconds()
		res.PlacementsPerSec = float64(res.Placed) / res.Seconds
		slices.Sort(waits)
		res.P50WaitMs = ms(waits[len(waits)/2])
		res.P99WaitMs = ms(waits[len(waits)*99/100])
	}
	return nil
}

func conflictName(m framework.ConflictMode) string {
	if m == framework.Coarse {
		return "coarse"
	}
	return "fine"
}
