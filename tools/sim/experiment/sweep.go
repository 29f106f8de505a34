package experiment

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Sweep is an experiment's shape: a parameter swept over values (the x
// axis), for each of its series (the lines; one unnamed line if none).
type Sweep struct {
	Name, Title string
	// Doc says what the sweep varies and what the Omega paper found, for
	// the report and the usage.
	Doc    string
	XLabel string
	LogX   bool
	// XS are the values swept by default.
	XS     []float64
	series []series
	// at sets the swept parameter to x.
	at func(p *Params, x float64) error
}

// series is one line of a sweep: a change to the base parameters.
type series struct {
	name string
	set  func(p *Params)
}

// Point is one setting of a sweep.
type Point struct {
	Series string  `json:"series,omitempty"`
	X      float64 `json:"x"`
	Params Params  `json:"params"`
}

func (p Point) String() string {
	x := "x=" + formatFloat(p.X)
	if p.Series == "" {
		return x
	}
	return p.Series + " " + x
}

// Points returns the sweep's points over xs from base, series by series.
func (s Sweep) Points(base Params, xs []float64) ([]Point, error) {
	if len(xs) == 0 {
		return nil, fmt.Errorf("sweep %s: no values to sweep", s.Name)
	}
	lines := s.series
	if lines == nil {
		lines = []series{{set: func(*Params) {}}}
	}
	var points []Point
	for _, l := range lines {
		for _, x := range xs {
			if s.LogX && !(x > 0) {
				return nil, fmt.Errorf("sweep %s: %s %v: must be positive", s.Name, s.XLabel, x)
			}
			p := base
			l.set(&p)
			if err := s.at(&p, x); err != nil {
				return nil, fmt.Errorf("sweep %s: %s %v: %w", s.Name, s.XLabel, x, err)
			}
			if err := p.Validate(); err != nil {
				return nil, fmt.Errorf("sweep %s: %s %v: %w", s.Name, s.XLabel, x, err)
			}
			points = append(points, Point{Series: l.name, X: x, Params: p})
		}
	}
	return points, nil
}

// Sweeps are the built-in sweeps.
func Sweeps() []Sweep {
	return []Sweep{
		{Name: "tjob-sweep", Title: "Service decision time",
			Doc: "The service schedulers' per-job decision time t_job(service) from 10 ms to 100 s, the batch schedulers' fixed " +
				"(the Omega paper's shared-state results against t_job(service)): there, the service scheduler's busyness and its " +
				"jobs' wait grow with t_job until it saturates and leaves jobs unscheduled, the batch scheduler is unaffected, and " +
				"conflicts grow with the longer decisions.",
			XLabel: "t_job(service) [s]", LogX: true, XS: []float64{0.01, 0.1, 1, 10, 100}, at: setServiceTJob},
		{Name: "parallel-batch", Title: "Parallel batch schedulers",
			Doc: "1 to 32 batch schedulers splitting the batch jobs by hash (the Omega paper's load-balanced batch schedulers): " +
				"there, each scheduler's busyness falls as they share the load while conflicts grow slowly with their number.",
			XLabel: "batch schedulers", LogX: true, XS: []float64{1, 2, 4, 8, 16, 32}, at: setBatchSchedulers},
		{Name: "conflict-modes", Title: "Conflict detection and transactions",
			Doc: "Fine- against coarse-grained conflict detection and incremental against all-or-nothing transactions, " +
				"for every scheduler, over t_job(service) (the Omega paper's high-fidelity comparison of coarse-grained detection " +
				"and gang scheduling): there, coarse detection conflicts more often and all-or-nothing commits redo whole jobs, " +
				"so busyness grows. Coarse fails a claim on any change to the machine's allocation since the snapshot (a task " +
				"ending included), coarse-claims only on another claim (Google's simulator's sequence numbers); gang commits " +
				"nothing unless every task fits, atomic commits what fits whole or not at all (Google's all-or-nothing).",
			XLabel: "t_job(service) [s]", LogX: true, XS: []float64{0.1, 1, 10}, at: setServiceTJob,
			series: []series{
				modeSeries(framework.Fine, framework.Incremental), modeSeries(framework.Coarse, framework.Incremental),
				modeSeries(framework.CoarseClaims, framework.Incremental),
				modeSeries(framework.Fine, framework.AllOrNothing), modeSeries(framework.Coarse, framework.AllOrNothing),
				modeSeries(framework.Fine, framework.Atomic),
			}},
		{Name: "arrival-scale", Title: "Batch arrival rate",
			Doc: "The batch jobs' arrival rate multiplied by 1 to 10, the services' left alone (the Omega paper's scaling of " +
				"λ_jobs(batch)): the batch schedulers' busyness grows with the rate until they saturate; more of them (-batch) " +
				"push that point out.",
			XLabel: "batch arrival rate (× the workload's)", XS: []float64{1, 2, 4, 6, 8, 10}, at: scaleBatchRate},
	}
}

// SweepNames lists the built-in sweeps.
func SweepNames() []string {
	var names []string
	for _, s := range Sweeps() {
		names = append(names, s.Name)
	}
	return names
}

// LookupSweep returns the built-in sweep called name.
func LookupSweep(name string) (Sweep, error) {
	for _, s := range Sweeps() {
		if s.Name == name {
			return s, nil
		}
	}
	return Sweep{}, fmt.Errorf("no sweep %q (sweeps: %s)", name, strings.Join(SweepNames(), ", "))
}

func setServiceTJob(p *Params, x float64) error {
	p.ServiceDecision.Job = time.Duration(x * float64(time.Second))
	return nil
}

func setBatchSchedulers(p *Params, x float64) error {
	if x != math.Trunc(x) || x < 1 {
		return fmt.Errorf("not a whole number of schedulers")
	}
	p.Batch = int(x)
	return nil
}

func scaleBatchRate(p *Params, x float64) error {
	if !(x > 0) || math.IsInf(x, 0) {
		return fmt.Errorf("must be positive and finite")
	}
	p.BatchRate *= x
	return nil
}

func modeSeries(c framework.ConflictMode, t framework.TxnMode) series {
	return series{name: modeName(c, t), set: func(p *Params) { p.Conflict, p.Txn = &c, &t }}
}

func modeName(c framework.ConflictMode, t framework.TxnMode) string {
	return c.String() + "/" + t.String()
}

// formatFloat writes x as briefly as it reads back.
func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
