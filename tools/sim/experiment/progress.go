package experiment

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// status is a line of progress on a terminal, redrawn in place: per run
// in flight, the virtual time it reached of its horizon, and for all of
// them the events per second and an estimate of the time left. Lines
// printed through it (a finished run's) go above the status line.
type status struct {
	w     io.Writer
	now   func() time.Time
	every time.Duration

	mu    sync.Mutex
	runs  map[int]*runProgress
	drawn time.Time // when the line was last drawn (zero: not on screen)
}

// runProgress is one run in flight.
type runProgress struct {
	label            string
	horizon, virtual time.Duration
	events           uint64
	start            time.Time
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// newStatus returns a status line on w, redrawn at most every every, with
// clock now.
func newStatus(w io.Writer, now func() time.Time, every time.Duration) *status {
	return &status{w: w, now: now, every: every, runs: map[int]*runProgress{}}
}

// start begins run id, labelled label, which ends at horizon of virtual
// time (0: unknown), and returns its progress callback (sim.Config's).
func (s *status) start(id int, label string, horizon time.Duration) func(virtual time.Duration, events uint64) {
	s.mu.Lock()
	s.runs[id] = &runProgress{label: label, horizon: horizon, start: s.now()}
	s.mu.Unlock()
	return func(virtual time.Duration, events uint64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.runs[id]
		if r == nil {
			return
		}
		r.virtual, r.events = virtual, events
		if now := s.now(); now.Sub(s.drawn) >= s.every {
			s.draw(now)
		}
	}
}

// finish ends run id; line, if not empty, is printed above the status.
func (s *status) finish(id int, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, id)
	s.clear()
	if line != "" {
		fmt.Fprintln(s.w, line)
	}
	if len(s.runs) > 0 {
		s.draw(s.now())
	}
}

// clear erases the status line; s.mu is held.
func (s *status) clear() {
	if !s.drawn.IsZero() {
		fmt.Fprint(s.w, "\r\033[K")
		s.drawn = time.Time{}
	}
}

// draw writes the status line; s.mu is held.
func (s *status) draw(now time.Time) {
	ids := make([]int, 0, len(s.runs))
	for id := range s.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var parts []string
	var rate float64
	var left time.Duration
	for _, id := range ids {
		r := s.runs[id]
		el := now.Sub(r.start)
		part := fmt.Sprintf("%s %v", r.label, r.virtual.Round(time.Second))
		if r.horizon > 0 {
			part += fmt.Sprintf(" of %v (%.0f%%)", r.horizon.Round(time.Second), 100*float64(r.virtual)/float64(r.horizon))
			if r.virtual > 0 {
				left = max(left, time.Duration(float64(el)*float64(r.horizon-r.virtual)/float64(r.virtual)))
			}
		}
		if el > 0 {
			rate += float64(r.events) / el.Seconds()
		}
		parts = append(parts, part)
	}
	line := strings.Join(parts, "; ") + fmt.Sprintf("; %.0fk events/s", rate/1000)
	if left > 0 {
		line += fmt.Sprintf("; about %v left", left.Round(time.Second))
	}
	fmt.Fprint(s.w, "\r\033[K"+line)
	s.drawn = now
}
