package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
)

// Workload names.
const (
	WorkloadSeq   = "seq"
	WorkloadCAS   = "cas"
	WorkloadPlace = "place"
)

// DefaultWorkloads is the list run when none is given.
const DefaultWorkloads = WorkloadSeq + "," + WorkloadCAS + "," + WorkloadPlace

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

// Op performs one operation: one commit round trip.
type Op func(ctx context.Context) (committed bool, err error)

// Params sizes the workloads.
type Params struct {
	// Clients is the number of concurrent clients of cas and place (seq
	// has always one).
	Clients int
	// Keys is the number of keys cas works on (and seq cycles through).
	Keys int
	// ValueSize is the size of every value written, in bytes.
	ValueSize int
	// Machines is the number of machines place spreads bindings and
	// counters over.
	Machines int
	// Seed makes the clients' random choices repeatable.
	Seed uint64
}

// DefaultParams returns the sizes of the comparison benchmark.
func DefaultParams() Params {
	return Params{Clients: 64, Keys: 10000, ValueSize: 200, Machines: 1000, Seed: 1}
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
		return &placeWorkload{p: p, value: value}, nil
	}
	return nil, fmt.Errorf("bench: unknown workload %q (known: %s)", name, DefaultWorkloads)
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
// machines.
type placeWorkload struct {
	p     Params
	value []byte
}

func (w *placeWorkload) Name() string                             { return WorkloadPlace }
func (w *placeWorkload) Clients() int                             { return w.p.Clients }
func (w *placeWorkload) Prepare(context.Context, []Session) error { return nil }

func (w *placeWorkload) Op(id int, s Session) Op {
	r := clientRand(w.p.Seed, id)
	i := 0
	return func(ctx context.Context) (bool, error) {
		m := r.IntN(w.p.Machines)
		p := Placement{
			Task:         fmt.Sprintf("/tasks/bench/j%d/%d", id, i),
			TaskValue:    w.value,
			Binding:      fmt.Sprintf("/bindings/m%d/bench-j%d-%d", m, id, i),
			BindingValue: w.value,
			Counter:      fmt.Sprintf("/alloc/m%d/cpu", m),
			Delta:        1,
		}
		i++
		out, err := s.Place(ctx, p)
		return out.Committed, err
	}
}
