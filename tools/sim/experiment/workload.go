package experiment

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
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
	// Cell is a YAML file whose cell: section is a trace's cell (""
	// for a trace: the Google 2011 mix of Machines machines).
	Cell string
	// Machines is the cell's size for trace replay.
	Machines int
	// From and To window the jobs' submissions (To 0: no end); Compress
	// divides submit times and durations. A trace's window starts with
	// the tasks running at From (Google) and its clock at From.
	From, To time.Duration
	Compress float64
	// CellScale multiplies a synthetic cell's machine counts.
	CellScale float64
	// Log, if set, gets what Open finds: a trace's report and the
	// warnings (Register sets it to the flag set's output).
	Log io.Writer
}

// Register defines the flags on fs.
func (w *WorkloadFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&w.Google, "google", "", "replay the Google 2011 trace in this directory (job_events/, task_events/)")
	fs.StringVar(&w.CSV, "csv", "", "replay a generic CSV trace (see DESIGN.md, Simulator workloads)")
	fs.StringVar(&w.Config, "config", "", "generate a synthetic workload from this YAML file (default "+DefaultConfig+" if no trace is given)")
	fs.StringVar(&w.Cell, "cell", "", "replay a trace on the cell of this YAML file's cell: section, as a synthetic config's (default: the Google 2011 mix of -machines machines)")
	fs.IntVar(&w.Machines, "machines", workload.DefaultGoogleOptions().Machines, "cell size for trace replay without -cell (the Google cell's machine mix)")
	fs.DurationVar(&w.From, "from", 0, "replay the jobs submitted from this time of the workload (a trace's: the tasks running then are placed first, and the clock starts there; default: its first event)")
	fs.DurationVar(&w.To, "to", 0, "... until this time (0: the end)")
	fs.Float64Var(&w.Compress, "compress", 1, "divide submission times and durations by this factor")
	fs.Float64Var(&w.CellScale, "cell-scale", 1, "multiply a synthetic cell's machine counts by this factor (the jobs stay the same)")
	if w.Log == nil {
		w.Log = fs.Output()
	}
}

// Workload is a cell and the jobs to play on it, as often as needed.
type Workload struct {
	// Desc says what the workload is, for reports.
	Desc string
	Cell []workload.Machine
	// Span is how long jobs are submitted for, as played (0: unknown,
	// an unwindowed trace).
	Span time.Duration
	// Report says what a trace's reading found and what is replayed
	// (nil for a synthetic workload); each source has it too
	// (workload.ReportOf).
	Report *workload.Report
	// Warnings are what Open found that a run may not do as meant, also
	// written to the flags' Log.
	Warnings []string
	// types are the workload's jobs by type, for Check.
	types [2]typeCount
	// open returns a fresh source of the jobs for a seed.
	open func(seed uint64) (workload.Source, error)
}

// typeCount is how many jobs of one type a workload has, and the first
// (of a synthetic workload: its classes of the type).
type typeCount struct {
	jobs  int
	first string
}

// Source returns the workload's jobs for a run with seed: a synthetic
// workload is drawn anew from its config's seed + seed - 1 (seed 1 plays
// the config as written); a trace is the same for every seed.
func (w *Workload) Source(seed uint64) (workload.Source, error) { return w.open(seed) }

// Check reports a job type of the workload that p has no scheduler for
// (-service 0 with service jobs): such a run would fail at the first of
// them. Run it on each point's parameters before running it.
func (w *Workload) Check(p Params) error {
	for _, t := range []struct {
		typ workload.Type
		n   int
	}{{workload.Batch, p.Batch}, {workload.Service, p.Service}} {
		if c := w.types[t.typ]; c.jobs > 0 && t.n == 0 {
			return fmt.Errorf("-%s 0: no scheduler would serve the workload's %s jobs, %s (the first: %s); give -%s 1 or more",
				t.typ, t.typ, countOf(c.jobs, w.Report == nil), c.first, t.typ)
		}
	}
	return nil
}

func countOf(n int, classes bool) string {
	if classes {
		return fmt.Sprintf("of %d class(es)", n)
	}
	return fmt.Sprintf("%d of them", n)
}

