// Package profiles assembles the built-in schedulers' decision profiles
// from the plugins: batch (fast first fit on sampled machines), service
// (careful scoring and spreading) and gang (all-or-nothing placement).
package profiles

import (
	"fmt"
	"math/rand/v2"

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
)

// filters returns the filters every profile runs, cheapest and static
// first.
func filters() ([]framework.FilterPlugin, error) {
	cel, err := celconstraint.New(celconstraint.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return []framework.FilterPlugin{
		schedulable.New(), labelselector.New(), tainttoleration.New(), cel,
		resourcefit.New(), distinctmachines.New(),
	}, nil
}

// New returns the profile and commit modes of the built-in scheduler
// kind, drawing machine order from rng.
func New(kind string, rng *rand.Rand) (framework.Profile, framework.Modes, error) {
	fs, err := filters()
	if err != nil {
		return framework.Profile{}, framework.Modes{}, err
	}
	// Every profile may preempt lower-priority tasks (never production by
	// production: framework.CanPreempt).
	p := framework.Profile{Filters: fs, Rand: rng, Preempt: true}
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
	default:
		return framework.Profile{}, framework.Modes{}, fmt.Errorf("profiles: unknown scheduler kind %q (batch, service, gang)", kind)
	}
}
