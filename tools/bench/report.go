package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"time"
)

// Reporter writes results as JSON lines, one object a line:
//
//	{"workload":"cas","system":"troupe","ops_per_sec":1234.5,"p50_ms":1.234,"p99_ms":5.678}
//
// and, as soon as both compared systems have a result for a workload,
//
//	{"workload":"cas","ratio_ops":1.234,"ratio_p50":0.456,"ratio_p99":0.567}
//
// where each ratio is Numerator's value over Denominator's (null when the
// denominator is 0), and, as soon as Numerator has results for a workload
// and its baseline (Result.Baseline),
//
//	{"workload":"place4","vs":"place","system":"troupe","ratio_p50":1.8,"ratio_p99":2.1}
//
// with the workload's latencies over the baseline's. The watch workload
// has lines of its own (see addWatch). A Reporter is not safe for
// concurrent use.
type Reporter struct {
	out         io.Writer
	numerator   string
	denominator string
	results     map[string]map[string]Result // workload → system → result
	compared    []Comparison                 // the ratio lines written, in order
}

// NewReporter returns a Reporter writing to out and comparing system
// numerator with system denominator ("troupe", "etcd").
func NewReporter(out io.Writer, numerator, denominator string) *Reporter {
	return &Reporter{
		out:         out,
		numerator:   numerator,
		denominator: denominator,
		results:     map[string]map[string]Result{},
	}
}

