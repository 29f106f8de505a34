package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// MemoryRunner is the name of InMemory among a Command's runners.
const MemoryRunner = "memory"

// Command is `troupe sim`: one simulation, its measures printed as JSON,
// or `sweep NAME`, an experiment written into a directory. A program
// that registers scheduler profiles of its own (profiles.Register) and
// runs a Command can simulate them with every flag of troupe sim.
type Command struct {
	// Name is how the user runs the command ("troupe sim"), for the
	// usage and the report's rerun line.
	Name           string
	Stdout, Stderr io.Writer
	// CPUProfile, if set, offers -cpuprofile: it starts a CPU profile
	// written to path and returns the function that stops it.
	CPUProfile func(path string) (stop func(), err error)
	// Runners are the runners -runner and -compare name, besides
	// MemoryRunner (InMemory).
	Runners map[string]CLIRunner
}

// CLIRunner is a runner a Command offers.
type CLIRunner struct {
	// New registers the runner's flags on the sweep's flag set and
	// returns the runner, which reads them when it runs.
	New       func(fs *flag.FlagSet) Runner
	Exclusive bool // see NamedRunner
}

// commonFlags are the flags of a single run and of a sweep.
type commonFlags struct {
	fs            *flag.FlagSet
	workload      WorkloadFlags
	params        Params
	conflict, txn string
	drain, quiet  bool
	seed          uint64
	cpuprofile    string
}

func (c Command) flagSet(name string, usage func(*flag.FlagSet)) (*flag.FlagSet, *commonFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() { usage(fs) }
	f := &commonFlags{fs: fs, params: DefaultParams()}
	f.workload.Register(fs)
	p := &f.params
	fs.IntVar(&p.Batch, "batch", p.Batch, "batch schedulers (they split the batch jobs by hash)")
	fs.IntVar(&p.Service, "service", p.Service, "service schedulers")
	kinds := strings.Join(profiles.Kinds(), ", ")
	fs.StringVar(&p.BatchProfile, "batch-profile", p.BatchProfile, "the batch schedulers' profile: "+kinds)
	fs.StringVar(&p.ServiceProfile, "service-profile", p.ServiceProfile, "the service schedulers' profile: "+kinds)
	fs.DurationVar(&p.BatchDecision.Job, "tjob-batch", p.BatchDecision.Job, "batch schedulers' decision time per job")
	fs.DurationVar(&p.BatchDecision.Task, "ttask-batch", p.BatchDecision.Task, "batch schedulers' decision time per task")
	fs.DurationVar(&p.ServiceDecision.Job, "tjob-service", p.ServiceDecision.Job, "service schedulers' decision time per job")
	fs.DurationVar(&p.ServiceDecision.Task, "ttask-service", p.ServiceDecision.Task, "service schedulers' decision time per task")
	fs.StringVar(&f.conflict, "conflict", "", "conflict detection of every scheduler: "+strings.Join(framework.ConflictModes(), ", ")+
		" (coarse: any change to the machine's allocation since the snapshot fails a claim; coarse-claims: only another claim, as Google's simulator) (default: each profile's own)")
	fs.StringVar(&f.txn, "txn", "", "transactions of every scheduler: "+strings.Join(framework.TxnModes(), ", ")+
		" (gang: nothing commits unless every task fits; atomic: what fits commits whole or not at all, as Google's all-or-nothing) (default: each profile's own)")
	fs.StringVar(&p.Policy, "policy", "", "a policy preset replacing -max-attempts, -abandon-after, -backoff and -max-backoff: "+
		strings.Join(scheduler.PolicyPresets(), ", ")+" (google: back of the queue after 1s, abandoned past 100 decisions with nothing placed or 1,000 in all)")
	fs.Float64Var(&p.BatchRate, "batch-rate", p.BatchRate, "multiply the batch jobs' arrival rate (the horizon is divided by it)")
	fs.IntVar(&p.MaxAttempts, "max-attempts", p.MaxAttempts, "decisions retried at once after conflicts before a job backs off")
	fs.IntVar(&p.AbandonAfter, "abandon-after", p.AbandonAfter, "decisions about a job before it is abandoned (0: never)")
	fs.DurationVar(&p.Backoff, "backoff", p.Backoff, "how long a job whose tasks fit nowhere first waits before it is tried again")
	fs.DurationVar(&p.MaxBackoff, "max-backoff", p.MaxBackoff, "the longest such wait, doubling from -backoff (0: the cell's default, a minute)")
	fs.DurationVar(&p.Horizon, "horizon", 0, "end each run after this much of the workload's time (default: when its submissions end, if known)")
	fs.BoolVar(&f.drain, "drain", false, "run until every task has ended, past the horizon")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr: no line per finished run of a sweep, and no progress line (there is one only when stderr is a terminal)")
	fs.DurationVar(&p.MTBF, "mtbf", 0, "machines fail after this mean time up (0: never) ...")
	fs.DurationVar(&p.Repair, "repair", time.Hour, "... and return after this mean repair time")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the schedulers' random choices (and of a synthetic workload: its config's seed + seed - 1)")
	if c.CPUProfile != nil {
		fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile to this file")
	}
	return fs, f
}

