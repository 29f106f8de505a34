package experiment

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// Results are an experiment's runs and their summary, with everything
// needed to tell what was run. Its JSON (results.json) is documented
// field by field in DESIGN.md (Experiments).
type Results struct {
	Sweep    string    `json:"sweep"`
	Title    string    `json:"title"`
	Doc      string    `json:"doc"`
	XLabel   string    `json:"x_label"`
	LogX     bool      `json:"log_x"`
	XS       []float64 `json:"xs"`
	Base     Params    `json:"base"`
	Workload string    `json:"workload"`
	Cell     string    `json:"cell"`
	Seeds    []uint64  `json:"seeds"`
	Runners  []string  `json:"runners"`
	// Command reruns the experiment; Provenance says what made it.
	Command    string  `json:"command"`
	Provenance string  `json:"provenance"`
	Points     []Point `json:"points"`
	// Runs are runner by runner, point by point, seed by seed.
	Runs []Run `json:"runs"`
	// Summary: runner by runner, point by point, role by role.
	Summary []Summary `json:"summary"`
}

// Run is one simulation: a point with a seed, by a runner.
type Run struct {
	Runner string     `json:"runner"`
	Point  int        `json:"point"`
	Seed   uint64     `json:"seed"`
	Stats  *sim.Stats `json:"stats"`
	// Roles are the measures of the batch and the service schedulers.
	Roles []RoleValues `json:"roles"`
	// Wall is how long the run took: the one thing that varies between
	// two runs of an experiment, so it is kept out of the JSON.
	Wall time.Duration `json:"-"`
}

// RoleValues are the measures of the schedulers of one role (batch or
// service) in a run, by metric name.
type RoleValues struct {
	Role       string             `json:"role"`
	Schedulers int                `json:"schedulers"`
	Values     map[string]float64 `json:"values"`
}

// Summary is a point's role's measures over the seeds.
type Summary struct {
	Runner string  `json:"runner"`
	Point  int     `json:"point"`
	Series string  `json:"series,omitempty"`
	X      float64 `json:"x"`
	Role   string  `json:"role"`
	Seeds  int     `json:"seeds"`
	// Mean and SD (sample standard deviation; 0 for one seed) by metric.
	Mean map[string]float64 `json:"mean"`
	SD   map[string]float64 `json:"sd"`
}

// metric is a measure of a role's schedulers in one run.
type metric struct {
	name, label string
	of          func(ss []sim.SchedulerStats, st *sim.Stats) float64
}

