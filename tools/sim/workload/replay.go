package workload

import (
	"fmt"
	"io"
	"math"
	"time"
)

// Window keeps the jobs submitted in [from, to) of src's time and moves
// them to start at 0 (Submit - from). to <= 0 means no end. Durations are
// left alone: a task may run past to. It stops reading src at the first
// job at or after to.
func Window(src Source, from, to time.Duration) Source {
	return &window{src: src, from: from, to: to}
}

type window struct {
	src      Source
	from, to time.Duration
}

func (w *window) Next() (Job, error) {
	for {
		j, err := w.src.Next()
		if err != nil {
			return Job{}, err
		}
		if w.to > 0 && j.Submit >= w.to {
			return Job{}, io.EOF
		}
		if j.Submit >= w.from {
			j.Submit -= w.from
			return j, nil
		}
	}
}

// Compress plays src faster: submit times are divided by arrivals and
// task durations by durations (0, "until the end", stays 0; a positive
// duration stays at least 1ns). Compress(src, k, k) is the same workload
// k times faster: the cell's load (demand at any moment) is unchanged and
// the schedulers see k times the job rate, which is how the Omega paper
// loads its schedulers. Compress(src, k, 1) also puts k times the load on
// the cell. Both factors must be positive and finite; 1 leaves the value
// alone.
func Compress(src Source, arrivals, durations float64) (Source, error) {
	for _, f := range []float64{arrivals, durations} {
		if !(f > 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("compression factor %v: must be positive and finite", f)
		}
	}
	return &compress{src: src, arrivals: arrivals, durations: durations}, nil
}

type compress struct {
	src                 Source
	arrivals, durations float64
}

func (c *compress) Next() (Job, error) {
	j, err := c.src.Next()
	if err != nil {
		return Job{}, err
	}
	j.Submit = scaleDown(j.Submit, c.arrivals)
	if c.durations != 1 {
		// The source may share the tasks: copy before changing them.
		tasks := make([]Task, len(j.Tasks))
		for i, t := range j.Tasks {
			if t.Duration > 0 {
				t.Duration = max(scaleDown(t.Duration, c.durations), 1)
			}
			tasks[i] = t
		}
		j.Tasks = tasks
	}
	return j, nil
}

func scaleDown(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) / f))
}