// Open reads the workload the flags name: a trace is read once and
// replayed from memory. What it finds is checked now, before any run:
// a window outside a trace or without events is an error; tasks that
// fit no machine of the cell, and tasks running at a trace window's
// start that the cell cannot hold, are warnings.
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
	trace := w.Google != "" || w.CSV != ""
	if w.CellScale != 1 && (trace || !(w.CellScale > 0)) {
		return nil, fmt.Errorf("-cell-scale %v: a positive factor, for a synthetic workload (-machines or -cell gives a trace's cell)", w.CellScale)
	}
	if w.Cell != "" && !trace {
		return nil, fmt.Errorf("-cell %s: for a trace (-google, -csv); a synthetic config has its cell: section", w.Cell)
	}
	if !(w.Compress > 0) || w.From < 0 || w.To < 0 || (w.To > 0 && w.To <= w.From) {
		return nil, fmt.Errorf("-from %v, -to %v, -compress %v: need 0 <= from < to (or to 0) and compress > 0", w.From, w.To, w.Compress)
	}
	out := &Workload{}
	var err error
	if trace {
		err = w.openTrace(out)
	} else {
		err = w.openConfig(out)
	}
	if err != nil {
		return nil, err
	}
	if w.Compress != 1 {
		out.Desc += fmt.Sprintf(", compressed %v×", w.Compress)
		out.Span = time.Duration(float64(out.Span) / w.Compress)
	}
	open := out.open
	out.open = func(seed uint64) (workload.Source, error) {
		src, err := open(seed)
		if err != nil || w.Compress == 1 {
			return src, err
		}
		return workload.Compress(src, w.Compress, w.Compress)
	}
	if w.Log != nil {
		if out.Report != nil {
			fmt.Fprint(w.Log, out.Report.String())
		}
		for _, s := range out.Warnings {
			fmt.Fprintf(w.Log, "warning: %s\n", s)
		}
	}
	return out, nil
}

// openTrace reads a Google or CSV trace through the window.
func (w WorkloadFlags) openTrace(out *Workload) error {
	gopts := workload.DefaultGoogleOptions()
	gopts.Machines, gopts.From, gopts.To = w.Machines, w.From, w.To
	cell := workload.GoogleCell(gopts)
	cellDesc := fmt.Sprintf(", on the Google 2011 mix of %d machines", w.Machines)
	if w.Cell != "" {
		var err error
		if cell, err = workload.LoadCell(w.Cell); err != nil {
			return fmt.Errorf("-cell: %w", err)
		}
		cellDesc = ", on the cell of " + w.Cell
		gopts.Machines = len(cell.Machines()) // not read: the cell is given
	} else if err := gopts.Validate(); err != nil {
		return fmt.Errorf("-machines %d: %w", w.Machines, err)
	}
	var tr *workload.Trace
	if w.Google != "" {
		g, err := workload.ReadGoogle2011(w.Google, gopts)
		if err != nil {
			return windowErr(w, err)
		}
		tr, out.Desc = &g.Trace, "Google 2011 trace "+w.Google
	} else {
		var err error
		if tr, err = workload.ReadCSV(w.CSV, w.From, w.To); err != nil {
			return windowErr(w, err)
		}
		out.Desc = "CSV trace " + w.CSV
		if w.Cell == "" {
			out.Warnings = append(out.Warnings, fmt.Sprintf("a CSV trace on the Google 2011 cell's mix of -machines %d: give its own cell with -cell FILE.yaml", w.Machines))
		}
	}
	out.Cell, out.Report = cell.Machines(), &tr.Report
	out.open = func(uint64) (workload.Source, error) { return tr.Source(), nil }
	rep := tr.Report
	// A Google trace runs until its last event, a CSV trace until its
	// last submission; the clock starts at the window.
	end := rep.Last
	if w.To > 0 && w.To < end {
		end = w.To
	}
	out.Span = end - rep.From
	if rep.From > 0 || w.To > 0 {
		out.Desc += fmt.Sprintf(", window [%v, %s) played from 0", rep.From, orEnd(w.To))
	}
	if rep.RunningTasks > 0 {
		out.Desc += fmt.Sprintf(", its %d tasks running at the start placed first", rep.RunningTasks)
	}
	out.Desc += cellDesc
	out.scan(tr.Running, tr.Jobs)
	return nil
}

func windowErr(w WorkloadFlags, err error) error {
	if errors.Is(err, workload.ErrWindow) {
		return fmt.Errorf("-from %v, -to %s: %w", w.From, orEnd(w.To), err)
	}
	return err
}

func orEnd(to time.Duration) string {
	if to > 0 {
		return to.String()
	}
	return "the end"
}

