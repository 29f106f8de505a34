package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// costPair compares two systems' results on each workload: Num's over
// Den's.
type costPair struct {
	What     string
	Num, Den string
}

// costPairs are the comparisons benchcompare prints besides the
// reporter's troupe-over-etcd ratio: what authorization and TLS cost each
// system, and the plaintext comparison of earlier measurements.
var costPairs = []costPair{
	{What: "authz", Num: sysTroupe, Den: sysTroupeNoAuthz},
	{What: "tls", Num: sysTroupeNoAuthz, Den: sysTroupeInsecure},
	{What: "tls+authz", Num: sysTroupe, Den: sysTroupeInsecure},
	{What: "tls", Num: sysEtcd, Den: sysEtcdInsecure},
	{What: "insecure", Num: sysTroupeInsecure, Den: sysEtcdInsecure},
}

// costLine is the JSON form of a costPair's comparison on a workload:
//
//	{"workload":"cas","what":"authz","num":"troupe","den":"troupe-noauthz",
//	 "ratio_ops":0.98,"ratio_p50":1.02,"ratio_p99":1.01,"extra_us_per_op":2.1}
//
// Each ratio is Num's figure over Den's (null when Den's is 0);
// extra_us_per_op is what Num's lower throughput means per op,
// 1/ops_per_sec of Num minus that of Den in microseconds: the time the
// whole system spends more on each op (on the one-client seq, the mean
// latency's difference; where the clients saturate the machine's cores,
// that many times this in CPU time).
type costLine struct {
	Workload     string   `json:"workload"`
	What         string   `json:"what"`
	Num          string   `json:"num"`
	Den          string   `json:"den"`
	RatioOps     *float64 `json:"ratio_ops"`
	RatioP50     *float64 `json:"ratio_p50"`
	RatioP99     *float64 `json:"ratio_p99"`
	ExtraUsPerOp *float64 `json:"extra_us_per_op"`
}

// resultFigures are what a result line ({"workload","system",
// "ops_per_sec","p50_ms","p99_ms"}, bench.Reporter's) says.
type resultFigures struct {
	Workload  string   `json:"workload"`
	System    string   `json:"system"`
	OpsPerSec *float64 `json:"ops_per_sec"`
	P50ms     float64  `json:"p50_ms"`
	P99ms     float64  `json:"p99_ms"`
}

// costWriter passes a bench.Reporter's lines through to out and, after a
// result line that completes one of its pairs on a workload, writes that
// pair's cost line. It reads the result lines rather than the results
// because bench.RunSystem hands results to a *bench.Reporter only, whose
// ratio line compares one pair of systems; the figures it reads are
// rounded as printed (0.1 op/s, 1 µs), finer than any difference
// measured here. Not safe for concurrent use, like the Reporter.
type costWriter struct {
	out     io.Writer
	pairs   []costPair
	partial []byte
	results map[string]map[string]resultFigures // workload → system →
}

func newCostWriter(out io.Writer, pairs []costPair) *costWriter {
	return &costWriter{out: out, pairs: pairs, results: map[string]map[string]resultFigures{}}
}

func (w *costWriter) Write(p []byte) (int, error) {
	if _, err := w.out.Write(p); err != nil {
		return 0, err
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		w.partial = w.partial[i+1:]
		if err := w.line(line); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// line records a result line and writes the cost lines it completes;
// other lines (ratios, cross-shard comparisons) it ignores.
func (w *costWriter) line(b []byte) error {
	var r resultFigures
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("benchcompare: read result line %q: %w", b, err)
	}
	if r.System == "" || r.OpsPerSec == nil {
		return nil
	}
	bySystem := w.results[r.Workload]
	if bySystem == nil {
		bySystem = map[string]resultFigures{}
		w.results[r.Workload] = bySystem
	}
	bySystem[r.System] = r
	for _, pair := range w.pairs {
		if r.System != pair.Num && r.System != pair.Den {
			continue
		}
		num, okNum := bySystem[pair.Num]
		den, okDen := bySystem[pair.Den]
		if !okNum || !okDen {
			continue
		}
		l := costLine{
			Workload: r.Workload, What: pair.What, Num: pair.Num, Den: pair.Den,
			RatioOps: ratio(*num.OpsPerSec, *den.OpsPerSec),
			RatioP50: ratio(num.P50ms, den.P50ms),
			RatioP99: ratio(num.P99ms, den.P99ms),
		}
		if *num.OpsPerSec > 0 && *den.OpsPerSec > 0 {
			extra := round(1e6 / *num.OpsPerSec - 1e6 / *den.OpsPerSec, 2)
			l.ExtraUsPerOp = &extra
		}
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		if _, err := w.out.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// ratio is num/den rounded to 4 decimals, or nil when den is 0 (as
// bench's ratio lines).
func ratio(num, den float64) *float64 {
	if den == 0 {
		return nil
	}
	r := round(num/den, 4)
	return &r
}

func round(x float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(x*p) / p
}
