// Package profiles assembles the built-in schedulers' decision profiles
// from the plugins: batch (fast first fit on sampled machines), service
// (careful scoring and spreading), gang (all-or-nothing placement) and
// random (a machine drawn uniformly among those with room, as Google's
// lightweight Omega simulator places tasks).
// Register adds kinds of one's own (a researcher's plugins, say), which
// New then builds like the built-in ones: in a cell and in the simulator.
package profiles

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/plugins/binpacking"
	"github.com/troupe-cluster/troupe/schedulers/plugins/celconstraint"
	"github.com/troupe-cluster/troupe/schedulers/plugins/distinctmachines"
	"github.com/troupe-cluster/troupe/schedulers/plugins/domainspread"
	"github.com/troupe-cluster/troupe/schedulers/plugins/labelselector"
	"github.com/troupe-cluster/troupe/schedulers/plugins/resourcefit"
	"github.com/troupe-cluster/troupe/schedulers/plugins/schedulable"
	"github.com/troupe-cluster/troupe/schedulers/plugins/spread"
	"github.com/troupe-cluster/troupe/schedulers/plugins/tainttoleration"
)

// Kinds of built-in schedulers (the names jobs give in spec.scheduler).
const (
	Batch   = "batch"
	Service = "service"
	Gang    = "gang"
	// Random places each task on a machine drawn uniformly at random
	// among those the filters pass: for reproducing the Omega paper's
	// lightweight simulations, not for production.
	Random = "random"
)

// Builder builds a kind's profile and commit modes, drawing machine order
// from rng.
type Builder func(rng *rand.Rand) (framework.Profile, framework.Modes, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Builder{}
)

// Register makes kind a scheduler kind that New builds with b. It panics
// if kind is empty, built in or registered already (as http.Handle does:
// registration happens at start-up, by the program's own code).
func Register(kind string, b Builder) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if kind == "" || slices.Contains(builtIn, kind) || registry[kind] != nil {
		panic(fmt.Sprintf("profiles: kind %q is empty, built in or registered twice", kind))
	}
	registry[kind] = b
}

// Kinds returns the kinds New builds: the built-in ones, then the
// registered ones in order of name.
func Kinds() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return append(slices.Clone(builtIn), slices.Sorted(maps.Keys(registry))...)
}

var builtIn = []string{Batch, Service, Gang, Random}

// Filters returns the filters every built-in profile runs, cheapest and
// static first: a registered profile starts from them to keep the cell's
// rules (cordons, label selectors, taints, CEL constraints, resources,
// distinct machines).
func Filters() ([]framework.FilterPlugin, error) {
	cel, err := celconstraint.New(celconstraint.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return []framework.FilterPlugin{
		schedulable.New(), labelselector.New(), tainttoleration.New(), cel,
		resourcefit.New(), distinctmachines.New(),
	}, nil
}

// New returns the profile and commit modes of the scheduler kind, built
// in or registered, drawing machine order from rng.
func New(kind string, rng *rand.Rand) (framework.Profile, framework.Modes, error) {
	registryMu.RLock()
	b := registry[kind]
	registryMu.RUnlock()
	if b != nil {
		return b(rng)
	}
	fs, err := Filters()
	if err != nil {
		return framework.Profile{}, framework.Modes{}, err
	}
	// Every profile may preempt lower-priority tasks (never production by
	// production: framework.CanPreempt).
	p := framework.Profile{Filters: fs, Rand: rng, Preempt: true, Cache: framework.NewCache()}
	switch kind {
	case Batch:
		// First fit among a few sampled feasible machines: cheap, and
		// spreads competing schedulers over the cell.
		p.SampleFeasible = 4
		p.Scores = []framework.WeightedScore{{Plugin: binpacking.New(), Weight: 1}}
		return p, framework.Modes{Conflict: framework.Fine, Txn: framework.Incremental}, nil
	case Service:
		p.SampleFeasible = 64
		p.Scores = []framework.WeightedScore{
			{Plugin: domainspread.New("zone"), Weight: 4},
			{Plugin: spread.New(), Weight: 2},
			{Plugin: tainttoleration.NewPreference(), Weight: 1},
		}
		return p, framework.Modes{Conflict: framework.Fine, Txn: framework.Incremental}, nil
	case Gang:
		p.SampleFeasible = 16
		p.Scores = []framework.WeightedScore{{Plugin: binpacking.New(), Weight: 1}}
		return p, framework.Modes{Conflict: framework.Fine, Txn: framework.AllOrNothing}, nil
	case Random:
		// Google's lightweight Omega simulator (google/cluster-scheduler-
		// simulator, Scheduler.scheduleJob) places a job's tasks by
		// randomized first fit: "candidateIndex =
		// nextInt(remainingCandidates)"; a machine with room for the task
		// takes it and stays a candidate (it may take more of the job's
		// tasks), one without is swapped out of the candidates; it stops
		// when every task is placed or no candidate is left. So each task
		// goes to a machine drawn uniformly among those with room, and
		// stays unplaced only if none has any: framework.Profile.Redraw
		// with the first feasible machine taken and no scores. The
		// production filters still apply (cordons, label selectors,
		// taints, constraints, resources, distinct machines); Google's
		// simulator has none of them but room. It never preempts, as
		// that simulator does not. Commit modes as batch's: the
		// simulator sets its own (Fine or CoarseClaims, Incremental or
		// Atomic).
		p.Redraw, p.SampleFeasible, p.Preempt = true, 1, false
		return p, framework.Modes{Conflict: framework.Fine, Txn: framework.Incremental}, nil
	default:
		return framework.Profile{}, framework.Modes{}, fmt.Errorf("profiles: unknown scheduler kind %q (%s)", kind, strings.Join(Kinds(), ", "))
	}
}