// scan goes once over a trace's jobs, those running at the start first:
// their types, the tasks that fit no machine of the cell, and whether
// the cell can hold the running ones.
func (out *Workload) scan(running, jobs []workload.Job) {
	type shape struct {
		cpu, memory int64
		labels      map[string]string
	}
	var shapes []shape
	var cpuTotal, memTotal, cpuMax, memMax int64
	for _, m := range out.Cell {
		cpuTotal += m.CPU
		memTotal += m.Memory
		cpuMax, memMax = max(cpuMax, m.CPU), max(memMax, m.Memory)
		if !slices.ContainsFunc(shapes, func(s shape) bool { return s.cpu == m.CPU && s.memory == m.Memory && equalLabels(s.labels, m.Labels) }) {
			shapes = append(shapes, shape{m.CPU, m.Memory, m.Labels})
		}
	}
	fits := func(j *workload.Job, t workload.Task) bool {
		return slices.ContainsFunc(shapes, func(s shape) bool {
			return s.cpu >= t.CPU && s.memory >= t.Memory && selects(s.labels, j.MatchLabels)
		})
	}
	var unfit, unfitJobs int
	var worst string
	var worstSize float64
	var runCPU, runMem int64
	for k, list := range [][]workload.Job{running, jobs} {
		for i := range list {
			j := &list[i]
			if c := &out.types[j.Type]; c.jobs == 0 {
				c.first = fmt.Sprintf("job %s at %v", j.ID, j.Submit)
				if k == 0 {
					c.first = fmt.Sprintf("job %s, running at the start", j.ID)
				}
			}
			out.types[j.Type].jobs++
			jobUnfit := false
			for _, t := range j.Tasks {
				if k == 0 {
					runCPU += t.CPU
					runMem += t.Memory
				}
				if fits(j, t) {
					continue
				}
				unfit++
				jobUnfit = true
				if size := max(float64(t.CPU)/float64(cpuMax), float64(t.Memory)/float64(memMax)); size > worstSize || worst == "" {
					worstSize = size
					worst = fmt.Sprintf("job %s task %d, %v cores and %.4g GiB", j.ID, t.Index, float64(t.CPU)/1000, float64(t.Memory)/(1<<30))
					if len(j.MatchLabels) > 0 {
						worst += fmt.Sprintf(" on machines labelled %v", j.MatchLabels)
					}
				}
			}
			if jobUnfit {
				unfitJobs++
			}
		}
	}
	if unfit > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d tasks of %d jobs fit no machine of the cell (the largest machine: %v cores, %.4g GiB) and will never be placed; the largest: %s",
			unfit, unfitJobs, float64(cpuMax)/1000, float64(memMax)/(1<<30), worst))
	}
	if cpu, mem := float64(runCPU)/float64(cpuTotal), float64(runMem)/float64(memTotal); cpu > 1 || mem > 1 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("the tasks running at the window's start request %.0f%% of the cell's CPU and %.0f%% of its memory: those that do not fit are left out (the prefill's tasks_not_placed); a larger cell (-machines, -cell) holds them",
			100*cpu, 100*mem))
	}
}

func equalLabels(a, b map[string]string) bool {
	return len(a) == len(b) && selects(a, b)
}

// selects reports whether labels has every key and value of want.
func selects(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// openConfig loads a synthetic workload, windowed by Window.
func (w WorkloadFlags) openConfig(out *Workload) error {
	path := w.Config
	if path == "" {
		path = DefaultConfig
	}
	c, err := workload.LoadConfig(path)
	if err != nil {
		return fmt.Errorf("%w (give -config, -google or -csv; the default is a path from the repository's root)", err)
	}
	out.Desc = "synthetic " + path
	if w.CellScale != 1 {
		for i := range c.Cell.Shapes {
			c.Cell.Shapes[i].Count = max(1, int(math.Round(float64(c.Cell.Shapes[i].Count)*w.CellScale)))
		}
		out.Desc += fmt.Sprintf(", its cell's machine counts × %v", w.CellScale)
	}
	for _, cl := range c.Classes {
		typ, err := workload.ParseType(cl.Type)
		if err != nil {
			return err // validated
		}
		if t := &out.types[typ]; t.jobs == 0 {
			t.first = fmt.Sprintf("class %s's %s-1", cl.Name, cl.Name)
		}
		out.types[typ].jobs++
	}
	if p := c.Prefill; p != nil {
		// The prefill's jobs are its type's, or its like class's, or
		// services; a scheduler must serve them too.
		typ := p.Type
		for _, cl := range c.Classes {
			if typ == "" && cl.Name == p.Like {
				typ = cl.Type
			}
		}
		if typ == "" {
			typ = workload.Service.String()
		}
		if t, err := workload.ParseType(typ); err == nil {
			if out.types[t].jobs == 0 {
				out.types[t].first = "the prefill's prefill-1"
			}
			out.types[t].jobs++
		}
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
	if w.To > 0 && w.To < out.Span {
		out.Span = w.To
	}
	if w.From >= out.Span {
		return fmt.Errorf("-from %v is past the workload's end, %v", w.From, out.Span)
	}
	out.Span -= w.From
	if w.From > 0 || w.To > 0 {
		out.Desc += fmt.Sprintf(", jobs submitted in [%v, %s)", w.From, orEnd(w.To))
	}
	out.open = func(seed uint64) (workload.Source, error) {
		c := c
		c.Seed += seed - 1
		g, err := workload.NewGenerator(c)
		switch {
		case err != nil:
			return nil, err
		case w.From == 0 && w.To == 0:
			return g, nil
		}
		return workload.Window(g, w.From, w.To), nil
	}
	return nil
}
