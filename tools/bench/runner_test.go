package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memSystem is an in-memory System: one store with a global revision, as
// a single-shard Troupe store behaves. It counts the calls it serves.
type memSystem struct {
	name string

	mu    sync.Mutex
	rev   uint64
	kv    map[string]memValue
	calls map[string]int // method → calls
	// failOn makes the n-th call of the named method fail (0: never).
	failMethod string
	failOn     int
}

type memValue struct {
	version uint64
	value   []byte
}

func newMemSystem(name string) *memSystem {
	return &memSystem{name: name, kv: map[string]memValue{}, calls: map[string]int{}}
}

func (m *memSystem) Name() string { return m.name }

func (m *memSystem) NewSession(context.Context, int) (Session, error) {
	return &memSession{m: m}, nil
}

func (m *memSystem) count(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[method]
}

// call records a call of method; it returns an error if it is to fail.
// m.mu is held.
func (m *memSystem) call(method string) error {
	m.calls[method]++
	if method == m.failMethod && m.calls[method] == m.failOn {
		return errors.New("injected failure")
	}
	return nil
}

type memSession struct{ m *memSystem }

func (s *memSession) Put(_ context.Context, key string, value []byte) (uint64, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("Put"); err != nil {
		return 0, err
	}
	m.rev++
	m.kv[key] = memValue{m.rev, value}
	return m.rev, nil
}

func (s *memSession) PutEach(ctx context.Context, keys []string, value []byte) error {
	return AtOnce(keys, func(_ int, key string) error {
		_, err := s.Put(ctx, key, value)
		return err
	})
}

func (s *memSession) CompareAndPut(_ context.Context, key string, version uint64, value []byte) (Outcome, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("CompareAndPut"); err != nil {
		return Outcome{}, err
	}
	if cur := m.kv[key].version; cur != version {
		m.calls["CompareAndPut.conflict"]++
		return Outcome{Version: cur}, nil
	}
	m.rev++
	m.kv[key] = memValue{m.rev, value}
	return Outcome{Committed: true, Version: m.rev}, nil
}

func (s *memSession) Place(_ context.Context, p Placement) (Outcome, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("Place"); err != nil {
		return Outcome{}, err
	}
	if cur := m.kv[p.Task].version; cur != 0 {
		return Outcome{Version: cur}, nil
	}
	n, _ := strconv.ParseInt(string(m.kv[p.Counter].value), 10, 64)
	m.rev++
	m.kv[p.Task] = memValue{m.rev, p.TaskValue}
	m.kv[p.Binding] = memValue{m.rev, p.BindingValue}
	m.kv[p.Counter] = memValue{m.rev, []byte(strconv.FormatInt(n+p.Delta, 10))}
	return Outcome{Committed: true, Version: m.rev}, nil
}

func (s *memSession) Close() error { return nil }

// stepClock is a fake clock that moves step forward at every reading.
type stepClock struct {
	step time.Duration
	n    atomic.Int64
}

func (c *stepClock) Now() time.Time {
	return time.Unix(0, 0).Add(time.Duration(c.n.Add(1)) * c.step)
}

func testParams() Params {
	return Params{Clients: 4, Keys: 50, ValueSize: 8, Machines: 5, Seed: 7}
}

