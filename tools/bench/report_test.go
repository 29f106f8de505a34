package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWriteSpread(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	compared := []Comparison{
		{Workload: "seq", Ops: f(1.2), P50: f(0.9), P99: f(0.5)},
		{Workload: "place", Ops: f(2.5), P50: f(0.4), P99: f(0.6)},
		{Workload: "watch-once", Ops: f(1), P50: f(1), P99: f(1)},
		{Workload: "seq", Ops: f(0.8), P50: f(1.1), P99: nil}, // etcd's p99 was 0
		{Workload: "place", Ops: f(1.9), P50: f(0.5), P99: f(0.7)},
		{Workload: "place", Ops: f(2.1), P50: f(0.3), P99: f(0.8)},
	}
	var out bytes.Buffer
	if err := WriteSpread(&out, compared); err != nil {
		t.Fatal(err)
	}
	want := []string{
		// Two runs: the median is their mean; the unknown p99 is left out.
		`{"workload":"seq","runs":2,"ratio_ops":{"min":0.8,"median":1,"max":1.2},"ratio_p50":{"min":0.9,"median":1,"max":1.1},"ratio_p99":{"min":0.5,"median":0.5,"max":0.5}}`,
		`{"workload":"place","runs":3,"ratio_ops":{"min":1.9,"median":2.1,"max":2.5},"ratio_p50":{"min":0.3,"median":0.4,"max":0.5},"ratio_p99":{"min":0.6,"median":0.7,"max":0.8}}`,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("spread lines:\n%s\nwant (a workload compared once has none):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReporterKeepsComparisons(t *testing.T) {
	result := func(system string, ops int64) Result {
		return Result{Workload: WorkloadSeq, System: system, Ops: ops, Elapsed: time.Second, Latencies: latencies(time.Millisecond, time.Millisecond)}
	}
	rep := NewReporter(&bytes.Buffer{}, "troupe", "etcd")
	// Each result completes a pair with the other system's latest.
	for _, r := range []Result{result("troupe", 200), result("etcd", 100), result("troupe", 400)} {
		if err := rep.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	got := rep.Comparisons()
	if len(got) != 2 || *got[0].Ops != 2 || *got[1].Ops != 4 || got[0].Workload != "seq" {
		t.Fatalf("comparisons %+v, want seq's two, ops ratios 2 then 4", got)
	}
}

func TestParseComparisons(t *testing.T) {
	out := []byte(`{"workload":"cas","system":"troupe","ops_per_sec":1000,"p50_ms":1,"p99_ms":2}
{"workload":"cas","system":"etcd","ops_per_sec":500,"p50_ms":2,"p99_ms":4}
{"workload":"cas","ratio_ops":2,"ratio_p50":0.5,"ratio_p99":null}
{"workload":"cas","what":"authz","num":"troupe","den":"troupe-noauthz","ratio_ops":0.9,"ratio_p50":1,"ratio_p99":1,"extra_us_per_op":111.11}
{"workload":"place4","vs":"place","system":"troupe","ratio_p50":1.5,"ratio_p99":2.5}
{"workload":"place","runs":2,"ratio_ops":{"min":1,"median":1.5,"max":2},"ratio_p50":null,"ratio_p99":null}
`)
	got, err := ParseComparisons(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Workload != "cas" || *got[0].Ops != 2 || *got[0].P50 != 0.5 || got[0].P99 != nil {
		t.Fatalf("comparisons %+v, want cas's ratio line alone", got)
	}
	if _, err := ParseComparisons([]byte("troupe: starting\n")); err == nil {
		t.Fatal("a line that is not JSON parsed")
	}
}
