package experiment

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The status line shows each run in flight with its virtual time of its
// horizon, the events per second of all of them and the longest time
// left; it is redrawn at most every interval, and a finished run's line
// goes above it.
func TestStatusLine(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	s := newStatus(&out, func() time.Time { return now }, time.Second)
	a := s.start(0, "x=1 seed 1:", 4*time.Hour)
	b := s.start(1, "x=2 seed 1:", 0)
	now = now.Add(10 * time.Second)
	a(time.Hour, 1_000_000)
	want := "\r\033[Kx=1 seed 1: 1h0m0s of 4h0m0s (25%); x=2 seed 1: 0s; 100k events/s; about 30s left"
	if got := out.String(); got != want {
		t.Fatalf("first draw %q, want %q", got, want)
	}
	out.Reset()
	b(time.Minute, 500_000) // within the second: not drawn
	if out.Len() != 0 {
		t.Fatalf("drawn again within the interval: %q", out.String())
	}
	now = now.Add(time.Second)
	b(2*time.Minute, 1_100_000)
	if got := out.String(); !strings.Contains(got, "x=2 seed 1: 2m0s;") || !strings.Contains(got, "191k events/s") {
		t.Fatalf("second draw %q", got)
	}
	out.Reset()
	s.finish(0, "sweep: 1/2 runs")
	want = "\r\033[Ksweep: 1/2 runs\n\r\033[Kx=2 seed 1: 2m0s; 100k events/s"
	if got := out.String(); got != want {
		t.Fatalf("after a run finished %q, want %q", got, want)
	}
	out.Reset()
	s.finish(1, "")
	if got := out.String(); got != "\r\033[K" {
		t.Fatalf("after the last run %q", got)
	}
}
