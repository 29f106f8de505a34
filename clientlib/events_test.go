package clientlib_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// clock is a settable clock for recorders.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newRecorder(t *testing.T, s clientlib.Store, clk *clock, tune func(*clientlib.EventRecorderConfig)) *clientlib.EventRecorder {
	t.Helper()
	cfg := clientlib.DefaultEventRecorderConfig("test")
	cfg.Now = clk.Now
	if tune != nil {
		tune(&cfg)
	}
	r, err := clientlib.NewEventRecorder(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// startRecorder runs a recorder on a new in-memory store, with a clock
// at epoch, until the test ends (or after 10 s).
func startRecorder(t *testing.T, tune func(*clientlib.EventRecorderConfig)) (context.Context, clientlib.Store, *clock, *clientlib.EventRecorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	s, clk := newMem(), &clock{now: epoch}
	r := newRecorder(t, s, clk, tune)
	go r.Run(ctx)
	return ctx, s, clk, r
}

// waitStats waits until the recorder's counts satisfy cond.
func waitStats(t *testing.T, ctx context.Context, r *clientlib.EventRecorder, cond func(clientlib.EventStats) bool) {
	t.Helper()
	wait.Until(ctx, t, "the recorder's counts", func() (bool, string) {
		st := r.Stats()
		return cond(st), fmt.Sprintf("recorder stats %+v", st)
	})
}

func listEvents(t *testing.T, s clientlib.Store, k clientlib.Kind[*troupev1.Event], within string) []*troupev1.Event {
	t.Helper()
	es, _, err := clientlib.List(t.Context(), s, k, within)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func TestEventRecorderWritesWhereTheObjectLives(t *testing.T) {
	ctx, s, clk, r := startRecorder(t, nil)
	r.Record("Job", "prod", "web", "web", clientlib.EventNormal, "TasksCreated", "created 3 tasks")
	clk.Advance(time.Second)
	r.Record("Task", "prod", "web", "web-2", clientlib.EventWarning, "Failed", "exit code 1")
	r.Record("Machine", "", "m1", "m1", clientlib.EventWarning, "MachineLost", "lease expired")
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Written == 3 })

	es := listEvents(t, s, clientlib.Events, "prod/web/")
	if len(es) != 2 || es[0].GetReason() != "TasksCreated" || es[1].GetInvolvedName() != "web-2" {
		t.Fatalf("job's events (oldest first): %v", es)
	}
	e := es[1]
	if e.GetJob() != "web" || e.GetType() != clientlib.EventWarning || e.GetCount() != 1 || e.GetSource() != "test" ||
		!e.GetFirstSeen().AsTime().Equal(epoch.Add(time.Second)) || !e.GetLastSeen().AsTime().Equal(e.GetFirstSeen().AsTime()) {
		t.Fatalf("task event: %v", e)
	}
	if es[0].GetMetadata().GetName() >= es[1].GetMetadata().GetName() {
		t.Fatalf("names do not sort by time: %q, %q", es[0].GetMetadata().GetName(), es[1].GetMetadata().GetName())
	}
	if ms := listEvents(t, s, clientlib.MachineEvents, "m1/"); len(ms) != 1 || ms[0].GetMetadata().GetNamespace() != "" || ms[0].GetJob() != "" {
		t.Fatalf("machine's events: %v", ms)
	}
}

func TestEventRecorderAggregatesRepeats(t *testing.T) {
	ctx, s, clk, r := startRecorder(t, func(c *clientlib.EventRecorderConfig) { c.Window = time.Minute })
	fail := func(msg string) {
		r.Record("Task", "prod", "web", "web-0", clientlib.EventWarning, "Failed", msg)
	}
	fail("exit code 1")
	clk.Advance(30 * time.Second)
	fail("exit code 1")
	clk.Advance(30 * time.Second)
	fail("exit code 1") // a minute after the first, 30 s after the last: still aggregated
	fail("exit code 2") // another message: its own event
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Written+st.Aggregated == 4 })
	es := listEvents(t, s, clientlib.Events, "prod/web/")
	if len(es) != 2 || es[0].GetCount() != 3 || es[1].GetCount() != 1 {
		t.Fatalf("events: %v", es)
	}
	if !es[0].GetFirstSeen().AsTime().Equal(epoch) || !es[0].GetLastSeen().AsTime().Equal(epoch.Add(time.Minute)) {
		t.Fatalf("aggregated event seen %v .. %v", es[0].GetFirstSeen().AsTime(), es[0].GetLastSeen().AsTime())
	}

	clk.Advance(2 * time.Minute) // past the window: a new event
	fail("exit code 1")
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Written == 3 })

	// An aggregated event deleted meanwhile (collected) is written anew.
	es = listEvents(t, s, clientlib.Events, "prod/web/")
	if err := clientlib.Delete(ctx, s, clientlib.Events, es[len(es)-1]); err != nil {
		t.Fatal(err)
	}
	fail("exit code 1")
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Written == 4 })
	if st := r.Stats(); st.Aggregated != 2 || st.Failed != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The memory of recent events is bounded: an event pushed out is written