// TestRunAndReport runs every workload on two fake systems with an op
// bound and fake clocks that tick 1 ms (troupe) and 2 ms (etcd) a
// reading, and checks the counts and the exact result and ratio lines.
func TestRunAndReport(t *testing.T) {
	const maxOps = 100
	ctx := context.Background()
	p := testParams()
	ws, err := ParseWorkloads(DefaultWorkloads, p)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep := NewReporter(&out, "troupe", "etcd")
	systems := []*memSystem{newMemSystem("troupe"), newMemSystem("etcd")}
	for i, sys := range systems {
		clock := &stepClock{step: time.Duration(i+1) * time.Millisecond}
		for _, w := range ws {
			res, err := Run(ctx, sys, w, Config{MaxOps: maxOps, Now: clock.Now})
			if err != nil {
				t.Fatalf("%s/%s: %v", sys.name, w.Name(), err)
			}
			wantOps := int64(w.Clients() * maxOps)
			if res.Ops != wantOps {
				t.Errorf("%s/%s: %d ops, want %d", sys.name, w.Name(), res.Ops, wantOps)
			}
			// The clock is read once at the start, twice per op and once
			// at the end: the elapsed time is 2·ops+1 ticks whatever the
			// interleaving of the clients.
			if want := time.Duration(2*wantOps+1) * clock.step; res.Elapsed != want {
				t.Errorf("%s/%s: elapsed %v, want %v", sys.name, w.Name(), res.Elapsed, want)
			}
			if p50 := res.Latencies.Quantile(0.5); p50 < clock.step {
				t.Errorf("%s/%s: p50 %v below one tick %v", sys.name, w.Name(), p50, clock.step)
			}
			if err := rep.Add(res); err != nil {
				t.Fatal(err)
			}
		}
		// seq: maxOps puts; cas: Keys preload puts, then 4·maxOps
		// compare-and-puts; place and place4: 4·maxOps placements each;
		// split4: 4·maxOps ops of 3 puts.
		if got, want := sys.count("Put"), maxOps+p.Keys+3*p.Clients*maxOps; got != want {
			t.Errorf("%s: %d Put calls, want %d", sys.name, got, want)
		}
		if got, want := sys.count("CompareAndPut"), p.Clients*maxOps; got != want {
			t.Errorf("%s: %d CompareAndPut calls, want %d", sys.name, got, want)
		}
		if got, want := sys.count("Place"), 2*p.Clients*maxOps; got != want {
			t.Errorf("%s: %d Place calls, want %d", sys.name, got, want)
		}
	}

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// troupe's five lines and place4's and split4's comparisons with
	// place, then per workload etcd's line and the ratio.
	wantShape := []string{
		"seq troupe", "cas troupe", "place troupe", "place4 troupe", "place4 vs", "split4 troupe", "split4 vs",
		"seq etcd", "seq ratio", "cas etcd", "cas ratio", "place etcd", "place ratio", "place4 etcd", "place4 ratio",
		"split4 etcd", "split4 ratio",
	}
	if len(lines) != len(wantShape) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(wantShape), out.String())
	}
	resultKeys := []string{"workload", "system", "ops_per_sec", "p50_ms", "p99_ms"}
	ratioKeys := []string{"workload", "ratio_ops", "ratio_p50", "ratio_p99"}
	vsKeys := []string{"workload", "vs", "system", "ratio_p50", "ratio_p99"}
	for i, line := range lines {
		wl, kind, _ := strings.Cut(wantShape[i], " ")
		want := resultKeys
		switch kind {
		case "ratio":
			want = ratioKeys
		case "vs":
			want = vsKeys
		}
		keys, values := jsonKeys(t, line)
		if strings.Join(keys, ",") != strings.Join(want, ",") {
			t.Errorf("line %d %s: keys %v, want %v", i, line, keys, want)
			continue
		}
		if values["workload"] != wl {
			t.Errorf("line %d %s: workload %v, want %s", i, line, values["workload"], wl)
		}
		switch kind {
		case "ratio":
		case "vs":
			if values["vs"] != WorkloadPlace || values["system"] != "troupe" {
				t.Errorf("line %d %s: want a comparison with troupe's place", i, line)
			}
		default:
			if values["system"] != kind {
				t.Errorf("line %d %s: system %v, want %s", i, line, values["system"], kind)
			}
		}
	}

	// seq has one client, so its latencies are exactly one tick and its
	// lines exact: 100 ops in 201 ticks.
	exact := map[int]string{
		0: `{"workload":"seq","system":"troupe","ops_per_sec":497.5,"p50_ms":1,"p99_ms":1}`,
		7: `{"workload":"seq","system":"etcd","ops_per_sec":248.8,"p50_ms":2,"p99_ms":2}`,
		8: `{"workload":"seq","ratio_ops":2,"ratio_p50":0.5,"ratio_p99":0.5}`,
		// Throughput ratios are exact for every workload: same op
		// count, elapsed time in proportion to the tick.
		10: `"ratio_ops":2,`,
		12: `"ratio_ops":2,`,
		14: `"ratio_ops":2,`,
		16: `"ratio_ops":2,`,
	}
	for i, want := range exact {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d is %s, want it to contain %s", i, lines[i], want)
		}
	}
}

