package workload

import (
	"container/heap"
	"errors"
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

// Prefill is the source's: the cell starts as full at the window's start.
func (w *window) Prefill() *Prefill { return PrefillOf(w.src) }

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

// Prefill is the source's, its tasks' durations divided too.
func (c *compress) Prefill() *Prefill {
	p := PrefillOf(c.src)
	if p == nil {
		return nil
	}
	q := *p
	q.Jobs = &compress{src: p.Jobs, arrivals: c.arrivals, durations: c.durations}
	return &q
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

// ScaleArrivals multiplies the arrival rate of src's jobs of type typ by
// factor (their submit times are divided by it) and leaves the other
// jobs alone, so the mix changes: ScaleArrivals(src, Batch, 10) plays
// the batch jobs ten times as fast as the services (the Omega paper's
// scaling of λ_jobs(batch)). factor must be positive and finite. Jobs
// come out in submit order (a tie keeps the order read); jobs of the
// other types are held only until the scaled ones have caught up with
// them.
func ScaleArrivals(src Source, typ Type, factor float64) (Source, error) {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("arrival factor %v: must be positive and finite", factor)
	}
	return &scaleArrivals{src: src, typ: typ, factor: factor}, nil
}

type scaleArrivals struct {
	src    Source
	typ    Type
	factor float64
	held   heldJobs
	read   int
	// low bounds the submit time of any job not yet read: the latest
	// submit time read, scaled or not, whichever is less.
	low  time.Duration
	done error // the source's final error once read
}

// Prefill is the source's.
func (s *scaleArrivals) Prefill() *Prefill { return PrefillOf(s.src) }

func (s *scaleArrivals) Next() (Job, error) {
	for s.done == nil && (len(s.held) == 0 || s.held[0].job.Submit > s.low) {
		j, err := s.src.Next()
		if err != nil {
			s.done = err
			break
		}
		s.low = min(j.Submit, scaleDown(j.Submit, s.factor))
		if j.Type == s.typ {
			j.Submit = scaleDown(j.Submit, s.factor)
		}
		heap.Push(&s.held, heldJob{job: j, seq: s.read})
		s.read++
	}
	if len(s.held) == 0 || (s.done != nil && !errors.Is(s.done, io.EOF)) {
		return Job{}, s.done
	}
	return heap.Pop(&s.held).(heldJob).job, nil
}

// heldJob is a job ScaleArrivals holds, in the order it was read.
type heldJob struct {
	job Job
	seq int
}

// heldJobs is a min-heap by (submit time, order read).
type heldJobs []heldJob

func (h heldJobs) Len() int { return len(h) }
func (h heldJobs) Less(i, j int) bool {
	if h[i].job.Submit != h[j].job.Submit {
		return h[i].job.Submit < h[j].job.Submit
	}
	return h[i].seq < h[j].seq
}
func (h heldJobs) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldJobs) Push(x any)   { *h = append(*h, x.(heldJob)) }
func (h *heldJobs) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func scaleDown(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) / f))
}
