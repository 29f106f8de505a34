package main

import (
	"errors"
	"flag"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/tools/bench"
	"github.com/troupe-cluster/troupe/tools/sim/experiment"
)

// simCommand is `troupe sim`: it simulates a workload (a Google 2011
// trace, a generic CSV trace or a synthetic configuration) with batch and
// service schedulers in virtual time and prints the Omega measures as
// JSON, or runs an experiment (`troupe sim sweep NAME -out DIR`): see
// tools/sim/experiment, which parses the command's arguments itself, with
// Go's flag package (flags before arguments, one dash or two; -h lists
// them). A sweep's -runner or -compare store plays it against a real
// store (simStoreRunner), one run at a time. Ctrl-C stops it (with the
// CPU profile written).
// simMemoryLimit is troupe sim's soft memory limit unless GOMEMLIMIT is
// set (runtime/debug.SetMemoryLimit): a run whose live heap is larger
// still runs, its collector busier.
const simMemoryLimit = 700 << 20

func (a *app) simCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "sim [sweep NAME | redraw] [flags]",
		Short:              "Simulate schedulers on a trace or synthetic workload",
		Long:               "Simulate schedulers on a trace or synthetic workload. Its flags are its own: troupe sim -h lists them.",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if os.Getenv("GOGC") == "" {
				// A simulation's live heap is what runs, a few hundred MB
				// for a 10,000-machine cell; collecting at 5x it rather
				// than 2x takes 29% less CPU (2 h of the lightweight
				// workload: 12.9 s -> 9.2 s, 259 -> 567 MB).
				debug.SetGCPercent(400)
			}
			if os.Getenv("GOMEMLIMIT") == "" {
				// ... but a larger live heap would grow 5x too: the
				// whole Google sample's, up to 280 MB, to 1.4 GB. A
				// soft limit makes the collector work harder near it
				// instead: 730 MB of RSS, at the wall time of a 900 MB
				// limit (49 s).
				debug.SetMemoryLimit(simMemoryLimit)
			}
			err := experiment.Command{Name: "troupe sim", Stdout: a.out, Stderr: a.errOut, CPUProfile: bench.StartCPUProfile,
				Runners: map[string]experiment.CLIRunner{"store": {New: a.simStoreRunner, Exclusive: true}}}.Run(ctx, args)
			if errors.Is(err, flag.ErrHelp) {
				return nil // -h: the usage is printed
			}
			return err
		},
	}
}
