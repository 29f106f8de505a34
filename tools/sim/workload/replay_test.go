package workload

import (
	"errors"
	"io"
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
