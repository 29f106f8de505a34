package experiment

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/tools/sim"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// command runs the CLI with args, failing the test on an error.
func command(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	c := Command{Name: "troupe sim", Stdout: &out, Stderr: &errs}
	if err := c.Run(t.Context(), args); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errs.String())
	}
	return out.String(), errs.String()
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll() // also checks every row has the header's columns
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// Every sweep writes its files: CSV and JSON that parse with a row per
// run and role, PNG and SVG plots, and a report that shows them and the
// command that reruns it.
func TestSweepsWriteFiles(t *testing.T) {
	xs := map[string]string{"tjob-sweep": "0.1,10", "parallel-batch": "1,3", "conflict-modes": "1", "arrival-scale": "1,3"}
	for _, name := range SweepNames() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"sweep", name, "-config", "testdata/small.yaml", "-seeds", "2", "-x", xs[name], "-out", dir}
			command(t, args...)
			sw, _ := LookupSweep(name)
			points := len(strings.Split(xs[name], ",")) * max(1, len(sw.series))

			var res Results
			b, err := os.ReadFile(filepath.Join(dir, ResultsJSON))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			checkJSONNames(t, ResultsJSON, b)
			if len(res.Points) != points || len(res.Runs) != 2*points || len(res.Summary) != 2*points || res.Sweep != name {
				t.Fatalf("results: %d points, %d runs, %d summaries", len(res.Points), len(res.Runs), len(res.Summary))
			}
			for _, f := range []struct {
				name string
				rows int
			}{{RunsCSV, 2 * 2 * points}, {SummaryCSV, 2 * points}, {TimingsCSV, 2 * points}} {
				if rows := readCSV(t, filepath.Join(dir, f.name)); len(rows) != 1+f.rows {
					t.Errorf("%s: %d rows, want a header and %d", f.name, len(rows), f.rows)
				}
			}
			if rows := readCSV(t, filepath.Join(dir, SchedulersCSV)); len(rows) < 1+2*2*points {
				t.Errorf("%s: %d rows", SchedulersCSV, len(rows))
			}
			report, err := os.ReadFile(filepath.Join(dir, ReportMD))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(report), "troupe sim "+strings.Join(args, " ")) {
				t.Errorf("the report does not say how to rerun it:\n%s", report)
			}
			for _, c := range charts {
				for ext, header := range map[string]string{".png": "\x89PNG\r\n\x1a\n", ".svg": "<?xml"} {
					b, err := os.ReadFile(filepath.Join(dir, c.file+ext))
					if err != nil || !bytes.HasPrefix(b, []byte(header)) || (ext == ".svg" && !bytes.Contains(b, []byte("<svg"))) {
						t.Errorf("%s%s: %d bytes, %v", c.file, ext, len(b), err)
					}
					if !strings.Contains(string(report), "("+c.file+ext+")") {
						t.Errorf("the report does not refer to %s%s", c.file, ext)
					}
				}
			}
		})
	}
}

