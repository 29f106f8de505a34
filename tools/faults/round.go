package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/troupe-cluster/troupe/clientlib"
)

// RoundConfig describes one round: a new cell, clients running a
// workload through it while faults come and go, then healing, final
// reads and the check.
type RoundConfig struct {
	// Seed fixes every random choice of the round: the faults, their
	// victims and timing, and each client's operations. (The interleaving
	// the OS makes of them is not fixed.)
	Seed     int64
	Cluster  ClusterConfig
	Workload Workload
	Faults   []Fault
	// Clients is the number of concurrent clients, each with its own
	// clientlib.Client.
	Clients int
	// Load is how long the clients run.
	Load time.Duration
	// Gap and Hold bound the quiet time before each fault and the time it
	// lasts: each is random in [x/2, x].
	Gap, Hold time.Duration
	// OpTimeout bounds each operation, retries included; AttemptTimeout
	// each attempt (clientlib.Config.AttemptTimeout). Short, so that
	// faults make operations ambiguous rather than slow.
	OpTimeout, AttemptTimeout time.Duration
	// ReadyTimeout bounds waiting for leaders, after the start and after
	// healing, and the final reads.
	ReadyTimeout time.Duration
	// CheckTimeout bounds the linearizability check (beyond it the verdict
	// is Unknown).
	CheckTimeout time.Duration
	// OutDir receives a failed round's history and visualization, and
	// with KeepHistory a passed round's too.
	OutDir      string
	KeepHistory bool
	// Logf reports progress (nil: silent).
	Logf func(format string, args ...any)
}

// DefaultRoundConfig returns a round of the register workload on a
// three-node, two-shard cell of binary with its data in dir, every
// fault, four clients and 20 seconds of load.
func DefaultRoundConfig(seed int64, binary, dir, outDir string) RoundConfig {
	cell := DefaultClusterConfig(binary, dir)
	return RoundConfig{
		Seed: seed, Cluster: cell, Workload: NewRegister(cell.Shards, 4), Faults: DefaultFaults(),
		Clients: 4, Load: 20 * time.Second, Gap: time.Second, Hold: 2 * time.Second,
		OpTimeout: time.Second, AttemptTimeout: 300 * time.Millisecond,
		ReadyTimeout: 30 * time.Second, CheckTimeout: time.Minute, OutDir: outDir,
	}
}

// BankRoundConfig returns a round of the bank workload: eight accounts
// on a three-node cell of three shards whose cross-shard transactions
// time out after a second, every fault (KillDriver too), four clients
// and 20 seconds of load.
func BankRoundConfig(seed int64, binary, dir, outDir string) RoundConfig {
	cfg := DefaultRoundConfig(seed, binary, dir, outDir)
	cfg.Workload = NewBank(3, 8)
	cfg.Cluster.Shards = cfg.Workload.Shards()
	cfg.Cluster.TxnTimeout = time.Second
	cfg.Faults = append(DefaultFaults(), KillDriver())
	return cfg
}

// Validate says precisely what is wrong with c, if anything.
func (c RoundConfig) Validate() error {
	errs := []error{c.Cluster.Validate()}
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("faults: RoundConfig."+format, args...))
	}
	if c.Workload == nil {
		add("Workload is nil")
	} else if n := c.Workload.Shards(); n != c.Cluster.Shards {
		add("Cluster.Shards is %d but the %s workload spreads its keys over %d", c.Cluster.Shards, c.Workload.Name(), n)
	}
	if c.Clients < 1 {
		add("Clients is %d, want at least 1", c.Clients)
	}
	for name, d := range map[string]time.Duration{"Load": c.Load, "Gap": c.Gap, "Hold": c.Hold, "OpTimeout": c.OpTimeout,
		"AttemptTimeout": c.AttemptTimeout, "ReadyTimeout": c.ReadyTimeout, "CheckTimeout": c.CheckTimeout} {
		if d <= 0 {
			add("%s is %v, want a positive duration", name, d)
		}
	}
	if c.OutDir == "" {
		add("OutDir is empty")
	}
	return errors.Join(errs...)
}

