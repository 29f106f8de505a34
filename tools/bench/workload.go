package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
)

// Workload names.
const (
	WorkloadSeq    = "seq"
	WorkloadCAS    = "cas"
	WorkloadPlace  = "place"
	WorkloadPlace4 = "place4"
	WorkloadSplit4 = "split4"
)

// DefaultWorkloads is the list run when none is given.
const DefaultWorkloads = WorkloadSeq + "," + WorkloadCAS + "," + WorkloadPlace + "," + WorkloadPlace4 + "," + WorkloadSplit4

// KnownWorkloads are all the workloads: the default ones and watch, which
// runs only when asked for.
const KnownWorkloads = DefaultWorkloads + "," + WorkloadWatch

// place4Shards is the shard count of the Troupe cell place4 runs on.
const place4Shards = 4

// Workload is one benchmark scenario, independent of the system it runs on.
type Workload interface {
	Name() string
	// Clients is the number of concurrent clients.
	Clients() int
	// Prepare runs before the timed part with every client's session open,
	// for example to preload keys. It may use the sessions concurrently,
	// one goroutine per session. Run calls it once per run.
	Prepare(ctx context.Context, sessions []Session) error
	// Op returns client id's operation; Run calls it in a loop, from one
	// goroutine per client, after Prepare. It reports whether the op
	// committed (false: it met a conflict).
	Op(id int, s Session) Op
}

// CrossShardWorkload is a Workload that spreads another workload's ops
// over the shards of a Troupe cell: it runs on a cell of Shards() shards
// (RunSystem starts one), and the Reporter compares its latencies with
// those of Baseline(), run on the same system. Systems without shards run
// it as any other workload.
type CrossShardWorkload interface {
	Workload
	Shards() int
	Baseline() string
}

// ShardsFor is the shard count w runs on: its own if it is a
// CrossShardWorkload, else shards.
func ShardsFor(w Workload, shards int) int {
	if x, ok := w.(CrossShardWorkload); ok {
		return x.Shards()
	}
	return shards
}

// Op performs one operation: one commit round trip.
type Op func(ctx context.Context) (committed bool, err error)

// Params sizes the workloads.
type Params struct {
	// Clients is the number of concurrent clients of cas, place and
	// place4 (seq has always one).
	Clients int
	// Keys is the number of keys cas works on (and seq cycles through).
	Keys int
	// ValueSize is the size of every value written, in bytes.
	ValueSize int
	// Machines is the number of machines place spreads bindings and
	// counters over (place4: rounded up to a multiple of 4).
	Machines int
	// Seed makes the clients' random choices repeatable.
	Seed uint64
	// Watchers is the number of watchers of watch (its writers are
	// Clients clients putting random keys among Keys).
	Watchers int
	// WatchRate paces watch's writers to this many commits a second in
	// all (0: as fast as they go), so that systems compare at one rate.
	WatchRate float64
}

// DefaultParams returns the sizes of the comparison benchmark.
func DefaultParams() Params {
	return Params{Clients: 64, Keys: 10000, ValueSize: 200, Machines: 1000, Seed: 1, Watchers: 1000}
}

// Validate says what is wrong with p, if anything.
func (p Params) Validate() error {
	var errs []error
	if p.Clients < 1 {
		errs = append(errs, fmt.Errorf("bench: Params.Clients is %d, want at least 1", p.Clients))
	}
	if p.Keys < 1 {
		errs = append(errs, fmt.Errorf("bench: Params.Keys is %d, want at least 1", p.Keys))
	}
	if p.ValueSize < 0 {
		errs = append(errs, fmt.Errorf("bench: Params.ValueSize is %d, want 0 or more", p.ValueSize))
	}
	if p.Machines < 1 {
		errs = append(errs, fmt.Errorf("bench: Params.Machines is %d, want at least 1", p.Machines))
	}
	if p.Watchers < 0 || p.WatchRate < 0 {
		errs = append(errs, fmt.Errorf("bench: Params.Watchers is %d and Params.WatchRate %v, want 0 or more", p.Watchers, p.WatchRate))
	}
	return errors.Join(errs...)
}

