package experiment

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// tableMetrics are the report's table columns, with their headers.
var tableMetrics = []struct{ name, header string }{
	{"busyness_daily_median_fraction", "busy (day) [p10, p90 hour]"},
	{"transaction_busyness_daily_median_fraction", "busy in transactions (day)"},
	{"conflict_fraction", "conflict fraction"},
	{"conflicted_placements_per_placement", "conflicts per placement"},
	{"wait_mean_seconds", "wait mean [s]"},
	{"wait_median_seconds", "wait median [s]"},
	{"wait_p90_seconds", "wait p90 [s]"},
	{"wait_until_placed_p90_seconds", "until placed p90 [s]"},
	{"unscheduled_fraction", "unscheduled (of jobs)"},
	{"abandoned_jobs", "abandoned jobs"},
	{"placements", "placements"},
	{"cpu_allocated_fraction", "CPU allocated"},
}

// compareMetrics are compared between two runners.
var compareMetrics = []string{"busyness_daily_median_fraction", "conflict_fraction", "conflicted_placements_per_placement",
	"wait_median_seconds", "unscheduled_fraction", "placements"}

// report returns report.md: what was run and how to rerun it, the plots,
// a table of the summary and, with two runners, their comparison.
func (res *Results) report() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# %s: %s\n\n%s\n\n", res.Sweep, res.Title, res.Doc)
	w("## Rerun\n\n```sh\n%s\n```\n\n", res.Command)
	if res.Provenance != "" {
		w("Made by %s.\n\n", res.Provenance)
	}
	w("## Setup\n\n| parameter | value |\n|---|---|\n")
	for _, kv := range res.setup() {
		w("| %s | %s |\n", kv[0], kv[1])
	}
	w("\n## Results\n\nEach point is the mean over %d seeds (%s).\n\n", len(res.Seeds), joinSeeds(res.Seeds))
	for _, c := range charts {
		bars := c.bars
		if bars == "" {
			bars = sdBars
		}
		w("### %s\n\n![%s](%s.png)\n\n%s against %s: %s. [SVG](%s.svg)\n\n", c.title, c.title, c.file, metricLabel(c.metric), res.XLabel, bars, c.file)
	}
	w("### Table (%s)\n\nMean ± standard deviation over seeds. Busy: the fraction of time deciding, the median day's (the "+
		"Omega paper's; for a run shorter than a day, the whole run's), then [10th, 90th percentile hour]; in transactions, "+
		"counting only the decisions that committed claims (Google's simulator's). Conflict fraction: failed transactions "+
		"per successful one (the paper's). Wait: from submission to the job's first decision; until placed: to the commit "+
		"that left none of its tasks pending.\n\n", res.Runners[0])
	var headers []string
	for _, m := range tableMetrics {
		headers = append(headers, m.header)
	}
	w("| series | %s | role | %s |\n|%s\n", res.XLabel, strings.Join(headers, " | "), strings.Repeat("---|", 3+len(tableMetrics)))
	for _, s := range res.Summary {
		if s.Runner != res.Runners[0] {
			continue
		}
		var cells []string
		for _, m := range tableMetrics {
			cell := meanSDText(s, m.name)
			if m.name == "busyness_daily_median_fraction" {
				cell += fmt.Sprintf(" [%s, %s]", sig(s.Mean["busyness_hourly_p10_fraction"]), sig(s.Mean["busyness_hourly_p90_fraction"]))
			}
			cells = append(cells, cell)
		}
		w("| %s | %s | %s | %s |\n", orDash(s.Series), formatFloat(s.X), s.Role, strings.Join(cells, " | "))
	}
	if len(res.Runners) > 1 {
		res.compare(w)
	}
	w("\n## Files\n\n")
	w("- `%s`: the parameters, every run's statistics (per scheduler) and per-role measures, and the summary\n", ResultsJSON)
	w("- `%s`: a row per runner, point, seed and role; `%s`: per scheduler; `%s`: mean and standard deviation over seeds\n", RunsCSV, SchedulersCSV, SummaryCSV)
	w("- `%s`: wall-clock time of each run (the one file that differs between two runs of the experiment)\n", TimingsCSV)
	w("- plots: %s, each as `.png` and `.svg`\n", chartFiles())
	return b.String()
}

