// Command simplugin is troupe sim with a scheduler plugin of one's own:
// worstfit, a score plugin that puts each task on the emptiest of the
// machines sampled (the opposite of the built-in batch profile's
// bin-packing), registered as the scheduler kind "worstfit". Every flag
// and sweep of troupe sim works, and -batch-profile or -service-profile
// worstfit puts the plugin to work:
//
//	go run ./tools/sim/examples/simplugin sweep tjob-sweep -batch-profile worstfit -out /tmp/worstfit
//
// A plugin of your own goes the same way: write it (a
// framework.FilterPlugin or ScorePlugin), build a profile around it with
// profiles.Filters, register it under a kind, and run
// experiment.Command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/tools/sim/experiment"
)

// Kind is the scheduler kind the example registers.
const Kind = "worstfit"

// worstFit scores a machine by the share of its CPU and memory left free
// once the task is on it: the emptiest machine wins.
type worstFit struct{}

func (worstFit) Name() string { return "WorstFit" }

func (worstFit) Score(t *framework.Task, m *framework.Machine) int64 {
	var score int64
	for _, r := range []string{"cpu", "memory"} {
		if c := m.Capacity[r]; c > 0 {
			score += (m.Free(r) - t.Requests[r]) * framework.MaxScore / c
		}
	}
	return max(score/2, 0)
}

// profile is the worstfit scheduler: the built-in filters (so the cell's
// rules hold), the best of 16 sampled feasible machines by worstFit, and
// the default commit modes (fine-grained, incremental).
func profile(rng *rand.Rand) (framework.Profile, framework.Modes, error) {
	fs, err := profiles.Filters()
	if err != nil {
		return framework.Profile{}, framework.Modes{}, err
	}
	return framework.Profile{Filters: fs, Rand: rng, SampleFeasible: 16,
		Scores: []framework.WeightedScore{{Plugin: worstFit{}, Weight: 1}}}, framework.Modes{}, nil
}

func init() { profiles.Register(Kind, profile) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := experiment.Command{Name: "go run ./tools/sim/examples/simplugin", Stdout: os.Stdout, Stderr: os.Stderr}.Run(ctx, os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "simplugin:", err)
		os.Exit(1)
	}
}
