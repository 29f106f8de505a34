package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// testTimeout bounds a test that would otherwise hang on a bug; nothing
// waits for it to pass.
const testTimeout = 30 * time.Second

// epoch is the fixture's time zero.
var epoch = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// fixture is an aggregator and its server over an in-memory store, whose
// every change a test waits for with settle (the store's Quiesce): no
// sleeps, no timing.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	s     *memstore.Store
	clock *cachetest.Clock
	agg   *Aggregator
	srv   *Server
	web   *httptest.Server
}

// newFixture starts an aggregator over a store seeded by seed, with
// pages of two tasks, and a test server of its pages.
func newFixture(t *testing.T, seed func(f *fixture)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, s: memstore.New(func() time.Time { return epoch }, time.Hour), clock: cachetest.NewClock(epoch)}
	if seed != nil {
		seed(f)
	}
	cfg := DefaultConfig()
	cfg.Now, cfg.MinInterval, cfg.Refresh, cfg.TasksPerPage = f.clock.Now, 0, 0, 2
	var err error
	if f.agg, err = NewAggregator(f.s, cfg); err != nil {
		t.Fatal(err)
	}
	if f.srv, err = NewServer(f.agg, cfg); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.agg.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if err := f.agg.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.s.WaitForWatches(ctx, 9); err != nil {
		t.Fatal(err)
	}
	f.web = httptest.NewServer(f.srv)
	t.Cleanup(f.web.Close)
	return f
}

// settle returns once the aggregator has seen every commit so far.
func (f *fixture) settle() {
	f.t.Helper()
	if err := f.s.Quiesce(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func (f *fixture) machine(name string, cpu int64, phase troupev1.MachinePhase, cordoned bool) {
	f.t.Helper()
	must[*troupev1.Machine](f.t)(clientlib.Create(f.ctx, f.s, clientlib.Machines, &troupev1.Machine{
		Metadata: &troupev1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "z1"}},
		Spec:     &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": cpu, "memory": 8 << 30}, Unschedulable: cordoned},
		Status:   &troupev1.MachineStatus{Phase: phase}}))
}

// alloc adds delta to machine's counter of resource.
func (f *fixture) alloc(machine, resource string, delta int64) {
	f.t.Helper()
	txn := clientlib.NewTxn(f.s)
	txn.Group().Add(clientlib.AllocKey(machine, resource), delta, 0, 1<<40)
	out := must[*clientlib.Outcome](f.t)(txn.Commit(f.ctx))
	if !out.Committed() {
		f.t.Fatalf("alloc %s/%s: %v", machine, resource, out)
	}
}

// job creates job ns/name, made a minute before epoch.
func (f *fixture) job(ns, name string, count int32, status *troupev1.JobStatus) {
	f.t.Helper()
	f.jobAt(ns, name, count, status, epoch.Add(-time.Minute))
}

// jobAt creates job ns/name, made at created.
func (f *fixture) jobAt(ns, name string, count int32, status *troupev1.JobStatus, created time.Time) {
	f.t.Helper()
	must[*troupev1.Job](f.t)(clientlib.Create(f.ctx, f.s, clientlib.Jobs, &troupev1.Job{
		Metadata: &troupev1.ObjectMeta{Name: name, Namespace: ns, Created: timestamppb.New(created)},
		Spec: &troupev1.JobSpec{Scheduler: "batch", Count: count, Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", "echo hi"},
			Requests: map[string]int64{"cpu": 500}}},
		Status: status}))
}

// task creates task i of job ns/name, bound to machine by scheduler
// after wait unless machine is "".
func (f *fixture) task(ns, job string, i int32, machine, scheduler string, wait time.Duration, phase troupev1.TaskPhase) {
	f.t.Helper()
	t := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, i), Namespace: ns},
		Spec: &troupev1.TaskSpec{Job: job, Index: i, Scheduler: "batch", Submitted: timestamppb.New(epoch),
			Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", "secret"}, Requests: map[string]int64{"cpu": 500}}},
		Status: &troupev1.TaskStatus{Phase: phase}}
	if machine != "" {
		t.Binding = &troupev1.TaskBinding{Machine: machine, Scheduler: scheduler, BoundAt: timestamppb.New(epoch.Add(wait))}
	}
	must[*troupev1.Task](f.t)(clientlib.Create(f.ctx, f.s, clientlib.Tasks, t))
}