// setup lists the experiment's parameters.
func (res *Results) setup() [][2]string {
	p := res.Base
	modes := "each profile's own"
	if p.Conflict != nil || p.Txn != nil {
		modes = "conflict " + orDefault(p.Conflict) + ", transactions " + orDefault(p.Txn)
	}
	horizon := "until every task has ended"
	if p.Horizon > 0 {
		horizon = fmt.Sprintf("%v of the workload's submissions (divided by the batch arrival rate factor)", p.Horizon)
	}
	series := "one line per role"
	if pts := res.Points; len(pts) > 0 && pts[0].Series != "" {
		var names []string
		for _, pt := range pts {
			if len(names) == 0 || names[len(names)-1] != pt.Series {
				names = append(names, pt.Series)
			}
		}
		series = strings.Join(names, ", ") + " (each for every role)"
	}
	pol := p.policy()
	policy := [][2]string{
		{"decisions retried at once after conflicts", fmt.Sprint(pol.MaxAttempts)},
		{"decisions per job before it is abandoned", fmt.Sprint(pol.AbandonAfter)},
		{"back-off of a job that fits nowhere", pol.Backoff.String()},
		{"longest back-off of a job that fits nowhere", pol.MaxBackoff.String()},
	}
	if p.Policy == scheduler.GooglePolicyName {
		policy = [][2]string{{"policy", "google (Google's lightweight simulator's: an unfinished job back at the end of the queue after 1s; " +
			"abandoned after more than 100 decisions with nothing placed, or 1,000 in all)"}}
	}
	rows := [][2]string{
		{"workload", res.Workload},
		{"cell", res.Cell},
		{"batch schedulers", schedulersText(p.Batch, p.BatchProfile, p.BatchDecision)},
		{"service schedulers", schedulersText(p.Service, p.ServiceProfile, p.ServiceDecision)},
		{"commit modes", modes},
		{"batch arrival rate", fmt.Sprintf("× %s", formatFloat(p.BatchRate))},
	}
	rows = append(rows, policy...)
	return append(rows, [][2]string{
		{"horizon", horizon},
		{"swept: " + res.XLabel, joinFloats(res.XS) + " (in place of the value above)"},
		{"series", series},
		{"seeds", joinSeeds(res.Seeds) + " (the schedulers' random choices; a synthetic workload's seed + seed - 1)"},
		{"runners", strings.Join(res.Runners, ", ")},
	}...)
}

// compare writes the second runner's summary beside the first's.
func (res *Results) compare(w func(string, ...any)) {
	a, b := res.Runners[0], res.Runners[1]
	w("\n## Compare: %s against %s\n\nThe same points and seeds run by both; mean ± standard deviation over seeds, and %s / %s.\n\n", b, a, b, a)
	w("| series | %s | role | metric | %s | %s | ratio |\n|---|---|---|---|---|---|---|\n", res.XLabel, a, b)
	other := map[[2]any]Summary{}
	for _, s := range res.Summary {
		if s.Runner == b {
			other[[2]any{s.Point, s.Role}] = s
		}
	}
	for _, s := range res.Summary {
		t, ok := other[[2]any{s.Point, s.Role}]
		if s.Runner != a || !ok {
			continue
		}
		for _, m := range compareMetrics {
			ratio := "–"
			if s.Mean[m] != 0 {
				ratio = sig(t.Mean[m] / s.Mean[m])
			}
			w("| %s | %s | %s | %s | %s | %s | %s |\n", orDash(s.Series), formatFloat(s.X), s.Role, metricLabel(m), meanSDText(s, m), meanSDText(t, m), ratio)
		}
	}
}

func schedulersText(n int, profile string, d framework.DecisionTime) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, profile %s, t_job %v, t_task %v", n, profile, d.Job, d.Task)
}

func orDefault[M fmt.Stringer](v *M) string {
	if v == nil {
		return "the profile's"
	}
	return (*v).String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func meanSDText(s Summary, m string) string {
	return sig(s.Mean[m]) + " ± " + sig(s.SD[m])
}

// sig writes x to 3 significant digits, and whole from 100 on.
func sig(x float64) string {
	if math.Abs(x) >= 100 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

func joinSeeds(seeds []uint64) string {
	var out []string
	for _, s := range seeds {
		out = append(out, fmt.Sprint(s))
	}
	return strings.Join(out, ", ")
}

func chartFiles() string {
	var out []string
	for _, c := range charts {
		out = append(out, "`"+c.file+"`")
	}
	return strings.Join(out, ", ")
}
