package experiment

import (
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// chart is one plot: a metric against the swept value, a line per
// runner, series and role.
type chart struct {
	file, title, metric string
	// low and high, if set, are the metrics at the ends of the error
	// bars; otherwise the bars are ± one standard deviation over seeds.
	low, high string
	// bars says what the error bars show, for the report.
	bars string
}

var charts = []chart{
	{file: "busyness", title: "Scheduler busyness (median day)", metric: "busyness_daily_median_fraction"},
	{file: "busyness-hourly", title: "Scheduler busyness (hours)", metric: "busyness_hourly_median_fraction",
		low: "busyness_hourly_p10_fraction", high: "busyness_hourly_p90_fraction",
		bars: "the median hour's busyness, mean over seeds; bars from the 10th to the 90th percentile hour, mean over seeds"},
	{file: "busyness-transactions", title: "Scheduler busyness in transactions (median day)",
		metric: "transaction_busyness_daily_median_fraction"},
	{file: "conflict-fraction", title: "Conflict fraction", metric: "conflict_fraction"},
	{file: "conflicted-placements", title: "Conflicted placements per placement", metric: "conflicted_placements_per_placement"},
	{file: "wait-mean", title: "Job wait until the first decision, mean", metric: "wait_mean_seconds"},
	{file: "wait-median", title: "Job wait until the first decision, median", metric: "wait_median_seconds"},
	{file: "wait-p90", title: "Job wait until the first decision, 90th percentile", metric: "wait_p90_seconds"},
	{file: "wait-placed-p90", title: "Job wait until every task is placed, 90th percentile", metric: "wait_until_placed_p90_seconds"},
	{file: "unscheduled", title: "Jobs unscheduled at the end", metric: "unscheduled_fraction"},
	{file: "utilisation", title: "Cell CPU allocated", metric: "cpu_allocated_fraction"},
}

// sdBars is what error bars show unless a chart says otherwise.
const sdBars = "mean over seeds; bars ± one standard deviation"

// metricLabel returns the axis label of metric name.
func metricLabel(name string) string {
	for _, m := range metrics {
		if m.name == name {
			return m.label
		}
	}
	return name
}

// line is the summaries of one runner, series and role, by x. Its
// colour and glyph follow its runner and series, its dashes its role
// and runner.
type line struct {
	label        string
	colour, dash int
	points       []Summary
}

// lines groups res.Summary into lines, in order of first appearance.
func (res *Results) lines() []line {
	var out []line
	index := map[string]int{}
	colours := map[[2]string]int{}
	for _, s := range res.Summary {
		colour, ok := colours[[2]string{s.Runner, s.Series}]
		if !ok {
			colour = len(colours)
			colours[[2]string{s.Runner, s.Series}] = colour
		}
		var parts []string
		if len(res.Runners) > 1 {
			parts = append(parts, s.Runner)
		}
		parts = append(parts, s.Series, s.Role)
		label := strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), " ")
		i, ok := index[label]
		if !ok {
			i = len(out)
			index[label] = i
			dash := 2*slices.Index(res.Runners, s.Runner) + slices.Index([]string{"batch", "service"}, s.Role)
			out = append(out, line{label: label, colour: colour, dash: dash})
		}
		out[i].points = append(out[i].points, s)
	}
	for _, l := range out {
		slices.SortStableFunc(l.points, func(a, b Summary) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
	}
	return out
}

// errorPoints are a line's points with their error bars.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

// plot draws every chart into dir as PNG and SVG.
func (res *Results) plot(dir string) error {
	lines := res.lines()
	var ticks []plot.Tick
	for _, x := range res.XS {
		ticks = append(ticks, plot.Tick{Value: x, Label: formatFloat(x)})
	}
	for _, c := range charts {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = res.XLabel
		p.Y.Label.Text = metricLabel(c.metric)
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		if res.LogX {
			// Padded by a factor: a log axis cannot reach 0, where
			// gonum would widen a range of one point.
			p.X.Scale = plot.LogScale{}
			p.X.Min, p.X.Max = slices.Min(res.XS)/1.5, slices.Max(res.XS)*1.5
		}
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		var top float64
		for _, l := range lines {
			pts := errorPoints{XYs: make(plotter.XYs, len(l.points)), YErrors: make(plotter.YErrors, len(l.points))}
			for j, s := range l.points {
				y := s.Mean[c.metric]
				pts.XYs[j] = plotter.XY{X: s.X, Y: y}
				if c.low != "" {
					pts.YErrors[j].Low, pts.YErrors[j].High = y-s.Mean[c.low], s.Mean[c.high]-y
				} else {
					// Every measure is >= 0: so is the bar.
					pts.YErrors[j].Low, pts.YErrors[j].High = min(s.SD[c.metric], y), s.SD[c.metric]
				}
				top = max(top, y+pts.YErrors[j].High)
			}
			ln, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return err
			}
			ln.Color, sc.Color, bars.Color = plotutil.Color(l.colour), plotutil.Color(l.colour), plotutil.Color(l.colour)
			ln.Dashes = plotutil.Dashes(l.dash)
			sc.Shape = plotutil.Shape(l.colour)
			p.Add(ln, sc, bars)
			p.Legend.Add(l.label, ln, sc)
		}
		// Room above the data for the legend, a line per entry.
		p.Y.Max = max(top, 1e-9) * (1 + 0.09*float64(len(lines)))
		for _, ext := range []string{".png", ".svg"} {
			if err := p.Save(6*vg.Inch, 4*vg.Inch, filepath.Join(dir, c.file+ext)); err != nil {
				return err
			}
		}
	}
	return nil
}
