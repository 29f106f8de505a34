package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/tools/bench"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// runSim simulates a workload (a Google 2011 trace, a generic CSV trace or
// a synthetic configuration) with batch and service schedulers in
// virtual time, and prints the Omega measures as JSON.
func runSim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	google := fs.String("google", "", "replay the Google 2011 trace in this directory (job_events/, task_events/)")
	csvPath := fs.String("csv", "", "replay a generic CSV trace (see DESIGN.md, Simulator workloads)")
	config := fs.String("config", "", "generate a synthetic workload from this YAML file (e.g. deploy/sim/omega-cluster-c.yaml)")
	machines := fs.Int("machines", workload.DefaultGoogleOptions().Machines, "cell size for trace replay (the Google cell's machine mix)")
	from := fs.Duration("from", 0, "replay the jobs submitted from this time of the trace")
	to := fs.Duration("to", 0, "... until this time (0: the end)")
	compress := fs.Float64("compress", 1, "divide submission times and durations by this factor")
	batch := fs.Int("batch", 1, "batch schedulers (they split the batch jobs by hash)")
	service := fs.Int("service", 1, "service schedulers")
	conflict := fs.String("conflict", "fine", "conflict detection: fine or coarse")
	tjobBatch := fs.Duration("tjob-batch", framework.DefaultDecisionTime.Job, "batch schedulers' decision time per job")
	ttaskBatch := fs.Duration("ttask-batch", framework.DefaultDecisionTime.Task, "batch schedulers' decision time per task")
	tjobService := fs.Duration("tjob-service", framework.DefaultDecisionTime.Job, "service schedulers' decision time per job")
	ttaskService := fs.Duration("ttask-service", framework.DefaultDecisionTime.Task, "service schedulers' decision time per task")
	attempts := fs.Int("max-attempts", 1000, "decisions about a job before it is abandoned")
	seed := fs.Uint64("seed", 1, "seed of the schedulers' random choices")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stopProfile, err := bench.StartCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if fs.NArg() > 0 {
		return fmt.Errorf("sim: unexpected arguments %q", fs.Args())
	}
	modes := framework.Modes{}
	switch *conflict {
	case "fine":
	case "coarse":
		modes.Conflict = framework.Coarse
	default:
		return fmt.Errorf("sim: -conflict is fine or coarse, not %q", *conflict)
	}
	cell, src, err := simWorkload(*google, *csvPath, *config, *machines)
	if err != nil {
		return err
	}
	if *from > 0 || *to > 0 {
		src = workload.Window(src, *from, *to)
	}
	if *compress != 1 {
		if src, err = workload.Compress(src, *compress, *compress); err != nil {
			return err
		}
	}
	cfg := sim.Config{Machines: cell, MaxAttempts: *attempts, Backoff: 10 * time.Second, Seed: *seed}
	for i := range *batch {
		cfg.Schedulers = append(cfg.Schedulers, sim.SchedulerConfig{Name: fmt.Sprintf("batch-%d", i), Kind: profiles.Batch, Serves: workload.Batch,
			Modes: &modes, Decision: framework.DecisionTime{Job: *tjobBatch, Task: *ttaskBatch}})
	}
	for i := range *service {
		cfg.Schedulers = append(cfg.Schedulers, sim.SchedulerConfig{Name: fmt.Sprintf("service-%d", i), Kind: profiles.Service, Serves: workload.Service,
			Modes: &modes, Decision: framework.DecisionTime{Job: *tjobService, Task: *ttaskService}})
	}
	start := time.Now()
	s, err := sim.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := s.Run(ctx, src)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "troupe sim: %v of virtual time in %v\n", st.Duration, time.Since(start).Round(time.Millisecond))
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}

// simWorkload opens the workload the flags name, with its cell.
func simWorkload(google, csvPath, config string, machines int) ([]workload.Machine, workload.Source, error) {
	set := 0
	for _, s := range []string{google, csvPath, config} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return nil, nil, errors.New("sim: give one of -google DIR, -csv FILE, -config FILE")
	}
	gopts := workload.DefaultGoogleOptions()
	gopts.Machines = machines
	switch {
	case google != "":
		trace, err := workload.ReadGoogle2011(google, gopts)
		if err != nil {
			return nil, nil, err
		}
		return workload.GoogleCell(gopts).Machines(), workload.FromJobs(trace.Jobs), nil
	case csvPath != "":
		r, err := workload.OpenCSV(csvPath)
		if err != nil {
			return nil, nil, err
		}
		return workload.GoogleCell(gopts).Machines(), r, nil
	default:
		c, err := workload.LoadConfig(config)
		if err != nil {
			return nil, nil, err
		}
		g, err := workload.NewGenerator(c)
		if err != nil {
			return nil, nil, err
		}
		return c.Cell.Machines(), g, nil
	}
}