// metrics are the measures reported, in the CSV files' column order,
// named as sim.Stats's JSON names them. Counts add up over a role's
// schedulers, conflicted placements per placement is the ratio of
// those sums; the other fractions and the waits are the mean over the
// role's schedulers (as Google's simulator's plots average over the
// schedulers of one kind).
var metrics = []metric{
	{"jobs", "jobs submitted", sum(func(s sim.SchedulerStats) int { return s.Jobs })},
	{"tasks", "tasks submitted", sum(func(s sim.SchedulerStats) int { return s.Tasks })},
	{"decisions", "decisions", sum(func(s sim.SchedulerStats) int { return s.Decisions })},
	{"transactions", "transactions (decisions that committed claims)", sum(func(s sim.SchedulerStats) int { return s.Transactions })},
	{"failed_transactions", "failed transactions (a claim conflicted)",
		sum(func(s sim.SchedulerStats) int { return s.FailedTransactions })},
	{"no_room_decisions", "decisions that found no room (no transaction)",
		sum(func(s sim.SchedulerStats) int { return s.NoRoomDecisions })},
	{"placements", "placements", sum(func(s sim.SchedulerStats) int { return s.Placements })},
	{"conflicted_placements", "conflicted placements", sum(func(s sim.SchedulerStats) int { return s.ConflictedPlacements })},
	{"conflict_fraction", "conflict fraction (failed per successful transaction)",
		mean(func(s sim.SchedulerStats) float64 { return s.ConflictFraction })},
	{"conflicted_placements_per_placement", "conflicted placements per placement", ratio(
		func(s sim.SchedulerStats) int { return s.ConflictedPlacements }, func(s sim.SchedulerStats) int { return s.Placements })},
	{"unschedulable_task_decisions", "task decisions that found no machine",
		sum(func(s sim.SchedulerStats) int { return s.UnschedulableTaskDecisions })},
	{"preempted_tasks", "tasks preempted", sum(func(s sim.SchedulerStats) int { return s.PreemptedTasks })},
	{"lost_tasks", "tasks lost to machine failures", sum(func(s sim.SchedulerStats) int { return s.LostTasks })},
	{"abandoned_jobs", "jobs abandoned", sum(func(s sim.SchedulerStats) int { return s.AbandonedJobs })},
	{"unscheduled_jobs", "jobs unscheduled", sum(func(s sim.SchedulerStats) int { return s.UnscheduledJobs })},
	{"unscheduled_fraction", "fraction of jobs unscheduled", ratio(
		func(s sim.SchedulerStats) int { return s.UnscheduledJobs }, func(s sim.SchedulerStats) int { return s.Jobs })},
	{"busyness_daily_median_fraction", "busyness (median day)",
		mean(func(s sim.SchedulerStats) float64 { return s.BusynessDailyMedianFraction })},
	{"busyness_fraction", "busyness (whole run)", mean(func(s sim.SchedulerStats) float64 { return s.BusynessFraction })},
	{"busyness_hourly_median_fraction", "busyness (median hour)",
		mean(func(s sim.SchedulerStats) float64 { return s.BusynessHourlyMedianFraction })},
	{"busyness_hourly_p10_fraction", "busyness (10th percentile hour)",
		mean(func(s sim.SchedulerStats) float64 { return s.BusynessHourlyP10Fraction })},
	{"busyness_hourly_p90_fraction", "busyness (90th percentile hour)",
		mean(func(s sim.SchedulerStats) float64 { return s.BusynessHourlyP90Fraction })},
	{"transaction_busyness_daily_median_fraction", "busyness in transactions (median day)",
		mean(func(s sim.SchedulerStats) float64 { return s.TransactionBusynessDailyMedianFraction })},
	{"transaction_busyness_fraction", "busyness in transactions (whole run)",
		mean(func(s sim.SchedulerStats) float64 { return s.TransactionBusynessFraction })},
	{"wait_mean_seconds", "job wait until the first decision, mean [s]",
		mean(func(s sim.SchedulerStats) float64 { return s.WaitMeanSeconds })},
	{"wait_median_seconds", "job wait until the first decision, median [s]",
		mean(func(s sim.SchedulerStats) float64 { return s.WaitMedianSeconds })},
	{"wait_p90_seconds", "job wait until the first decision, 90th percentile [s]",
		mean(func(s sim.SchedulerStats) float64 { return s.WaitP90Seconds })},
	{"wait_until_placed_mean_seconds", "job wait until every task placed, mean [s]",
		mean(func(s sim.SchedulerStats) float64 { return s.WaitUntilPlacedMeanSeconds })},
	{"wait_until_placed_median_seconds", "job wait until every task placed, median [s]",
		mean(func(s sim.SchedulerStats) float64 { return s.WaitUntilPlacedMedianSeconds })},
	{"wait_until_placed_p90_seconds", "job wait until every task placed, 90th percentile [s]",
		mean(func(s sim.SchedulerStats) float64 { return s.WaitUntilPlacedP90Seconds })},
	{"cpu_allocated_fraction", "cell CPU allocated (mean fraction)",
		func(_ []sim.SchedulerStats, st *sim.Stats) float64 { return st.CPUUtilisation }},
	{"duration_seconds", "virtual time run [s]", func(_ []sim.SchedulerStats, st *sim.Stats) float64 { return st.DurationSeconds }},
}

func sum(f func(sim.SchedulerStats) int) func([]sim.SchedulerStats, *sim.Stats) float64 {
	return func(ss []sim.SchedulerStats, _ *sim.Stats) float64 {
		n := 0
		for _, s := range ss {
			n += f(s)
		}
		return float64(n)
	}
}

// ratio is the sum of num over the sum of den (0 if that is 0).
func ratio(num, den func(sim.SchedulerStats) int) func([]sim.SchedulerStats, *sim.Stats) float64 {
	return func(ss []sim.SchedulerStats, st *sim.Stats) float64 {
		if d := sum(den)(ss, st); d > 0 {
			return sum(num)(ss, st) / d
		}
		return 0
	}
}

func mean(f func(sim.SchedulerStats) float64) func([]sim.SchedulerStats, *sim.Stats) float64 {
	return func(ss []sim.SchedulerStats, _ *sim.Stats) float64 {
		var t float64
		for _, s := range ss {
			t += f(s)
		}
		return t / float64(len(ss))
	}
}