func (c RoundConfig) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Report is what a round did and found.
type Report struct {
	Seed int64
	// Ops is the number of operations recorded, Ambiguous how many of
	// them have an unknown outcome.
	Ops, Ambiguous int
	// Faults says what was injected, in order.
	Faults []string
	// Result is porcupine's verdict (Unknown: it ran out of time).
	Result porcupine.CheckResult
	// Tally is what the workload counted in the history, if it is a
	// Tallier.
	Tally map[string]int
	// Problems are what the round found wrong: a history that is not
	// linearizable, lost commits, nodes that crashed or did not recover.
	// None: the round passed.
	Problems []string
	// Files are the history, its visualization and the nodes' logs, when
	// there are problems.
	Files   []string
	Elapsed time.Duration
}

// RunRound runs one round. Its error means the round could not be run
// (say, the cell would not start); what the round found wrong is in
// Report.Problems.
func RunRound(ctx context.Context, cfg RoundConfig) (rep Report, err error) {
	begin := time.Now()
	rep.Seed = cfg.Seed
	defer func() { rep.Elapsed = time.Since(begin) }()
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	cell, err := StartCluster(cfg.Cluster)
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, cell.Close()) }()
	if err := waitReady(ctx, cell, cfg.ReadyTimeout); err != nil {
		return rep, err
	}
	var stores []*clientlib.Client
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	for range cfg.Clients + 1 { // the last one sets up and does the final reads
		s, err := clientlib.New(clientConfig(cfg, cell, cell.Endpoints()))
		if err != nil {
			return rep, err
		}
		stores = append(stores, s)
	}
	h := NewHistory()
	if w, ok := cfg.Workload.(Initializer); ok {
		ictx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
		err := w.Init(ictx, h.NewClient(stores[cfg.Clients], rand.New(rand.NewPCG(uint64(cfg.Seed), initStream(cfg)))))
		cancel()
		if err != nil {
			return rep, fmt.Errorf("faults: %s workload: init: %w", cfg.Workload.Name(), err)
		}
	}
	rep.Faults, rep.Problems = runLoad(ctx, cfg, cell, h, stores[:cfg.Clients])
	rep.Problems = append(rep.Problems, finish(ctx, cfg, cell, h, stores[cfg.Clients])...)
	return rep, rep.judge(cfg, cell, h)
}

// clientConfig configures a client of the round reaching endpoints of
// cell, as the cell's admin.
func clientConfig(cfg RoundConfig, cell *Cluster, endpoints []string) clientlib.Config {
	return clientlib.Config{
		Endpoints:      endpoints,
		TLS:            cell.ClientTLS(),
		AttemptTimeout: cfg.AttemptTimeout,
		// Quick retries: OpTimeout bounds them all anyway.
		Retry: clientlib.RetryPolicy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxAttempts: 5},
	}
}

// The random streams of a round (each seeded with the round's seed):
// the nemesis's is 0, client i's i+1, then the final reader's, the
// workload's Init's, and those of the clients Target.Through starts.
func finalStream(cfg RoundConfig) uint64 { return uint64(cfg.Clients + 1) }
func initStream(cfg RoundConfig) uint64  { return uint64(cfg.Clients + 2) }

// runLoad runs the clients for cfg.Load while the nemesis injects
// faults, and returns what the nemesis did and the heals that failed.
func runLoad(ctx context.Context, cfg RoundConfig, cell *Cluster, h *History, stores []*clientlib.Client) (faults, problems []string) {
	load, stop := context.WithTimeout(ctx, cfg.Load)
	defer stop()
	var wg sync.WaitGroup
	for i, s := range stores {
		c := h.NewClient(s, rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i+1))))
		wg.Go(func() { drive(load, cfg.Workload, c, cfg.OpTimeout, 0) })
	}
	wg.Go(func() { faults, problems = nemesis(load, cfg, cell, h, rand.New(rand.NewPCG(uint64(cfg.Seed), 0))) })
	wg.Wait()
	return faults, problems
}

