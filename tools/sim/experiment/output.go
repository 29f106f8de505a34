package experiment

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/troupe-cluster/troupe/tools/sim"
)

// Files written by Write besides the plots. Every file but Timings is
// the same however many runs went at once.
const (
	ResultsJSON   = "results.json"   // Results: parameters, every run's stats and roles, the summary
	RunsCSV       = "runs.csv"       // a row per runner, point, seed and role
	SchedulersCSV = "schedulers.csv" // a row per runner, point, seed and scheduler
	SummaryCSV    = "summary.csv"    // a row per runner, point and role: mean and sd over seeds
	TimingsCSV    = "timings.csv"    // a row per run: wall-clock seconds
	ReportMD      = "report.md"
)

// Load reads the results an experiment wrote into dir (its ResultsJSON).
// The runs' wall-clock times are not in it.
func Load(dir string) (*Results, error) {
	b, err := os.ReadFile(filepath.Join(dir, ResultsJSON))
	if err != nil {
		return nil, err
	}
	res := &Results{}
	if err := json.Unmarshal(b, res); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ResultsJSON), err)
	}
	return res, nil
}

// Redraw writes into dir what Write does but the timings, from results
// read back by Load: the CSV files, the plots and the report, say after
// a change to how they are drawn, without running the experiment again.
func (res *Results) Redraw(dir string) error { return res.write(dir, false) }

// Write writes the results into dir (created if need be): the JSON and
// CSV files, the plots and the report.
func (res *Results) Write(dir string) error { return res.write(dir, true) }

func (res *Results) write(dir string, timings bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsJSON), append(b, '\n'), 0o644); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		rows func() [][]string
	}{{RunsCSV, res.runRows}, {SchedulersCSV, res.schedulerRows}, {SummaryCSV, res.summaryRows}, {TimingsCSV, res.timingRows}} {
		if f.name == TimingsCSV && !timings {
			continue
		}
		if err := writeCSV(filepath.Join(dir, f.name), f.rows()); err != nil {
			return err
		}
	}
	if err := res.plot(dir); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ReportMD), []byte(res.report()), 0o644)
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runColumns name a run's point: runner, point index, series, x, seed.
var runColumns = []string{"runner", "point", "series", "x", "seed"}

func (res *Results) runCells(run Run) []string {
	p := res.Points[run.Point]
	return []string{run.Runner, strconv.Itoa(run.Point), p.Series, formatFloat(p.X), strconv.FormatUint(run.Seed, 10)}
}

func metricNames(suffixes ...string) []string {
	var out []string
	for _, m := range metrics {
		for _, s := range suffixes {
			out = append(out, m.name+s)
		}
	}
	return out
}

func (res *Results) runRows() [][]string {
	rows := [][]string{slices.Concat(runColumns, []string{"role", "schedulers"}, metricNames(""))}
	for _, run := range res.Runs {
		for _, rv := range run.Roles {
			row := append(res.runCells(run), rv.Role, strconv.Itoa(rv.Schedulers))
			for _, m := range metrics {
				row = append(row, formatFloat(rv.Values[m.name]))
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func (res *Results) schedulerRows() [][]string {
	rows := [][]string{slices.Concat(runColumns, []string{"scheduler"}, metricNames(""))}
	for _, run := range res.Runs {
		for _, s := range run.Stats.Schedulers {
			row := append(res.runCells(run), s.Name)
			for _, m := range metrics {
				row = append(row, formatFloat(m.of([]sim.SchedulerStats{s}, run.Stats)))
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func (res *Results) summaryRows() [][]string {
	rows := [][]string{append([]string{"runner", "point", "series", "x", "role", "seeds"}, metricNames("_mean", "_sd")...)}
	for _, s := range res.Summary {
		row := []string{s.Runner, strconv.Itoa(s.Point), s.Series, formatFloat(s.X), s.Role, strconv.Itoa(s.Seeds)}
		for _, m := range metrics {
			row = append(row, formatFloat(s.Mean[m.name]), formatFloat(s.SD[m.name]))
		}
		rows = append(rows, row)
	}
	return rows
}

func (res *Results) timingRows() [][]string {
	rows := [][]string{slices.Concat(runColumns, []string{"wall_seconds"})}
	for _, run := range res.Runs {
		rows = append(rows, append(res.runCells(run), formatFloat(run.Wall.Seconds())))
	}
	return rows
}
