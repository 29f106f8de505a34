package experiment

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// DefaultConfig is the synthetic workload played when no other is given
// (a path from the repository's root).
const DefaultConfig = "deploy/sim/omega-cluster-c.yaml"

// WorkloadFlags pick a workload and how much of it is played.
type WorkloadFlags struct {
	Google, CSV, Config string
	// Machines is the cell's size for trace replay.
	Machines int
	// From and To window the jobs' submissions (To 0: no end); Compress
	// divides submit times and durations.
	From, To time.Duration
	Compress float64
	// CellScale multiplies a synthetic cell's machine counts.
	CellScale float64
}

// Register defines the flags on fs.
func (w *WorkloadFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&w.Google, "google", "", "replay the Google 2011 trace in this directory (job_events/, task_events/)")
	fs.StringVar(&w.CSV, "csv", "", "replay a generic CSV trace (see DESIGN.md, Simulator workloads)")
	fs.StringVar(&w.Config, "config", "", "generate a synthetic workload from this YAML file (default "+DefaultConfig+" if no trace is given)")
	fs.IntVar(&w.Machines, "machines", workload.DefaultGoogleOptions().Machines, "cell size for trace replay (the Google cell's machine mix)")
	fs.DurationVar(&w.From, "from", 0, "replay the jobs submitted from this time of the workload")
	fs.DurationVar(&w.To, "to", 0, "... until this time (0: the end)")
	fs.Float64Var(&w.Compress, "compress", 1, "divide submission times and durations by this factor")
	fs.Float64Var(&w.CellScale, "cell-scale", 1, "multiply a synthetic cell's machine counts by this factor (the jobs stay the same)")
}

// Workload is a cell and the jobs to play on it, as often as needed.
type Workload struct {
	// Desc says what the workload is, for reports.
	Desc string
	Cell []workload.Machine
	// Span is how long jobs are submitted for, as played (0: unknown,
	// an unwindowed trace).
	Span time.Duration
	// open returns a fresh source of the jobs for a seed.
	open func(seed uint64) (workload.Source, error)
}

// Source returns the workload's jobs for a run with seed: a synthetic
// workload is drawn anew from its config's seed + seed - 1 (seed 1 plays
// the config as written); a trace is the same for every seed.
func (w *Workload) Source(seed uint64) (workload.Source, error) { return w.open(seed) }

// Open reads the workload the flags name: a trace is read once and
// replayed from memory.
func (w WorkloadFlags) Open() (*Workload, error) {
	set := 0
	for _, s := range []string{w.Google, w.CSV, w.Config} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("give at most one of -google DIR, -csv FILE, -config FILE")
	}
	if w.CellScale != 1 && (w.Google != "" || w.CSV != "" || !(w.CellScale > 0)) {
		return nil, fmt.Errorf("-cell-scale %v: a positive factor, for a synthetic workload (-machines sizes a trace's cell)", w.CellScale)
	}
	if !(w.Compress > 0) || w.From < 0 || w.To < 0 || (w.To > 0 && w.To <= w.From) {
		return nil, fmt.Errorf("-from %v, -to %v, -compress %v: need 0 <= from < to (or to 0) and compress > 0", w.From, w.To, w.Compress)
	}
	gopts := workload.DefaultGoogleOptions()
	gopts.Machines = w.Machines
	out := &Workload{}
	var jobs []workload.Job
	switch {
	case w.Google != "":
		trace, err := workload.ReadGoogle2011(w.Google, gopts)
		if err != nil {
			return nil, err
		}
		out.Desc, out.Cell, jobs = "Google 2011 trace "+w.Google, workload.GoogleCell(gopts).Machines(), trace.Jobs
		out.Span = trace.Stats.End // the trace's last event
	case w.CSV != "":
		r, err := workload.OpenCSV(w.CSV)
		if err != nil {
			return nil, err
		}
		jobs, err = workload.Collect(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		out.Desc, out.Cell = "CSV trace "+w.CSV, workload.GoogleCell(gopts).Machines()
		for _, j := range jobs { // a CSV trace ends with its last submission
			out.Span = max(out.Span, j.Submit)
		}
	default:
		path := w.Config
		if path == "" {
			path = DefaultConfig
		}
		c, err := workload.LoadConfig(path)
		if err != nil {
			return nil, fmt.Errorf("%w (give -config, -google or -csv; the default is a path from the repository's root)", err)
		}
		out.Desc = "synthetic " + path
		if w.CellScale != 1 {
			for i := range c.Cell.Shapes {
				c.Cell.Shapes[i].Count = max(1, int(math.Round(float64(c.Cell.Shapes[i].Count)*w.CellScale)))
			}
			out.Desc += fmt.Sprintf(", its cell's machine counts × %v", w.CellScale)
		}
		if p := c.Prefill; p != nil {
			var targets []string
			for _, t := range []struct {
				what string
				v    float64
			}{{"CPU", p.CPUUtilisation}, {"memory", p.MemoryUtilisation}} {
				if t.v > 0 {
					targets = append(targets, fmt.Sprintf("%.4g%% of its %s", 100*t.v, t.what))
				}
			}
			out.Desc += ", its cell prefilled to " + strings.Join(targets, " or ")
		}
		out.Cell = c.Cell.Machines()
		out.Span = time.Duration(c.HorizonSeconds * float64(time.Second))
		out.open = func(seed uint64) (workload.Source, error) {
			c := c
			c.Seed += seed - 1
			return workload.NewGenerator(c)
		}
	}
	if out.open == nil {
		out.open = func(uint64) (workload.Source, error) { return workload.FromJobs(jobs), nil }
	}
	if w.To > 0 && (out.Span == 0 || w.To < out.Span) {
		out.Span = w.To
	}
	if out.Span > 0 {
		if w.From >= out.Span {
			return nil, fmt.Errorf("-from %v is past the workload's end, %v", w.From, out.Span)
		}
		out.Span = time.Duration(float64(out.Span-w.From) / w.Compress)
	}
	if w.From > 0 || w.To > 0 {
		end := "the end"
		if w.To > 0 {
			end = w.To.String()
		}
		out.Desc += fmt.Sprintf(", jobs submitted in [%v, %s)", w.From, end)
	}
	if w.Compress != 1 {
		out.Desc += fmt.Sprintf(", compressed %v×", w.Compress)
	}
	open := out.open
	out.open = func(seed uint64) (workload.Source, error) {
		src, err := open(seed)
		if err != nil {
			return nil, err
		}
		if w.From > 0 || w.To > 0 {
			src = workload.Window(src, w.From, w.To)
		}
		if w.Compress != 1 {
			return workload.Compress(src, w.Compress, w.Compress)
		}
		return src, nil
	}
	return out, nil
}