// NewWorkload returns the workload called name.
func NewWorkload(name string, p Params) (Workload, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	value := randomValue(p.ValueSize, p.Seed)
	switch name {
	case WorkloadSeq:
		return &seqWorkload{p: p, value: value}, nil
	case WorkloadCAS:
		return &casWorkload{p: p, value: value}, nil
	case WorkloadPlace:
		return &placeWorkload{name: name, p: p, value: value, spread: sameMachine(p.Machines)}, nil
	case WorkloadPlace4:
		return &place4Workload{placeWorkload{name: name, p: p, value: value, spread: threeShards(name, p)}}, nil
	case WorkloadSplit4:
		return &split4Workload{place4Workload{placeWorkload{name: name, p: p, value: value, spread: threeShards(name, p)}}}, nil
	case WorkloadWatch:
		if p.Watchers < 1 {
			return nil, fmt.Errorf("bench: watch needs at least 1 watcher, Params.Watchers is %d", p.Watchers)
		}
		return &watchWorkload{p: p, value: randomValue(max(p.ValueSize, stampBytes), p.Seed)}, nil
	}
	return nil, fmt.Errorf("bench: unknown workload %q (known: %s)", name, KnownWorkloads)
}

// ParseWorkloads returns the workloads of a comma-separated list of names.
func ParseWorkloads(list string, p Params) ([]Workload, error) {
	var ws []Workload
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("bench: workload %q listed twice", name)
		}
		seen[name] = true
		w, err := NewWorkload(name, p)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("bench: no workload in %q", list)
	}
	return ws, nil
}

// randomValue returns n pseudo-random bytes, the same for the same seed
// (random rather than constant so that compression cannot flatter either
// system).
func randomValue(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x76616c7565))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// clientRand is client id's random source.
func clientRand(seed uint64, id int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(id)+1))
}

// seqWorkload: one client, sequential unconditional single-key puts.
type seqWorkload struct {
	p     Params
	value []byte
}

func (w *seqWorkload) Name() string                             { return WorkloadSeq }
func (w *seqWorkload) Clients() int                             { return 1 }
func (w *seqWorkload) Prepare(context.Context, []Session) error { return nil }

func (w *seqWorkload) Op(_ int, s Session) Op {
	i := 0
	return func(ctx context.Context) (bool, error) {
		key := fmt.Sprintf("/bench/seq/k%05d", i%w.p.Keys)
		i++
		_, err := s.Put(ctx, key, w.value)
		return err == nil, err
	}
}

// casWorkload: compare-version-then-put on random preloaded keys.
type casWorkload struct {
	p     Params
	value []byte
	// preloaded[k] is key k's version after Prepare; each client starts
	// from a copy.
	preloaded []uint64
}

func casKey(k int) string { return fmt.Sprintf("/bench/cas/k%05d", k) }

func (w *casWorkload) Name() string { return WorkloadCAS }
func (w *casWorkload) Clients() int { return w.p.Clients }

// Prepare writes every key once, spreading the keys over the sessions.
func (w *casWorkload) Prepare(ctx context.Context, sessions []Session) error {
	w.preloaded = make([]uint64, w.p.Keys)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, s := range sessions {
		wg.Go(func() {
			for k := i; k < w.p.Keys; k += len(sessions) {
				v, err := s.Put(ctx, casKey(k), w.value)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("preload %s: %w", casKey(k), err)
					}
					mu.Unlock()
					cancel()
					return
				}
				w.preloaded[k] = v // distinct k per goroutine
			}
		})
	}
	wg.Wait()
	return firstErr
}

func (w *casWorkload) Op(id int, s Session) Op {
	r := clientRand(w.p.Seed, id)
	known := append([]uint64(nil), w.preloaded...)
	retry := -1 // key to retry after a conflict, or -1
	return func(ctx context.Context) (bool, error) {
		k := retry
		if k < 0 {
			k = r.IntN(w.p.Keys)
		}
		out, err := s.CompareAndPut(ctx, casKey(k), known[k], w.value)
		if err != nil {
			return false, err
		}
		known[k] = out.Version
		retry = -1
		if !out.Committed {
			retry = k
		}
		return out.Committed, nil
	}
}

// placeWorkload: scheduler-style placements of fresh tasks on random
// machines, the tasks of client id in job j<id> of namespace name.
type placeWorkload struct {
	name  string
	p     Params
	value []byte
	// spread picks the job of client id and, for each placement, the
	// machines of its binding and of its counter.
	spread placeSpread
	// run numbers the runs of the workload (Prepare): each run places
	// tasks of its own, so a run again on the same cell (benchcompare
	// -rounds) places fresh tasks rather than conflict on the last run's.
	run int
}

// placeSpread chooses where a workload's placements go.
type placeSpread struct {
	job      func(id int) string
	machines func(r *rand.Rand, id int) (binding, counter string)
}

func (w *placeWorkload) Name() string { return w.name }
func (w *placeWorkload) Clients() int { return w.p.Clients }

// Prepare numbers the run.
func (w *placeWorkload) Prepare(context.Context, []Session) error {
	w.run++
	return nil
}

