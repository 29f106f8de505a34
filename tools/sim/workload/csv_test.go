package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