// resultLine is the JSON form of a Result; the field order is the format.
type resultLine struct {
	Workload  string  `json:"workload"`
	System    string  `json:"system"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
}

// ratioLine is the JSON form of a comparison.
type ratioLine struct {
	Workload string   `json:"workload"`
	RatioOps *float64 `json:"ratio_ops"`
	RatioP50 *float64 `json:"ratio_p50"`
	RatioP99 *float64 `json:"ratio_p99"`
}

// Comparison is what a ratio line says: Numerator's ops a second, p50
// and p99 over Denominator's (nil where Denominator's figure is 0).
type Comparison struct {
	Workload      string
	Ops, P50, P99 *float64
}

// Comparisons returns the ratio lines the Reporter wrote, in order (not
// watch's, which has lines of its own).
func (rep *Reporter) Comparisons() []Comparison { return slices.Clone(rep.compared) }

// vsLine is the JSON form of a comparison of two workloads on one system.
type vsLine struct {
	Workload string   `json:"workload"`
	Vs       string   `json:"vs"`
	System   string   `json:"system"`
	RatioP50 *float64 `json:"ratio_p50"`
	RatioP99 *float64 `json:"ratio_p99"`
}

// Add writes r's line, then the line comparing a workload with its
// baseline if r completes that pair on Numerator, then the workload's
// ratio line if r completes the pair of compared systems.
func (rep *Reporter) Add(r Result) error {
	if r.Watch != nil {
		return rep.addWatch(r)
	}
	line := resultLine{
		Workload:  r.Workload,
		System:    r.System,
		OpsPerSec: round(r.OpsPerSec(), 1),
		P50ms:     round(ms(r.Latencies.Quantile(0.50)), 3),
		P99ms:     round(ms(r.Latencies.Quantile(0.99)), 3),
	}
	if err := rep.write(line); err != nil {
		return err
	}
	bySystem := rep.results[r.Workload]
	if bySystem == nil {
		bySystem = map[string]Result{}
		rep.results[r.Workload] = bySystem
	}
	bySystem[r.System] = r
	if r.System == rep.numerator {
		if err := rep.compareWorkloads(r); err != nil {
			return err
		}
	}
	if r.System != rep.numerator && r.System != rep.denominator {
		return nil
	}
	num, okNum := bySystem[rep.numerator]
	den, okDen := bySystem[rep.denominator]
	if !okNum || !okDen {
		return nil
	}
	c := Comparison{
		Workload: r.Workload,
		Ops:      ratio(num.OpsPerSec(), den.OpsPerSec()),
		P50:      ratio(ms(num.Latencies.Quantile(0.50)), ms(den.Latencies.Quantile(0.50))),
		P99:      ratio(ms(num.Latencies.Quantile(0.99)), ms(den.Latencies.Quantile(0.99))),
	}
	rep.compared = append(rep.compared, c)
	return rep.write(ratioLine{Workload: c.Workload, RatioOps: c.Ops, RatioP50: c.P50, RatioP99: c.P99})
}

// ParseComparisons reads the ratio lines among a Reporter's output (its
// other lines, and other programs' lines, are skipped).
func ParseComparisons(out []byte) ([]Comparison, error) {
	var cs []Comparison
	for line := range bytes.Lines(out) {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(line, &fields); err != nil {
			return nil, fmt.Errorf("bench: result line %q: %w", bytes.TrimSpace(line), err)
		}
		if !slices.Equal(slices.Sorted(maps.Keys(fields)), []string{"ratio_ops", "ratio_p50", "ratio_p99", "workload"}) {
			continue
		}
		var r ratioLine
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("bench: ratio line %q: %w", bytes.TrimSpace(line), err)
		}
		cs = append(cs, Comparison{Workload: r.Workload, Ops: r.RatioOps, P50: r.RatioP50, P99: r.RatioP99})
	}
	return cs, nil
}

// spreadLine is the JSON form of a workload's comparisons over runs.
type spreadLine struct {
	Workload string  `json:"workload"`
	Runs     int     `json:"runs"`
	RatioOps *spread `json:"ratio_ops"`
	RatioP50 *spread `json:"ratio_p50"`
	RatioP99 *spread `json:"ratio_p99"`
}

// spread is the least, median and greatest of a ratio over runs.
type spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// newSpread summarizes the ratios that are known (nil when none is).
func newSpread(ratios []*float64) *spread {
	var xs []float64
	for _, r := range ratios {
		if r != nil {
			xs = append(xs, *r)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	slices.Sort(xs)
	mid := len(xs) / 2
	median := xs[mid]
	if len(xs)%2 == 0 {
		median = round((xs[mid-1]+xs[mid])/2, 4)
	}
	return &spread{Min: xs[0], Median: median, Max: xs[len(xs)-1]}
}

// WriteSpread writes, for each workload compared more than once in
// comparisons (several runs' Comparisons), in the order each first comes,
//
//	{"workload":"place","runs":6,"ratio_ops":{"min":1.9,"median":2.2,"max":3.1},"ratio_p50":{..},"ratio_p99":{..}}
//
// the spread of its ratios over the runs.
func WriteSpread(out io.Writer, comparisons []Comparison) error {
	byWorkload := map[string][]Comparison{}
	var order []string
	for _, c := range comparisons {
		if byWorkload[c.Workload] == nil {
			order = append(order, c.Workload)
		}
		byWorkload[c.Workload] = append(byWorkload[c.Workload], c)
	}
	for _, w := range order {
		cs := byWorkload[w]
		if len(cs) < 2 {
			continue
		}
		pick := func(f func(Comparison) *float64) []*float64 {
			rs := make([]*float64, len(cs))
			for i, c := range cs {
				rs[i] = f(c)
			}
			return rs
		}
		if err := writeLine(out, spreadLine{
			Workload: w,
			Runs:     len(cs),
			RatioOps: newSpread(pick(func(c Comparison) *float64 { return c.Ops })),
			RatioP50: newSpread(pick(func(c Comparison) *float64 { return c.P50 })),
			RatioP99: newSpread(pick(func(c Comparison) *float64 { return c.P99 })),
		}); err != nil {
			return err
		}
	}
	return nil
}

// compareWorkloads writes the vs line of r and its baseline, or of r and
// the workload r is the baseline of, when both have a result on r's
// system.
func (rep *Reporter) compareWorkloads(r Result) error {
	for _, wl := range slices.Sorted(maps.Keys(rep.results)) {
		other, ok := rep.results[wl][r.System]
		var err error
		switch {
		case !ok:
		case r.Baseline == wl:
			err = rep.write(newVsLine(r, other))
		case other.Baseline == r.Workload:
			err = rep.write(newVsLine(other, r))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func newVsLine(r, baseline Result) vsLine {
	return vsLine{
		Workload: r.Workload,
		Vs:       baseline.Workload,
		System:   r.System,
		RatioP50: ratio(ms(r.Latencies.Quantile(0.50)), ms(baseline.Latencies.Quantile(0.50))),
		RatioP99: ratio(ms(r.Latencies.Quantile(0.99)), ms(baseline.Latencies.Quantile(0.99))),
	}
}

func (rep *Reporter) write(v any) error { return writeLine(rep.out, v) }

// writeLine writes v to out as a JSON line.
func writeLine(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bench: encode result line: %w", err)
	}
	b = append(b, '\n')
	_, err = out.Write(b)
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// round rounds x to the given number of decimals.
func round(x float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(x*p) / p
}

// ratio is num/den rounded to 4 decimals, or nil when den is 0.
func ratio(num, den float64) *float64 {
	if den == 0 {
		return nil
	}
	r := round(num/den, 4)
	return &r
}