// status is the progress line on w, unless -quiet or w is no terminal.
func (f *commonFlags) status(w io.Writer) *status {
	if f.quiet || !isTerminal(w) {
		return nil
	}
	return newStatus(w, time.Now, 500*time.Millisecond)
}

// resolve opens the workload and completes the parameters.
func (f *commonFlags) resolve() (*Workload, Params, error) {
	p := f.params
	if f.conflict != "" {
		m, err := framework.ParseConflictMode(f.conflict)
		if err != nil {
			return nil, p, fmt.Errorf("-conflict: %w", err)
		}
		p.Conflict = &m
	}
	if f.txn != "" {
		m, err := framework.ParseTxnMode(f.txn)
		if err != nil {
			return nil, p, fmt.Errorf("-txn: %w", err)
		}
		p.Txn = &m
	}
	if p.Policy != "" && p.Policy != scheduler.DefaultPolicyName {
		var knobs []string
		f.fs.Visit(func(fl *flag.Flag) {
			if slices.Contains([]string{"max-attempts", "abandon-after", "backoff", "max-backoff"}, fl.Name) {
				knobs = append(knobs, "-"+fl.Name)
			}
		})
		if len(knobs) > 0 {
			return nil, p, fmt.Errorf("%s: not with -policy %s, which fixes the retry policy", strings.Join(knobs, ", "), p.Policy)
		}
	}
	w, err := f.workload.Open()
	if err != nil {
		return nil, p, err
	}
	switch {
	case f.drain:
		p.Horizon = 0
	case p.Horizon == 0:
		p.Horizon = w.Span
	}
	if err := p.Validate(); err != nil {
		return nil, p, err
	}
	return w, p, w.Check(p)
}

// Run runs the command with args (those after the command's name).
func (c Command) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "sweep" {
		return c.sweep(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "redraw" {
		return c.redraw(args[1:])
	}
	fs, f := c.flagSet(c.Name, func(fs *flag.FlagSet) {
		fmt.Fprintf(c.Stderr, "usage: %s [flags]: one simulation, its measures as JSON\n       %s sweep NAME -out DIR [flags]: an experiment (%s sweep -h)\n\n",
			c.Name, c.Name, c.Name)
		fmt.Fprintf(c.Stderr, "       %s redraw -in DIR [-out DIR]: a sweep's CSV files, plots and report again from its results.json\n\n", c.Name)
		fs.PrintDefaults()
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	w, p, err := f.resolve()
	if err != nil {
		return err
	}
	stop, err := c.startProfile(f.cpuprofile)
	if err != nil {
		return err
	}
	defer stop()
	run := Run{Seed: f.seed}
	start := time.Now()
	e := &Experiment{Workload: w, status: f.status(c.Stderr)}
	err = e.run(ctx, InMemory, Point{Params: p}, &run, 0)
	if e.status != nil {
		e.status.finish(0, "")
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "%s: %v of virtual time in %v\n", c.Name, seconds(run.Stats.DurationSeconds).Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
	enc := json.NewEncoder(c.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(run.Stats)
}

func (c Command) startProfile(path string) (func(), error) {
	if c.CPUProfile == nil || path == "" {
		return func() {}, nil
	}
	return c.CPUProfile(path)
}

// sweep runs `sweep NAME [flags]`.
func (c Command) sweep(ctx context.Context, args []string) error {
	usage := func(fs *flag.FlagSet) {
		fmt.Fprintf(c.Stderr, "usage: %s sweep NAME -out DIR [flags]\n\nsweeps:\n", c.Name)
		for _, s := range Sweeps() {
			fmt.Fprintf(c.Stderr, "  %s (%s: %s)\n      %s\n", s.Name, s.XLabel, joinFloats(s.XS), s.Doc)
		}
		fmt.Fprintln(c.Stderr, "\nflags:")
		fs.PrintDefaults()
	}
	fs, f := c.flagSet(c.Name+" sweep", usage)
	seeds := fs.Int("seeds", 3, "seeds per point")
	out := fs.String("out", "", "write the results, plots and report.md into this directory")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "runs at once")
	xs := fs.String("x", "", "comma-separated values to sweep instead of the sweep's own")
	runner := fs.String("runner", MemoryRunner, "the runner of every point: "+strings.Join(c.runnerNames(), ", "))
	compare := fs.String("compare", "", "a second runner whose results are compared with the first's")
	offered := map[string]NamedRunner{MemoryRunner: {Name: MemoryRunner, Run: InMemory}}
	for _, name := range slices.Sorted(maps.Keys(c.Runners)) {
		r := c.Runners[name]
		offered[name] = NamedRunner{Name: name, Run: r.New(fs), Exclusive: r.Exclusive}
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			usage(fs)
			return flag.ErrHelp
		}
		return fmt.Errorf("sweep: name the sweep first (%s)", strings.Join(SweepNames(), ", "))
	}
	sw, err := LookupSweep(args[0])
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("sweep: unexpected arguments %q", fs.Args())
	case *out == "":
		return errors.New("sweep: -out DIR is required")
	case *seeds < 1:
		return fmt.Errorf("sweep: -seeds %d: at least 1", *seeds)
	case *parallel < 1:
		return fmt.Errorf("sweep: -parallel %d: at least 1", *parallel)
	}
	e := &Experiment{Sweep: sw, Parallel: *parallel, Progress: c.Stderr, Provenance: provenance(),
		Command: c.Name + " sweep " + shellQuote(args), status: f.status(c.Stderr)}
	if f.quiet {
		e.Progress = nil
	}
	if *xs != "" {
		if e.XS, err = parseFloats(*xs); err != nil {
			return fmt.Errorf("sweep: -x: %w", err)
		}
	}
	for _, name := range []string{*runner, *compare} {
		if name == "" {
			continue
		}
		r, ok := offered[name]
		if !ok {
			return fmt.Errorf("sweep: no runner %q (runners: %s)", name, strings.Join(c.runnerNames(), ", "))
		}
		e.Runners = append(e.Runners, r)
	}
	if *compare == *runner {
		return fmt.Errorf("sweep: -compare %s is the runner itself", *compare)
	}
	if e.Workload, e.Base, err = f.resolve(); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for i := range *seeds {
		e.Seeds = append(e.Seeds, f.seed+uint64(i))
	}
	stop, err := c.startProfile(f.cpuprofile)
	if err != nil {
		return err
	}
	defer stop()
	start := time.Now()
	res, err := e.Run(ctx)
	if err != nil {
		return err
	}
	if err := res.Write(*out); err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "%s: %d runs in %v; report in %s/%s\n", sw.Name, len(res.Runs), time.Since(start).Round(time.Millisecond), *out, ReportMD)
	return nil
}

func (c Command) runnerNames() []string {
	return append([]string{MemoryRunner}, slices.Sorted(maps.Keys(c.Runners))...)
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, x)
	}
	return out, nil
}