// roles works out the run's measures per role from its stats; cfg's
// schedulers are the stats' in order.
func (r *Run) roles(cfg sim.Config) {
	for _, role := range []workload.Type{workload.Batch, workload.Service} {
		var ss []sim.SchedulerStats
		for i, sc := range cfg.Schedulers {
			if sc.Serves == role {
				ss = append(ss, r.Stats.Schedulers[i])
			}
		}
		if len(ss) == 0 {
			continue
		}
		rv := RoleValues{Role: role.String(), Schedulers: len(ss), Values: map[string]float64{}}
		for _, m := range metrics {
			rv.Values[m.name] = m.of(ss, r.Stats)
		}
		r.Roles = append(r.Roles, rv)
	}
}

// summarise sets res.Summary from res.Runs.
// Merge returns the results of one sweep run several ways (other
// parameters, other policies) as one, each way a series named by names,
// so that their lines share the plots: the points of results[i] are
// series names[i] (before their own series, if any). The sweeps must be
// the same sweep over the same values with the same runners; base and
// workload are the first's, and the commands are joined.
func Merge(results []*Results, names []string) (*Results, error) {
	if len(results) == 0 || len(results) != len(names) {
		return nil, fmt.Errorf("experiment: merge %d results as %d series", len(results), len(names))
	}
	first := results[0]
	m := *first
	m.Points, m.Runs, m.Summary = nil, nil, nil
	var commands []string
	for i, r := range results {
		if r.Sweep != first.Sweep || !slices.Equal(r.XS, first.XS) || !slices.Equal(r.Runners, first.Runners) {
			return nil, fmt.Errorf("experiment: merge: %s over %v by %v is not %s over %v by %v",
				r.Sweep, r.XS, r.Runners, first.Sweep, first.XS, first.Runners)
		}
		offset := len(m.Points)
		for _, p := range r.Points {
			p.Series = strings.TrimSpace(names[i] + " " + p.Series)
			m.Points = append(m.Points, p)
		}
		for _, run := range r.Runs {
			run.Point += offset
			m.Runs = append(m.Runs, run)
		}
		commands = append(commands, names[i]+": "+r.Command)
	}
	m.Command = strings.Join(commands, "\n")
	m.Doc = fmt.Sprintf("%s Drawn together here: %s; the setup below is the first's, each series' own is in its command.",
		first.Doc, strings.Join(names, ", "))
	m.summarise()
	return &m, nil
}

func (res *Results) summarise() {
	res.Summary = nil
	type key struct {
		runner string
		point  int
		role   string
	}
	byKey := map[key][]map[string]float64{}
	var order []key
	for _, run := range res.Runs {
		for _, rv := range run.Roles {
			k := key{run.Runner, run.Point, rv.Role}
			if byKey[k] == nil {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], rv.Values)
		}
	}
	for _, k := range order {
		p := res.Points[k.point]
		s := Summary{Runner: k.runner, Point: k.point, Series: p.Series, X: p.X, Role: k.role, Seeds: len(byKey[k]),
			Mean: map[string]float64{}, SD: map[string]float64{}}
		for _, m := range metrics {
			var xs []float64
			for _, v := range byKey[k] {
				xs = append(xs, v[m.name])
			}
			s.Mean[m.name], s.SD[m.name] = meanSD(xs)
		}
		res.Summary = append(res.Summary, s)
	}
}

// meanSD returns the mean and the sample standard deviation of xs.
func meanSD(xs []float64) (m, sd float64) {
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	if len(xs) < 2 {
		return m, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

// describeCell summarises a cell: machines by shape, in order of first
// appearance, and the totals.
func describeCell(cell []workload.Machine) string {
	type shape struct{ cpu, mem int64 }
	counts := map[shape]int{}
	var order []shape
	var cpu, mem int64
	for _, m := range cell {
		s := shape{m.CPU, m.Memory}
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
		cpu, mem = cpu+m.CPU, mem+m.Memory
	}
	var parts []string
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%d × %s cores, %s GiB", counts[s], formatFloat(float64(s.cpu)/1000), formatFloat(float64(s.mem)/(1<<30))))
	}
	return fmt.Sprintf("%d machines (%s); %s cores, %s GiB in all", len(cell), strings.Join(parts, "; "),
		formatFloat(float64(cpu)/1000), formatFloat(math.Round(float64(mem)/(1<<30))))
}