// finish heals the cell, waits for its leaders and runs the workload's
// final reads through s; it returns the problems found on the way.
func finish(ctx context.Context, cfg RoundConfig, cell *Cluster, h *History, s *clientlib.Client) []string {
	cfg.logf("seed %d: load over; healing", cfg.Seed)
	var problems []string
	if err := cell.Heal(); err != nil {
		problems = append(problems, fmt.Sprintf("heal: %v", err))
	}
	if err := waitReady(ctx, cell, cfg.ReadyTimeout); err != nil {
		problems = append(problems, fmt.Sprintf("the cell did not recover once healed: %v", err))
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	final := h.NewClient(s, rand.New(rand.NewPCG(uint64(cfg.Seed), finalStream(cfg))))
	problems = append(problems, cfg.Workload.Final(ctx, final, h.Operations())...)
	return append(problems, cell.Problems()...)
}

// judge counts the history's operations, checks it for linearizability
// and, if the round has problems (or cfg.KeepHistory), writes it out.
func (rep *Report) judge(cfg RoundConfig, cell *Cluster, h *History) error {
	ops := h.Operations()
	rep.Ops = len(ops)
	for _, op := range ops {
		if op.Return == Never {
			rep.Ambiguous++
		}
	}
	cfg.logf("seed %d: checking %d operations (%d ambiguous)", cfg.Seed, rep.Ops, rep.Ambiguous)
	model := cfg.Workload.Model()
	if t, ok := cfg.Workload.(Tallier); ok {
		rep.Tally = t.Tally(ops)
	}
	rep.Result = porcupine.CheckOperationsTimeout(model, ops, cfg.CheckTimeout)
	if rep.Result == porcupine.Illegal {
		rep.Problems = append(rep.Problems, "the history is not linearizable")
	}
	if len(rep.Problems) == 0 && !cfg.KeepHistory {
		return nil
	}
	files, err := WriteHistory(cfg.OutDir, fmt.Sprintf("%s-seed-%d", cfg.Workload.Name(), cfg.Seed), model, ops, h.Faults(), cfg.CheckTimeout)
	rep.Files = append(files, cell.LogPaths()...)
	return err
}

// waitReady waits up to timeout for the cell's leaders.
func waitReady(ctx context.Context, cell *Cluster, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cell.WaitReady(ctx)
}

// drive runs w's operations as client c until ctx ends, or after maxOps
// operations (0: no bound). Each gets opTimeout; an operation under way
// when ctx ends runs to its own end.
func drive(ctx context.Context, w Workload, c *Client, opTimeout time.Duration, maxOps int) {
	for n := 0; ctx.Err() == nil && (maxOps == 0 || n < maxOps); n++ {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		w.Op(octx, c)
		cancel()
	}
}

// nemesis injects cfg.Faults one at a time until ctx ends: a quiet gap,
// a fault, held for a while, its heal. Each cycle takes every fault
// once, in a random order. It returns what it did, and heals that failed
// as problems.
func nemesis(ctx context.Context, cfg RoundConfig, cell *Cluster, h *History, rng *rand.Rand) (did, problems []string) {
	through := throughNode(cfg, cell, h)
	var order []int
	for len(cfg.Faults) > 0 && pause(ctx, between(rng, cfg.Gap)) {
		if len(order) == 0 {
			order = rng.Perm(len(cfg.Faults))
		}
		f := cfg.Faults[order[0]]
		order = order[1:]
		start := h.now()
		what, heal, err := f.Inject(ctx, Target{Cluster: cell, Rand: rng, Through: through})
		if err != nil {
			cfg.logf("seed %d: %s not injected: %v", cfg.Seed, f.Name, err)
			continue
		}
		cfg.logf("seed %d: %s", cfg.Seed, what)
		pause(ctx, between(rng, cfg.Hold)) // cut short when the load ends
		if err := heal(); err != nil {
			problems = append(problems, fmt.Sprintf("heal after %s: %v", what, err))
		}
		h.Fault(start, what)
		did = append(did, what)
	}
	return did, problems
}

// throughNode returns Target.Through for the round's faults: nil unless
// the workload is Pinned. It is called by one fault at a time.
func throughNode(cfg RoundConfig, cell *Cluster, h *History) func(ctx context.Context, node, n int) {
	w, ok := cfg.Workload.(Pinned)
	if !ok {
		return nil
	}
	stream := initStream(cfg)
	return func(ctx context.Context, node, n int) {
		s, err := clientlib.New(clientConfig(cfg, cell, cell.Endpoints()[node:node+1]))
		if err != nil { // the round's other clients were configured alike
			cfg.logf("seed %d: a client of node %d: %v", cfg.Seed, node+1, err)
			return
		}
		defer s.Close()
		var wg sync.WaitGroup
		for range n {
			stream++
			c := h.NewClient(s, rand.New(rand.NewPCG(uint64(cfg.Seed), stream)))
			wg.Go(func() {
				octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
				defer cancel()
				w.OpAt(octx, c)
			})
		}
		wg.Wait()
	}
}

// between returns a random duration in [d/2, d].
func between(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d/2)+1))
}

// pause waits d, or less if ctx ends; it reports whether ctx is still
// going.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
