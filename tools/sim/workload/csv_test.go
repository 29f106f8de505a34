package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const csvHeader = "submit_time,job,task_index,cpu,memory,duration,priority,type\n"

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readCSV(t *testing.T, path string) ([]Job, error) {
	t.Helper()
	r, err := OpenCSV(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return Collect(r)
}

func TestCSVRead(t *testing.T) {
	path := writeFile(t, "w.csv", `# columns in any order; comments and blank lines are skipped
type, job, task_index, submit_time, cpu, memory, duration, priority, match_labels, distinct_machines
batch, a, 0, 0.5, 0.25, 1, 30, 10, , true
batch, a, 2, 0.5, 0.25, 1, , 10, , true

service, b, 0, 1.25, 2, 0.5, 3600, 100, size=full;zone=z1, 0
`)
	jobs, err := readCSV(t, path)
	if err != nil {
		t.Fatal(err)
	}
	assertJobs(t, jobs, []Job{
		{ID: "a", Submit: 500 * time.Millisecond, Type: Batch, Priority: 10, DistinctMachines: true, Tasks: []Task{
			{Index: 0, CPU: 250, Memory: 1 << 30, Duration: 30 * time.Second},
			{Index: 2, CPU: 250, Memory: 1 << 30}}},
		{ID: "b", Submit: 1250 * time.Millisecond, Type: Service, Priority: 100,
			MatchLabels: map[string]string{"size": "full", "zone": "z1"}, Tasks: []Task{
				{Index: 0, CPU: 2000, Memory: 512 << 20, Duration: time.Hour}}},
	})
}

// TestCSVRoundTrip writes generated jobs and reads them back, gzipped.
func TestCSVRoundTrip(t *testing.T) {
	gen, err := NewGenerator(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	want, err := Collect(gen)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	n, err := WriteCSV(zw, FromJobs(want))
	if err != nil || n != len(want) {
		t.Fatalf("wrote %d of %d jobs: %v", n, len(want), err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readCSV(t, writeFile(t, "w.csv.gz", buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	assertJobs(t, got, want)
}

func TestCSVMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line       int
		column     int // 0: the row as a whole
		want       string
	}{
		{"no header", "", 0, 0, "no header row"},
		{"unknown column", "submit_time,job,task_index,cpus\n", 1, 4, "column 4 (cpus): unknown column"},
		{"missing column", "submit_time,job,task_index,cpu,memory,duration,priority\n", 1, 0, "lacks column type"},
		{"column twice", "job,job\n", 1, 2, "column named twice"},
		{"field count", csvHeader + "0,a,0,1,1,,0,batch\n0,a,1,1,1\n", 3, 0, "wrong number of fields"},
		{"submit", csvHeader + "0,a,0,1,1,,0,batch\nsoon,b,0,1,1,,0,batch\n", 3, 1, `column 1 (submit_time): "soon" is not a number`},
		{"order", csvHeader + "5,a,0,1,1,,0,batch\n4,b,0,1,1,,0,batch\n", 3, 1, "before the previous row's"},
		{"job", csvHeader + "0, ,0,1,1,,0,batch\n", 2, 2, "column 2 (job): empty"},
		{"index", csvHeader + "0,a,-1,1,1,,0,batch\n", 2, 3, "not a non-negative 32-bit integer"},
		{"cpu", csvHeader + "0,a,0,-1,1,,0,batch\n", 2, 4, "column 4 (cpu): -1: must be a non-negative number"},
		{"memory", csvHeader + "0,a,0,1,NaN,,0,batch\n", 2, 5, "column 5 (memory)"},
		{"duration", csvHeader + "0,a,0,1,1,0,0,batch\n", 2, 6, "leave it empty for until the end"},
		{"priority", csvHeader + "0,a,0,1,1,,high,batch\n", 2, 7, `"high" is not a 32-bit integer`},
		{"type", csvHeader + "0,a,0,1,1,,0,cron\n", 2, 8, `type "cron" is neither batch nor service`},
		{"duplicate task", csvHeader + "0,a,0,1,1,,0,batch\n0,a,0,1,1,,0,batch\n", 3, 3, "task 0 of job \"a\" is also at line 2"},
		{"job fields differ", csvHeader + "0,a,0,1,1,,0,batch\n0,a,1,1,1,,5,batch\n", 3, 7, "differs from the first row of job \"a\" (line 2)"},
		{"job not contiguous", csvHeader + "0,a,0,1,1,,0,batch\n0,b,0,1,1,,0,batch\n0,a,1,1,1,,0,batch\n", 4, 2, "job \"a\" started at line 2"},
		{"labels", "submit_time,job,task_index,cpu,memory,duration,priority,type,match_labels\n0,a,0,1,1,,0,batch,ssd\n", 2, 9, `"ssd" is not key=value`},
		{"distinct", "submit_time,job,task_index,cpu,memory,duration,priority,type,distinct_machines\n0,a,0,1,1,,0,batch,maybe\n", 2, 9, "not true, false, 1 or 0"},
		// The cell's rules for names, priorities and labels.
		{"job uppercase", csvHeader + "0,a,0,1,1,,0,batch\n1,Web,0,1,1,,0,batch\n", 3, 2, `job ID "Web": must be 1-200 lowercase letters, digits, '-' and '.'`},
		{"job underscore", csvHeader + "0,j_1,0,1,1,,0,batch\n", 2, 2, `job ID "j_1"`},
		{"job slash", csvHeader + "0,a/b,0,1,1,,0,batch\n", 2, 2, `job ID "a/b"`},
		{"job dot end", csvHeader + "0,a.,0,1,1,,0,batch\n", 2, 2, `job ID "a."`},
		{"job too long", csvHeader + "0," + strings.Repeat("j", 201) + ",0,1,1,,0,batch\n", 2, 2, "must be 1-200"},
		{"priority range", csvHeader + "0,a,0,1,1,,1001,batch\n", 2, 7, "1001 is not in [0, 1000]"},
		{"negative priority", csvHeader + "0,a,0,1,1,,-1,batch\n", 2, 7, "-1 is not in [0, 1000]"},
		{"label key", "submit_time,job,task_index,cpu,memory,duration,priority,type,match_labels\n0,a,0,1,1,,0,batch,-ssd=1\n", 2, 9, `label "-ssd": its name must be`},
		{"label prefix", "submit_time,job,task_index,cpu,memory,duration,priority,type,match_labels\n0,a,0,1,1,,0,batch,Troupe.IO/ssd=1\n", 2, 9, "its prefix must be a DNS subdomain"},
		{"label value", "submit_time,job,task_index,cpu,memory,duration,priority,type,match_labels\n0,a,0,1,1,,0,batch,disk=s s d\n", 2, 9, "label disk=s s d: the value must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readCSV(t, writeFile(t, "w.csv", tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if tc.line == 0 {
				return
			}
			var re *RowError
			if errors.As(err, &re) {
				if re.Line != tc.line || re.Column != tc.column || !strings.HasSuffix(re.File, "w.csv") {
					t.Errorf("error at %s line %d column %d, want w.csv line %d column %d", re.File, re.Line, re.Column, tc.line, tc.column)
				}
			} else if want := fmt.Sprintf("line %d", tc.line); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
}

// TestCSVErrorIsFinal checks that a malformed row fails the job before
// it too (the row may have been its task) and every Next after.
func TestCSVErrorIsFinal(t *testing.T) {
	r, err := OpenCSV(writeFile(t, "w.csv", csvHeader+"0,a,0,1,1,,0,batch\n1,b,0,x,1,,0,batch\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	j, err := r.Next()
	if err == nil {
		t.Fatalf("job %+v read with the bad row after it", j)
	}
	if _, err2 := r.Next(); err2 != err {
		t.Errorf("second Next: %v, want the first error %v again", err2, err)
	}
}

// TestCSVNames: IDs and labels the cell takes are read.
func TestCSVNames(t *testing.T) {
	jobs, err := readCSV(t, writeFile(t, "w.csv", "submit_time,job,task_index,cpu,memory,duration,priority,type,match_labels\n"+
		"0,etl-7.part-2,0,1,1,,1000,batch,troupe.io/disk=ssd_1;Zone=z-1\n0,"+strings.Repeat("a", 200)+",0,1,1,,0,batch,empty=\n"))
	if err != nil || len(jobs) != 2 || jobs[0].MatchLabels["troupe.io/disk"] != "ssd_1" || jobs[1].MatchLabels["empty"] != "" {
		t.Fatalf("jobs %+v: %v", jobs, err)
	}
}

// TestReadCSVWindow: the jobs submitted in the window, moved to start
// at 0; those before and after it counted; the report of what was read.
func TestReadCSVWindow(t *testing.T) {
	path := writeFile(t, "w.csv", csvHeader+"0,a,0,1,1,30,0,batch\n0,a,1,1,1,30,0,batch\n10,b,0,1,1,,0,service\n"+
		"20,c,0,1,1,5,0,batch\n30,d,0,1,1,5,0,batch\n30,d,1,1,1,5,0,batch\n30,d,2,1,1,5,0,batch\n")
	tr, err := ReadCSV(path, 10*time.Second, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 2 || tr.Jobs[0].ID != "b" || tr.Jobs[0].Submit != 0 || tr.Jobs[1].Submit != 10*time.Second || tr.Running != nil {
		t.Errorf("jobs %+v, running %+v", tr.Jobs, tr.Running)
	}
	want := Report{Trace: "CSV trace " + path, Events: 7, First: 0, Last: 30 * time.Second, From: 10 * time.Second, To: 30 * time.Second,
		InWindow: 2, Jobs: 2, Tasks: 2, Skipped: []Skip{{SkipBefore, 2, 2}, {SkipAfter, 3, 3}}}
	if !reflect.DeepEqual(tr.Report, want) {
		t.Errorf("report\n%+v, want\n%+v", tr.Report, want)
	}
	if src := tr.Source(); PrefillOf(src) != nil || ReportOf(src) != &tr.Report {
		t.Error("source: a prefill, or not the report")
	}
	// The whole file.
	if tr, err = ReadCSV(path, 0, 0); err != nil || len(tr.Jobs) != 4 || tr.Report.Skipped != nil || tr.Report.InWindow != 7 {
		t.Errorf("whole file: %+v: %v", tr, err)
	}
	for _, tc := range []struct {
		from, to time.Duration
		want     string
	}{
		{31 * time.Second, 0, "it starts at 31s, after the last submission, at 30s"},
		{11 * time.Second, 19 * time.Second, "no job is submitted in [11s, 19s) (submissions from 0s to 30s)"},
	} {
		if _, err := ReadCSV(path, tc.from, tc.to); !errors.Is(err, ErrWindow) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("window [%v, %v): %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := ReadCSV(writeFile(t, "e.csv", csvHeader), 0, 0); err == nil || !strings.Contains(err.Error(), "no rows") {
		t.Errorf("header only: %v", err)
	}
	if _, err := ReadCSV(path, 5*time.Second, 5*time.Second); err == nil || !strings.Contains(err.Error(), "need 0 <= from < to") {
		t.Errorf("empty window: %v", err)
	}
}

// TestLoadCell reads a cell: section, of a file of its own or of a
// synthetic config.
func TestLoadCell(t *testing.T) {
	c, err := LoadCell(writeFile(t, "cell.yaml", "cell:\n  zones: 2\n  shapes:\n    - {name: m, count: 3, cpu_cores: 4, memory_gib: 16, labels: {disk: ssd}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ms := c.Machines(); len(ms) != 3 || ms[0].CPU != 4000 || ms[2].Labels["zone"] != "z0" || ms[1].Labels["disk"] != "ssd" {
		t.Errorf("machines %+v", ms)
	}
	if c, err := LoadCell("../../../deploy/sim/omega-cluster-c.yaml"); err != nil || len(c.Machines()) != 12500 {
		t.Errorf("the cell of omega-cluster-c.yaml: %v", err)
	}
	for _, tc := range []struct{ text, want string }{
		{"", "empty file"},
		{"machines: 3\n", "no cell: section"},
		{"cell:\n  shapes:\n    - {name: m, count: 3, cores: 4}\n", "field cores not found"},
		{"cell:\n  shapes:\n    - {name: m, count: 0, cpu_cores: 4, memory_gib: 1}\n", "cell: shapes[0] (m): count 0: must be positive"},
	} {
		if _, err := LoadCell(writeFile(t, "cell.yaml", tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.want)
		}
	}
}
