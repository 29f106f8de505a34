package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// result is a Result of ops ops in one second, every op taking lat.
func result(workload, system string, ops int, lat time.Duration) bench.Result {
	l := make([]time.Duration, ops)
	for i := range l {
		l[i] = lat
	}
	return bench.Result{Workload: workload, System: system, Ops: int64(ops), Elapsed: time.Second, Latencies: bench.MergeLatencies(l)}
}

// TestCostLines feeds a Reporter writing through a costWriter the results
// of every system on one workload, in -systems' order, and checks that
// the reporter's ratio compares the secure pair and that each cost line
// comes once, as soon as its pair is complete.
func TestCostLines(t *testing.T) {
	var out bytes.Buffer
	rep := bench.NewReporter(newCostWriter(&out, costPairs), sysTroupe, sysEtcd)
	for _, r := range []bench.Result{
		result("cas", sysTroupe, 900, 2*time.Millisecond),
		result("cas", sysTroupeNoAuthz, 1000, 2*time.Millisecond),
		result("cas", sysTroupeInsecure, 1250, time.Millisecond),
		result("cas", sysEtcd, 600, 4*time.Millisecond),
		result("cas", sysEtcdInsecure, 800, 2*time.Millisecond),
		result("cas", sysTroupe, 1000, 2*time.Millisecond), // again, as in an A/B run
	} {
		if err := rep.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for line := range strings.Lines(out.String()) {
		var m struct {
			costLine
			System string `json:"system"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		switch {
		case m.System != "":
			got = append(got, "result "+m.System)
		case m.What != "":
			got = append(got, fmt.Sprintf("cost %s %s/%s %v", m.What, m.Num, m.Den, *m.RatioOps))
		default:
			got = append(got, "ratio "+strings.TrimSpace(line))
		}
	}
	want := []string{
		"result troupe",
		"result troupe-noauthz",
		"cost authz troupe/troupe-noauthz 0.9",
		"result troupe-insecure",
		"cost tls troupe-noauthz/troupe-insecure 0.8",
		"cost tls+authz troupe/troupe-insecure 0.72",
		"result etcd",
		`ratio {"workload":"cas","ratio_ops":1.5,"ratio_p50":0.5,"ratio_p99":0.5}`,
		"result etcd-insecure",
		"cost tls etcd/etcd-insecure 0.75",
		"cost insecure troupe-insecure/etcd-insecure 1.5625",
		"result troupe",
		"cost authz troupe/troupe-noauthz 1",
		"cost tls+authz troupe/troupe-insecure 0.8",
		`ratio {"workload":"cas","ratio_ops":1.6667,"ratio_p50":0.5,"ratio_p99":0.5}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines:\n%s\nwant:\n%s\nout:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out.String())
	}
	// troupe at 900 op/s against 1000: 1111.11 µs against 1000 per op.
	if !strings.Contains(out.String(), `{"workload":"cas","what":"authz","num":"troupe","den":"troupe-noauthz","ratio_ops":0.9,"ratio_p50":1,"ratio_p99":1,"extra_us_per_op":111.11}`) {
		t.Errorf("authz line missing or wrong:\n%s", out.String())
	}
}

func TestParseSystems(t *testing.T) {
	got, err := parseSystems(" troupe-insecure, etcd-insecure ,troupe,troupe-insecure")
	if err != nil || !slices.Equal(got, []string{sysTroupeInsecure, sysEtcdInsecure, sysTroupe, sysTroupeInsecure}) {
		t.Errorf("parseSystems: %q, %v", got, err)
	}
	for _, bad := range []string{"troupe,zookeeper", "etcd,", ""} {
		if _, err := parseSystems(bad); err == nil {
			t.Errorf("parseSystems(%q) accepted", bad)
		}
	}
	o, err := parseFlags(nil)
	if err != nil || o.systems != "troupe,etcd" {
		t.Errorf("default -systems %q, %v; want troupe,etcd (both secure)", o.systems, err)
	}
	if _, err := parseFlags([]string{"-systems=troupe,consul"}); err == nil {
		t.Error("-systems=troupe,consul accepted")
	}
	if s := starters(o, nil); len(s) != len(knownSystems) {
		t.Errorf("%d starters for %d systems", len(s), len(knownSystems))
	}
}

// retrying is a System that counts retries, as bench.Troupe does.
type retrying struct{ bench.System }

func (retrying) Retries() uint64 { return 7 }

func TestNamed(t *testing.T) {
	sys, err := dialEtcd(nil, nil) // no clients: only the name matters
	if err != nil {
		t.Fatal(err)
	}
	n := named(sysEtcdInsecure, sys)
	if n.Name() != sysEtcdInsecure {
		t.Errorf("Name %q", n.Name())
	}
	if _, ok := n.(retrier); ok {
		t.Error("etcd under another name counts retries")
	}
	r := named(sysTroupeNoAuthz, retrying{sys})
	if r.Name() != sysTroupeNoAuthz {
		t.Errorf("Name %q", r.Name())
	}
	if rr, ok := r.(retrier); !ok || rr.Retries() != 7 {
		t.Error("a renamed system's retries are lost")
	}
}
