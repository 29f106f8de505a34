package bench

import (
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
//	{"workload":"cas","ratio_ops":1.234,"ratio_p99":0.567}
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
	RatioP99 *float64 `json:"ratio_p99"`
}

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
	return rep.write(ratioLine{
		Workload: r.Workload,
		RatioOps: ratio(num.OpsPerSec(), den.OpsPerSec()),
		RatioP99: ratio(ms(num.Latencies.Quantile(0.99)), ms(den.Latencies.Quantile(0.99))),
	})
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

func (rep *Reporter) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bench: encode result line: %w", err)
	}
	b = append(b, '\n')
	_, err = rep.out.Write(b)
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