// anew when it repeats.
func TestEventRecorderBoundsRecentEvents(t *testing.T) {
	ctx, _, clk, r := startRecorder(t, func(c *clientlib.EventRecorderConfig) { c.MaxRecent = 2 })
	for _, m := range []string{"a", "b", "c", "a"} {
		clk.Advance(time.Second)
		r.Record("Job", "prod", "web", "web", clientlib.EventNormal, "Note", m)
	}
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Written+st.Aggregated == 4 })
	if st := r.Stats(); st.Written != 4 {
		t.Fatalf("the oldest event should have been forgotten: %+v", st)
	}
	r.Record("Job", "prod", "web", "web", clientlib.EventNormal, "Note", "c") // still remembered
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Aggregated == 1 })
}

// Record never blocks: beyond the queue, and after Run ends, events are
// dropped and counted.
func TestEventRecorderDropsWhenFullOrStopped(t *testing.T) {
	s, clk := newMem(), &clock{now: epoch}
	r := newRecorder(t, s, clk, func(c *clientlib.EventRecorderConfig) { c.QueueSize = 2 })
	for i := range 5 {
		r.Record("Job", "prod", "web", "web", clientlib.EventNormal, "Note", strings.Repeat("x", i+1))
	}
	if st := r.Stats(); st.Dropped != 3 {
		t.Fatalf("stats %+v, want 3 dropped", st)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(runCtx) }()
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Written == 2 })
	stop()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run returned %v", err)
	}
	r.Record("Job", "prod", "web", "web", clientlib.EventNormal, "Note", "late")
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector())
	want := `
# HELP troupe_events_total Events recorded, by source and result: written, aggregated (into an earlier event), dropped (queue full or stopped), failed.
# TYPE troupe_events_total counter
troupe_events_total{result="aggregated",source="test"} 0
troupe_events_total{result="dropped",source="test"} 4
troupe_events_total{result="failed",source="test"} 0
troupe_events_total{result="written",source="test"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "troupe_events_total"); err != nil {
		t.Fatal(err)
	}
	var none *clientlib.EventRecorder
	none.Record("Job", "prod", "web", "web", clientlib.EventNormal, "Note", "nobody listens") // no panic
}

// Events that break the rules are counted as failed, not written.
func TestEventRecorderCountsInvalidEvents(t *testing.T) {
	ctx, s, _, r := startRecorder(t, nil)
	r.Record("Pod", "prod", "web", "web-0", clientlib.EventNormal, "Note", "unknown kind")
	r.Record("Task", "prod", "web", "api-0", clientlib.EventNormal, "Note", "task of another job")
	r.Record("Job", "prod", "web", "web", "Info", "Note", "unknown type")
	waitStats(t, ctx, r, func(st clientlib.EventStats) bool { return st.Failed == 3 })
	if es := listEvents(t, s, clientlib.Events, ""); len(es) != 0 {
		t.Fatalf("written: %v", es)
	}
}

func TestEventRecorderConfigValidate(t *testing.T) {
	cfg := clientlib.DefaultEventRecorderConfig("")
	cfg.QueueSize = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "Source is empty") || !strings.Contains(err.Error(), "QueueSize (0)") {
		t.Fatalf("Validate: %v", err)
	}
	if err := clientlib.DefaultEventRecorderConfig("x").Validate(); err != nil {
		t.Fatal(err)
	}
}