// smallWorkload opens a test config.
func smallWorkload(t *testing.T, path string) *Workload {
	t.Helper()
	w, err := WorkloadFlags{Config: path, Compress: 1, CellScale: 1}.Open()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func runExperiment(t *testing.T, e *Experiment) *Results {
	t.Helper()
	if e.Runners == nil {
		e.Runners = []NamedRunner{{Name: MemoryRunner, Run: InMemory}}
	}
	res, err := e.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The output does not depend on how many runs go at once: every file
// but the timings is the same, byte for byte.
func TestDeterministicAcrossParallelism(t *testing.T) {
	sw, _ := LookupSweep("parallel-batch")
	base := DefaultParams()
	base.Horizon = smallWorkload(t, "testdata/small.yaml").Span
	var dirs []string
	for _, parallel := range []int{1, 4} {
		e := &Experiment{Sweep: sw, XS: []float64{1, 2, 4}, Base: base, Workload: smallWorkload(t, "testdata/small.yaml"),
			Seeds: []uint64{1, 2}, Parallel: parallel, Command: "test"}
		dir := t.TempDir()
		if err := runExperiment(t, e).Write(dir); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	sameFiles(t, dirs[0], dirs[1], "between 1 and 4 runs at once")
}

// sameFiles checks that every file of dir a but the timings is in dir b,
// byte for byte.
func sameFiles(t *testing.T, a, b, what string) {
	t.Helper()
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == TimingsCSV {
			continue
		}
		x, _ := os.ReadFile(filepath.Join(a, e.Name()))
		y, err := os.ReadFile(filepath.Join(b, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs %s (%v)", e.Name(), what, err)
		}
	}
}

// redraw writes a sweep's files again from its results.json: the same
// CSV files, plots and report, byte for byte, and no timings (they are
// not in the JSON).
func TestRedrawFromResults(t *testing.T) {
	sw, _ := LookupSweep("conflict-modes")
	base := DefaultParams()
	base.Horizon = smallWorkload(t, "testdata/small.yaml").Span
	e := &Experiment{Sweep: sw, XS: []float64{0.1, 1}, Base: base, Workload: smallWorkload(t, "testdata/small.yaml"),
		Seeds: []uint64{1, 2}, Parallel: 2, Command: "test"}
	dir, again := t.TempDir(), t.TempDir()
	if err := runExperiment(t, e).Write(dir); err != nil {
		t.Fatal(err)
	}
	c := Command{Name: "troupe sim", Stdout: io.Discard, Stderr: io.Discard}
	if err := c.Run(t.Context(), []string{"redraw", "-in", dir, "-out", again}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, dir, again, "when redrawn")
	if _, err := os.Stat(filepath.Join(again, TimingsCSV)); !os.IsNotExist(err) {
		t.Errorf("redraw wrote %s (%v)", TimingsCSV, err)
	}
	if err := c.Run(t.Context(), []string{"redraw", "-out", again}); err == nil {
		t.Error("redraw without -in did not fail")
	}
}

// Known answers: one scheduler alone never conflicts (batch jobs of one
// priority: nothing is preempted under it); coarse-grained detection
// never conflicts less than fine-grained on the same seed.
func TestKnownAnswers(t *testing.T) {
	w := smallWorkload(t, "testdata/batch-only.yaml")
	base := DefaultParams()
	base.Service, base.Horizon = 0, w.Span
	sw, _ := LookupSweep("parallel-batch")
	res := runExperiment(t, &Experiment{Sweep: sw, XS: []float64{1, 4}, Base: base, Workload: w, Seeds: []uint64{1, 2}})
	for _, run := range res.Runs {
		v := run.Roles[0].Values
		if run.Point == 0 && (v["conflicted_placements"] != 0 || v["failed_transactions"] != 0 || v["conflict_fraction"] != 0 ||
			v["placements"] == 0) {
			t.Errorf("one scheduler, seed %d: %v conflicts, %v failed transactions, %v placements", run.Seed, v["conflicted_placements"],
				v["failed_transactions"], v["placements"])
		}
	}
	if res.Summary[1].Mean["conflicted_placements"] == 0 {
		t.Error("four schedulers never conflicted: the test workload is too light")
	}

	w = smallWorkload(t, "testdata/small.yaml")
	base = DefaultParams()
	base.Batch, base.Horizon = 3, w.Span
	sw, _ = LookupSweep("conflict-modes")
	res = runExperiment(t, &Experiment{Sweep: sw, XS: []float64{1}, Base: base, Workload: w, Seeds: []uint64{1, 2, 3}})
	conflicts := map[string]map[uint64]float64{} // series → seed → conflicts of every role
	for _, run := range res.Runs {
		series := res.Points[run.Point].Series
		if conflicts[series] == nil {
			conflicts[series] = map[uint64]float64{}
		}
		for _, rv := range run.Roles {
			conflicts[series][run.Seed] += rv.Values["conflicted_placements"]
		}
	}
	for _, txn := range []framework.TxnMode{framework.Incremental, framework.AllOrNothing} {
		fine, coarse := conflicts[modeName(framework.Fine, txn)], conflicts[modeName(framework.Coarse, txn)]
		for seed, n := range fine {
			t.Logf("%s, seed %d: fine %v conflicts, coarse %v", txn, seed, n, coarse[seed])
			if coarse[seed] < n {
				t.Errorf("%s, seed %d: coarse %v conflicts, fewer than fine's %v", txn, seed, coarse[seed], n)
			}
		}
	}
}

// Two runners: both run every point and seed, and the report compares
// them.
func TestCompare(t *testing.T) {
	sw, _ := LookupSweep("tjob-sweep")
	calls := 0
	counting := func(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error) {
		calls++
		return InMemory(ctx, cfg, src)
	}
	base := DefaultParams()
	w := smallWorkload(t, "testdata/small.yaml")
	base.Horizon = w.Span
	res := runExperiment(t, &Experiment{Sweep: sw, XS: []float64{0.1, 1}, Base: base, Workload: w, Seeds: []uint64{1, 2},
		Runners: []NamedRunner{{Name: MemoryRunner, Run: InMemory}, {Name: "store", Run: counting}}})
	if calls != 4 || len(res.Runs) != 8 || len(res.Summary) != 8 {
		t.Fatalf("%d calls of the second runner, %d runs, %d summaries", calls, len(res.Runs), len(res.Summary))
	}
	report := res.report()
	if !strings.Contains(report, "## Compare: store against memory") || !strings.Contains(report, "| 1 |") {
		t.Errorf("no comparison in the report:\n%s", report)
	}
	for i, s := range res.Summary[:4] {
		if other := res.Summary[4+i]; other.Runner != "store" || other.Mean["placements"] != s.Mean["placements"] {
			t.Errorf("the same simulator by two names differs: %+v, %+v", s, other)
		}
	}
}

// A Command's own runners get their flags on the sweep's flag set; an
// exclusive runner's runs go alone.
func TestCommandRunners(t *testing.T) {
	var inFlight, overlaps atomic.Int32
	var delay *time.Duration
	tracked := func(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		return InMemory(ctx, cfg, src)
	}
	alone := func(ctx context.Context, cfg sim.Config, src workload.Source) (*sim.Stats, error) {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inFlight.Add(-1)
		time.Sleep(*delay) // long enough for another run to start beside it, if one could
		if inFlight.Load() > 1 {
			overlaps.Add(1)
		}
		return InMemory(ctx, cfg, src)
	}
	c := Command{Name: "troupe sim", Stdout: io.Discard, Stderr: io.Discard, Runners: map[string]CLIRunner{
		"slow": {New: func(fs *flag.FlagSet) Runner {
			delay = fs.Duration("slow-delay", 0, "")
			return alone
		}, Exclusive: true},
		"tracked": {New: func(*flag.FlagSet) Runner { return tracked }},
	}}
	dir := t.TempDir()
	err := c.Run(t.Context(), []string{"sweep", "tjob-sweep", "-config", "testdata/small.yaml", "-x", "0.1,1", "-seeds", "2",
		"-runner", "tracked", "-compare", "slow", "-slow-delay", "50ms", "-parallel", "4", "-out", dir})
	if err != nil {
		t.Fatal(err)
	}
	if *delay != 50*time.Millisecond || overlaps.Load() != 0 {
		t.Errorf("delay %v, %d exclusive runs with another beside them", *delay, overlaps.Load())
	}
	report, _ := os.ReadFile(filepath.Join(dir, ReportMD))
	if !strings.Contains(string(report), "## Compare: slow against tracked") {
		t.Errorf("no comparison in the report:\n%s", report)
	}
}

// A single run prints the simulator's stats as JSON, as troupe sim
// always has.
func TestSingleRun(t *testing.T) {
	out, _ := command(t, "-config", "testdata/small.yaml", "-batch", "2", "-conflict", "coarse", "-seed", "3", "-cell-scale", "2")
	var st sim.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	checkJSONNames(t, "troupe sim's output", []byte(out))
	span := smallWorkload(t, "testdata/small.yaml").Span
	if len(st.Schedulers) != 3 || st.Schedulers[0].Placements == 0 || seconds(st.DurationSeconds) > span {
		t.Fatalf("stats %+v", st)
	}
}

// -cell-scale resizes a synthetic cell, shape by shape, and says so.
func TestCellScale(t *testing.T) {
	w, err := WorkloadFlags{Config: "testdata/small.yaml", Compress: 1, CellScale: 0.5}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Cell) != 12 || !strings.Contains(w.Desc, "× 0.5") || describeCell(w.Cell) != "12 machines (10 × 8 cores, 32 GiB; 2 × 16 cores, 64 GiB); 112 cores, 448 GiB in all" {
		t.Errorf("%s: %s", w.Desc, describeCell(w.Cell))
	}
}

// Bad sweeps and flags are errors that say what is wrong.
func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	cfg := []string{"-config", "testdata/small.yaml", "-out", dir}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep", "tjob_sweep", "-out", dir}, `no sweep "tjob_sweep"`},
		{[]string{"sweep"}, "name the sweep first"},
		{[]string{"sweep", "-out", dir}, "name the sweep first"},
		{append([]string{"sweep", "tjob-sweep", "-x", "0.1,fast"}, cfg...), `"fast" is not a number`},
		{append([]string{"sweep", "tjob-sweep", "-x", "0,1"}, cfg...), "must be positive"},
		{append([]string{"sweep", "parallel-batch", "-x", "1.5"}, cfg...), "whole number"},
		{append([]string{"sweep", "tjob-sweep", "-seeds", "0"}, cfg...), "-seeds 0"},
		{append([]string{"sweep", "tjob-sweep", "-conflict", "medium"}, cfg...), `-conflict: unknown conflict mode "medium" (fine, coarse, coarse-claims)`},
		{append([]string{"sweep", "tjob-sweep", "-batch-profile", "nope"}, cfg...), `unknown scheduler kind "nope"`},
		{append([]string{"sweep", "tjob-sweep", "-runner", "store"}, cfg...), `no runner "store"`},
		{append([]string{"sweep", "tjob-sweep", "-compare", "memory"}, cfg...), "the runner itself"},
		{[]string{"sweep", "tjob-sweep", "-config", "testdata/small.yaml"}, "-out DIR is required"},
		{[]string{"sweep", "tjob-sweep", "-config", "testdata/small.yaml", "-csv", "x.csv", "-out", dir}, "at most one of"},
		{[]string{"-config", "testdata/small.yaml", "extra"}, "unexpected arguments"},
		{[]string{"-txn", "some"}, `-txn: unknown transaction mode "some" (incremental, gang, atomic`},
		{[]string{"-config", "testdata/small.yaml", "-service", "0"}, "-service 0: no scheduler would serve the workload's service jobs"},
		{[]string{"-config", "testdata/small.yaml", "-policy", "nomad"}, `unknown policy "nomad" (default, google)`},
		{[]string{"-config", "testdata/small.yaml", "-policy", "google", "-max-attempts", "3", "-backoff", "2s"}, "-backoff, -max-attempts: not with -policy google"},
		{[]string{"-config", "testdata/small.yaml", "-from", "1h"}, "past the workload's end"},
		{[]string{"-csv", "x.csv", "-cell-scale", "0.5"}, "for a synthetic workload"},
	} {
		var out, errs bytes.Buffer
		err := Command{Name: "troupe sim", Stdout: &out, Stderr: &errs}.Run(t.Context(), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// A trace's run ends with the trace (a Google trace's last event, a CSV
// trace's last submission), not when its last task would end.
func TestTraceSpan(t *testing.T) {
	const sample = "../../../../shared/traces/google-2011"
	if _, err := os.Stat(sample); err != nil {
		t.Skipf("no Google trace sample: %v", err)
	}
	w, err := WorkloadFlags{Google: sample, Machines: 100, Compress: 1, CellScale: 1}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if w.Span < 11*time.Hour || w.Span > 12*time.Hour {
		t.Fatalf("span of the 11-hour sample: %v", w.Span)
	}
	csv := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(csv, []byte("submit_time,job,task_index,cpu,memory,duration,priority,type\n"+
		"0,a,0,0.25,1,60,1,batch\n90.5,b,0,0.25,1,600,1,service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w, err = (WorkloadFlags{CSV: csv, Machines: 10, Compress: 2, CellScale: 1}).Open(); err != nil || w.Span != 45250*time.Millisecond {
		t.Fatalf("span of a CSV trace whose last job comes at 90.5 s, compressed by 2: %v %v", w, err)
	}
}

// checkJSONNames checks that every name in the JSON b is snake_case and
// that every time and fraction says its unit: no raw nanoseconds.
func checkJSONNames(t *testing.T, what string, b []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	timed := regexp.MustCompile(`wait|busy|duration|backoff|horizon|mtbf|repair|tjob|ttask|time`)
	bad := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) || timed.MatchString(k) && !strings.HasSuffix(k, "_seconds") && !strings.HasSuffix(k, "_fraction") {
					bad[k] = true
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	for k := range bad {
		t.Errorf("%s: %q is not snake_case with its unit", what, k)
	}
}

// Params go through results.json whole: every field, set to a value
// other than its zero, reads back the same (a field added to Params and
// not to paramsJSON fails here).
func TestParamsJSONRoundTrip(t *testing.T) {
	var p Params
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		n++
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			v.Elem().SetInt(1) // Coarse, AllOrNothing: the modes other than the zero one
		case reflect.Int, reflect.Int64:
			if v.Type() == reflect.TypeFor[time.Duration]() {
				v.SetInt(int64(n) * int64(1500*time.Millisecond))
			} else {
				v.SetInt(int64(n))
			}
		case reflect.Float64:
			v.SetFloat(float64(n) + 0.5)
		case reflect.String:
			v.SetString(fmt.Sprintf("s%d", n))
		case reflect.Bool:
			v.SetBool(true)
		default:
			t.Fatalf("Params has a field of kind %v: teach this test and paramsJSON", v.Kind())
		}
	}
	fill(reflect.ValueOf(&p).Elem())
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	checkJSONNames(t, "params", b)
	var back Params
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, p) {
		t.Fatalf("%+v\nread back from %s as\n%+v (%v)", p, b, back, err)
	}
	def := DefaultParams()
	b, _ = json.Marshal(def)
	back = Params{}
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, def) {
		t.Fatalf("defaults %+v read back as %+v (%v)", def, back, err)
	}
}
