package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/troupe-cluster/troupe/tools/bench"
	"github.com/troupe-cluster/troupe/tools/sim/experiment"
)

// runSim simulates a workload (a Google 2011 trace, a generic CSV trace or
// a synthetic configuration) with batch and service schedulers in
// virtual time and prints the Omega measures as JSON, or runs an
// experiment (`troupe sim sweep NAME -out DIR`): see tools/sim/experiment.
// A sweep's -runner or -compare store plays it against a real store
// (simStoreRunner), one run at a time. Ctrl-C stops it (with the CPU
// profile written).
func runSim(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return experiment.Command{Name: "troupe sim", Stdout: os.Stdout, Stderr: os.Stderr, CPUProfile: bench.StartCPUProfile,
		Runners: map[string]experiment.CLIRunner{"store": {New: simStoreRunner, Exclusive: true}}}.Run(ctx, args)
}