func (w *placeWorkload) Op(id int, s Session) Op {
	next := w.placements(id)
	return func(ctx context.Context) (bool, error) {
		out, err := s.Place(ctx, next())
		return out.Committed, err
	}
}

// placements returns the generator of client id's placements.
func (w *placeWorkload) placements(id int) func() Placement {
	r := clientRand(w.p.Seed, id)
	job := w.spread.job(id)
	run, i := w.run, 0
	return func() Placement {
		b, c := w.spread.machines(r, id)
		p := Placement{
			Task:         fmt.Sprintf("/tasks/%s/%s/%d.%d", w.name, job, run, i),
			TaskValue:    w.value,
			Binding:      fmt.Sprintf("/bindings/%s/%s-%s-%d.%d", b, w.name, job, run, i),
			BindingValue: w.value,
			Counter:      "/alloc/" + c + "/" + w.name,
			Delta:        1,
		}
		i++
		return p
	}
}

// sameMachine binds each task on a random machine among machines and
// raises that machine's counter: on a sharded cell every key of a
// placement but the task's is on the machine's shard.
func sameMachine(machines int) placeSpread {
	return placeSpread{
		job: func(id int) string { return fmt.Sprintf("j%d", id) },
		machines: func(r *rand.Rand, _ int) (string, string) {
			m := fmt.Sprintf("m%d", r.IntN(machines))
			return m, m
		},
	}
}

// place4Workload is place with each placement's task, binding and counter
// on three different shards of a place4Shards-shard cell, so that every
// Troupe commit is a cross-shard transaction. To get there the binding
// names another machine than the counter it raises: no scheduler would
// commit that, but the store does the work of a placement that spans
// three shards.
type place4Workload struct{ placeWorkload }

var _ CrossShardWorkload = (*place4Workload)(nil)

func (w *place4Workload) Shards() int      { return place4Shards }
func (w *place4Workload) Baseline() string { return WorkloadPlace }

// split4Workload writes the keys of place4's placements (task, binding,
// counter: three shards) as three independent single-shard puts sent at
// once (Session.PutEach), and times the three together. No cross-shard
// commit can take less: each participant must durably record its part,
// so a cross-shard commit costs at least one round of parallel Raft
// proposals, which is exactly this. On a cell whose replicas share a few
// cores the proposals of a round compete for them, and split4 over place
// shows the floor that leaves for place4 over place.
type split4Workload struct{ place4Workload }

func (w *split4Workload) Op(id int, s Session) Op {
	next := w.placements(id)
	return func(ctx context.Context) (bool, error) {
		p := next()
		return true, s.PutEach(ctx, []string{p.Task, p.Binding, p.Counter}, p.TaskValue)
	}
}

// threeShards spreads place4's placements: client id's job is on shard
// id mod 4 (so clients spread evenly over the shards), and each
// placement's binding and counter are on two other shards, chosen at
// random, each on a random machine of its shard. The machines are the
// first of m0, m1, ... that fill a quarter of p.Machines (rounded up) on
// each shard.
func threeShards(ns string, p Params) placeSpread {
	router := keyspace.NewRouter(place4Shards)
	jobs := namesByShard(router, ceilDiv(p.Clients, place4Shards), "j",
		func(j string) string { return "/tasks/" + ns + "/" + j + "/" })
	machines := namesByShard(router, ceilDiv(p.Machines, place4Shards), "m",
		func(m string) string { return "/alloc/" + m + "/" })
	return placeSpread{
		job: func(id int) string { return jobs[id%place4Shards][id/place4Shards] },
		machines: func(r *rand.Rand, id int) (string, string) {
			// The shards other than the job's are id+1+k for k < others.
			const others = place4Shards - 1
			k := r.IntN(others)
			l := (k + 1 + r.IntN(others-1)) % others
			b := machines[(id+1+k)%place4Shards]
			c := machines[(id+1+l)%place4Shards]
			return b[r.IntN(len(b))], c[r.IntN(len(c))]
		},
	}
}

// namesByShard returns, for each shard of router, the first n of the
// names prefix0, prefix1, ... whose key(name) falls on it.
func namesByShard(router keyspace.Router, n int, prefix string, key func(name string) string) [][]string {
	byShard := make([][]string, router.Shards())
	for k, full := 0, 0; full < len(byShard); k++ {
		name := prefix + strconv.Itoa(k)
		sh := router.Shard(key(name))
		if len(byShard[sh]) == n {
			continue
		}
		byShard[sh] = append(byShard[sh], name)
		if len(byShard[sh]) == n {
			full++
		}
	}
	return byShard
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
