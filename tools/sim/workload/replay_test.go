package workload

import (
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
	"time"
)

// countingSource counts the jobs read from it.
type countingSource struct {
	Source
	read int
}

func (c *countingSource) Next() (Job, error) {
	j, err := c.Source.Next()
	if err == nil {
		c.read++
	}
	return j, err
}

func replayJobs() []Job {
	at := func(id string, s time.Duration, d time.Duration) Job {
		return Job{ID: id, Submit: s, Tasks: []Task{{Index: 0, CPU: 100, Memory: 1 << 20, Duration: d}, {Index: 1}}}
	}
	return []Job{at("a", 0, time.Minute), at("b", 10*time.Second, 3), at("c", 20*time.Second, time.Second),
		at("d", 30*time.Second, 0), at("e", 40*time.Second, time.Hour)}
}

func TestWindow(t *testing.T) {
	src := &countingSource{Source: FromJobs(replayJobs())}
	jobs, err := Collect(Window(src, 10*time.Second, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := replayJobs()[1:3]
	want[0].Submit, want[1].Submit = 0, 10*time.Second
	assertJobs(t, jobs, want)
	// It stopped at d, the first job at or after the end.
	if src.read != 4 {
		t.Errorf("read %d jobs from the source, want 4", src.read)
	}
	if jobs, _ := Collect(Window(FromJobs(replayJobs()), 25*time.Second, 0)); len(jobs) != 2 || jobs[0].ID != "d" || jobs[0].Submit != 5*time.Second {
		t.Errorf("window [25s, end): %+v", jobs)
	}
}

func TestCompress(t *testing.T) {
	orig := replayJobs()
	src, err := Compress(FromJobs(orig), 10, 4)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Collect(src)
	if err != nil {
		t.Fatal(err)
	}
	want := replayJobs()
	for i := range want {
		want[i].Submit /= 10
	}
	want[0].Tasks[0].Duration = 15 * time.Second
	want[1].Tasks[0].Duration = 1 // 3ns / 4 stays positive
	want[2].Tasks[0].Duration = 250 * time.Millisecond
	want[4].Tasks[0].Duration = 15 * time.Minute
	assertJobs(t, jobs, want)
	// The source's jobs are left alone.
	assertJobs(t, orig, replayJobs())

	for _, f := range [][2]float64{{0, 1}, {1, -1}, {1, 0}} {
		if _, err := Compress(FromJobs(nil), f[0], f[1]); err == nil {
			t.Errorf("Compress(%v, %v) took the factors", f[0], f[1])
		}
	}
}

func TestFromJobsEOF(t *testing.T) {
	src := FromJobs(replayJobs()[:1])
	if _, err := src.Next(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := src.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last job: %v, want io.EOF", err)
		}
	}
}

// ScaleArrivals speeds up one type's arrivals, keeps the others, and
// hands the merge out in submit order, reading ahead only as far as it
// must.
func TestScaleArrivals(t *testing.T) {
	var in []Job
	for i := range 40 {
		j := Job{ID: fmt.Sprint(i), Submit: time.Duration(i) * time.Second}
		if i%4 == 0 {
			j.Type = Service
		}
		in = append(in, j)
	}
	src := &countingSource{Source: FromJobs(in)}
	scaled, err := ScaleArrivals(src, Batch, 4)
	if err != nil {
		t.Fatal(err)
	}
	first, err := scaled.Next()
	if err != nil || first.ID != "0" || src.read > 2 {
		t.Fatalf("first job %+v, %v, after reading %d", first, err, src.read)
	}
	rest, err := Collect(scaled)
	if err != nil {
		t.Fatal(err)
	}
	got := append([]Job{first}, rest...)
	if len(got) != len(in) {
		t.Fatalf("%d jobs out of %d", len(got), len(in))
	}
	byID := map[string]time.Duration{}
	for i, j := range got {
		if i > 0 && j.Submit < got[i-1].Submit {
			t.Fatalf("job %s at %v after %s at %v", j.ID, j.Submit, got[i-1].ID, got[i-1].Submit)
		}
		byID[j.ID] = j.Submit
	}
	for _, j := range in {
		want := j.Submit
		if j.Type == Batch {
			want /= 4
		}
		if byID[j.ID] != want {
			t.Errorf("job %s (%s) at %v, want %v", j.ID, j.Type, byID[j.ID], want)
		}
	}
	for _, f := range []float64{0, -1, math.Inf(1)} {
		if _, err := ScaleArrivals(FromJobs(nil), Batch, f); err == nil {
			t.Errorf("ScaleArrivals took factor %v", f)
		}
	}
	broken := errors.New("broken")
	failing, _ := ScaleArrivals(failingSource{broken}, Batch, 2)
	if _, err := failing.Next(); !errors.Is(err, broken) {
		t.Errorf("a failing source: %v", err)
	}
}

type failingSource struct{ err error }

func (f failingSource) Next() (Job, error) { return Job{}, f.err }