// record writes scheduler name's record at heartbeat at with counters.
func (f *fixture) record(name string, at time.Time, attempts, conflicts, placements uint64, busyness float64) {
	f.t.Helper()
	info := &troupev1.SchedulerInfo{Metadata: &troupev1.ObjectMeta{Name: name}, Kind: "batch", Heartbeat: timestamppb.New(at),
		Counters: &troupev1.SchedulerCounters{Attempts: attempts, Conflicts: conflicts, Placements: placements, Busyness: busyness}}
	old, err := clientlib.Get(f.ctx, f.s, clientlib.Schedulers, clientlib.Schedulers.Prefix+name)
	if err == nil {
		info.Metadata = old.GetMetadata()
		must[*troupev1.SchedulerInfo](f.t)(clientlib.Update(f.ctx, f.s, clientlib.Schedulers, info))
		return
	}
	must[*troupev1.SchedulerInfo](f.t)(clientlib.Create(f.ctx, f.s, clientlib.Schedulers, info))
}

// event writes an event of job ns/job.
func (f *fixture) event(ns, job, id, reason, source, message string, count int32, at time.Time) {
	f.t.Helper()
	must[*troupev1.Event](f.t)(clientlib.Create(f.ctx, f.s, clientlib.Events, &troupev1.Event{
		Metadata: &troupev1.ObjectMeta{Name: id, Namespace: ns}, InvolvedKind: clientlib.Jobs.Name, InvolvedName: job, Job: job,
		Type: clientlib.EventWarning, Reason: reason, Message: message, Count: count, FirstSeen: timestamppb.New(at), LastSeen: timestamppb.New(at),
		Source: source}))
}

func (f *fixture) lease(machine string, renewed time.Time, d time.Duration) {
	f.t.Helper()
	must[*troupev1.Lease](f.t)(clientlib.Create(f.ctx, f.s, clientlib.Leases, &troupev1.Lease{
		Metadata: &troupev1.ObjectMeta{Name: machine}, Holder: "agent/" + machine, Renewed: timestamppb.New(renewed), Duration: durationpb.New(d)}))
}

// get fetches path from the fixture's server: its status and body.
func (f *fixture) get(path string) (int, string) {
	f.t.Helper()
	resp, err := http.Get(f.web.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// stream is a page's live stream as a test reads it.
type stream struct {
	f    *fixture
	body io.Closer
	r    *bufio.Reader
	// sections are the sections' HTML as last sent; grid what the page
	// would draw.
	sections map[string]string
	grid     []byte
	names    []string
}

// live opens the stream of the page at path.
func (f *fixture) live(path string) *stream {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.web.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		f.t.Fatalf("%s: %s, %s", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	return &stream{f: f, body: resp.Body, r: bufio.NewReader(resp.Body), sections: map[string]string{}}
}

// next reads one event and applies it as the page's script does.
func (s *stream) next() (string, error) {
	var name, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, s.apply(name, data)
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

func (s *stream) apply(name, data string) error {
	switch name {
	case "sections":
		var m map[string]string
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			return err
		}
		for k, v := range m {
			s.sections[k] = v
		}
	case "grid":
		var g gridMessage
		if err := json.Unmarshal([]byte(data), &g); err != nil {
			return err
		}
		if g.Names != nil {
			s.names = g.Names
		}
		if g.Full != nil {
			s.grid = g.Full
		}
		for i := 0; i+2 < len(g.Delta); i += 3 {
			s.grid[2*g.Delta[i]], s.grid[2*g.Delta[i]+1] = byte(g.Delta[i+1]), byte(g.Delta[i+2])
		}
	}
	return nil
}

// until reads events until cond holds of what the page would show; it
// fails the test with what it saw last if the stream ends first (the
// fixture's deadline).
func (s *stream) until(what string, cond func(*stream) error) {
	s.f.t.Helper()
	for {
		err := cond(s)
		if err == nil {
			return
		}
		if _, rerr := s.next(); rerr != nil {
			s.f.t.Fatalf("waiting for the page to show %s: %v (stream: %v)", what, err, rerr)
		}
	}
}

// contains is a condition that section id holds every one of wants.
func contains(id string, wants ...string) func(*stream) error {
	return func(s *stream) error {
		for _, w := range wants {
			if !strings.Contains(s.sections[id], w) {
				return fmt.Errorf("section %s has no %q", id, w)
			}
		}
		return nil
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