// jsonKeys returns the keys of the JSON object in line, in order, and the
// values by key.
func jsonKeys(t *testing.T, line string) ([]string, map[string]any) {
	t.Helper()
	var values map[string]any
	if err := json.Unmarshal([]byte(line), &values); err != nil {
		t.Fatalf("line %q is not a JSON object: %v", line, err)
	}
	dec := json.NewDecoder(strings.NewReader(line))
	var keys []string
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip any
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys, values
}

// TestRunDuration checks the time bound on the fake clock: one client,
// 10 ticks of duration, one tick per reading, stops at the op that ends
// at or after the deadline.
func TestRunDuration(t *testing.T) {
	w, err := NewWorkload(WorkloadSeq, testParams())
	if err != nil {
		t.Fatal(err)
	}
	clock := &stepClock{step: time.Millisecond}
	res, err := Run(context.Background(), newMemSystem("troupe"), w,
		Config{Duration: 10 * time.Millisecond, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Start at tick 1, deadline tick 11; ops end at ticks 3, 5, 7, 9, 11.
	if res.Ops != 5 {
		t.Errorf("%d ops, want 5", res.Ops)
	}
	if res.Elapsed != 11*time.Millisecond {
		t.Errorf("elapsed %v, want 11ms", res.Elapsed)
	}
}

// TestCASConflictsRetrySameKey checks that cas counts conflicts as ops and
// retries a conflicting key with the version the conflict carried.
func TestCASConflictsRetrySameKey(t *testing.T) {
	p := testParams()
	p.Keys = 1 // every client on one key: conflicts are certain
	w, err := NewWorkload(WorkloadCAS, p)
	if err != nil {
		t.Fatal(err)
	}
	sys := newMemSystem("troupe")
	clock := &stepClock{step: time.Millisecond}
	res, err := Run(context.Background(), sys, w, Config{MaxOps: 50, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != int64(p.Clients*50) {
		t.Errorf("%d ops, want %d", res.Ops, p.Clients*50)
	}
	if got := int64(sys.count("CompareAndPut.conflict")); res.Conflicts != got {
		t.Errorf("result counts %d conflicts, the store saw %d", res.Conflicts, got)
	}
	// One revision per preload put and per committed compare-and-put.
	if commits := res.Ops - res.Conflicts; sys.rev != uint64(p.Keys)+uint64(commits) {
		t.Errorf("store at revision %d, want %d preloaded + %d commits", sys.rev, p.Keys, commits)
	}
	// After a conflict a client knows the current version, so its next
	// conflict needs another client's commit in between: each commit
	// causes at most one conflict per other client, and with 4 clients at
	// least a quarter of the ops commit.
	if commits := res.Ops - res.Conflicts; commits < res.Ops/int64(p.Clients) {
		t.Errorf("only %d of %d ops committed", commits, res.Ops)
	}
}

// TestRunStopsOnError checks that the first error of a client ends the
// run and is returned.
func TestRunStopsOnError(t *testing.T) {
	w, err := NewWorkload(WorkloadPlace, testParams())
	if err != nil {
		t.Fatal(err)
	}
	sys := newMemSystem("etcd")
	sys.failMethod, sys.failOn = "Place", 10
	clock := &stepClock{step: time.Millisecond}
	_, err = Run(context.Background(), sys, w, Config{MaxOps: 1000, Now: clock.Now})
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Run returned %v, want the injected failure", err)
	}
	if n := sys.count("Place"); n >= 4*1000 {
		t.Errorf("%d Place calls: the run went on after the error", n)
	}
}

func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := MergeLatencies(ds[50:], ds[:50])
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0.001, time.Millisecond}} {
		if got := l.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := (Latencies{}).Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile = %v, want 0", got)
	}
}

func TestConfigAndParamsValidate(t *testing.T) {
	if err := (Config{}).Validate(); err == nil {
		t.Error("Config{} validated: a run without bound would never end")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if err := DefaultParams().Validate(); err != nil {
		t.Errorf("DefaultParams: %v", err)
	}
	if _, err := ParseWorkloads("seq,nope", DefaultParams()); err == nil {
		t.Error("ParseWorkloads accepted an unknown workload")
	}
	if _, err := ParseWorkloads("seq,seq", DefaultParams()); err == nil {
		t.Error("ParseWorkloads accepted a workload twice")
	}
}