func joinFloats(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, formatFloat(x))
	}
	return strings.Join(out, ",")
}

// shellSafe are the characters a shell word may have unquoted.
const shellSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@%"

// shellQuote joins args as a shell reads them back.
func shellQuote(args []string) string {
	var out []string
	for _, a := range args {
		if a == "" || strings.Trim(a, shellSafe) != "" {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// provenance says which commit and Go made the results, if git answers.
func provenance() string {
	p := runtime.Version()
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return p
	}
	p = "commit " + strings.TrimSpace(string(rev)) + ", " + p
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		p += " (with uncommitted changes in the work tree)"
	}
	return p
}

// redraw is `redraw -in DIR [-out DIR]`: a sweep's CSV files, plots and
// report written again from its results.json (Load, Results.Redraw).
func (c Command) redraw(args []string) error {
	fs := flag.NewFlagSet(c.Name+" redraw", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	in := fs.String("in", "", "directory of a sweep's results (its results.json); comma-separated, the same sweep run several ways, drawn together (-series)")
	names := fs.String("series", "", "with several -in directories: the name of each one's series, comma-separated")
	out := fs.String("out", "", "directory to write into (default: -in, which must then be one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dirs := strings.Split(*in, ",")
	switch {
	case *in == "" || fs.NArg() > 0:
		return fmt.Errorf("%s redraw: want -in DIR [-out DIR], got %q", c.Name, args)
	case len(dirs) > 1 && (*out == "" || len(strings.Split(*names, ",")) != len(dirs)):
		return fmt.Errorf("%s redraw: %d -in directories need -out and as many -series names", c.Name, len(dirs))
	case len(dirs) == 1 && *names != "":
		return fmt.Errorf("%s redraw: -series is for several -in directories", c.Name)
	}
	if *out == "" {
		*out = *in
	}
	var all []*Results
	for _, dir := range dirs {
		r, err := Load(dir)
		if err != nil {
			return err
		}
		all = append(all, r)
	}
	res := all[0]
	if len(all) > 1 {
		var err error
		if res, err = Merge(all, strings.Split(*names, ",")); err != nil {
			return err
		}
	}
	if err := res.Redraw(*out); err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "%s redraw: report in %s\n", c.Name, filepath.Join(*out, ReportMD))
	return nil
}
