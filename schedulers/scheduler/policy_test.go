package scheduler

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// A job's life under the policy, decision by decision: each step gives
// the pending tasks and the outcome of the decision Begin allows, and the
// action the policy must answer.
func TestPolicy(t *testing.T) {
	p := Policy{MaxAttempts: 3, Backoff: time.Second, RetryBase: 10 * time.Millisecond, RetryMax: 35 * time.Millisecond, AbandonAfter: 10}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	conflict := Outcome{Placed: 1, Conflicted: 2}
	steps := []struct {
		name string
		out  Outcome
		want Action
	}{
		{"all placed", Outcome{Placed: 4}, Action{Step: Done}},
		{"conflicts are retried", conflict, Action{Step: Retry}},
		{"again", conflict, Action{Step: Retry}},
		{"the round's third conflicted decision backs off", conflict, Action{Step: BackOff, Delay: 10 * time.Millisecond}},
		{"a new round", conflict, Action{Step: Retry}},
		{"a failed commit backs off longer", Outcome{Err: errors.New("unavailable")}, Action{Step: BackOff, Delay: 20 * time.Millisecond}},
		{"tasks that fit nowhere wait", Outcome{Placed: 1, Unfit: 1}, Action{Step: Wait, Delay: time.Second}},
		{"a stopped job is done", Outcome{Stopped: 2, Unfit: 1}, Action{Step: Done}},
		{"a conflict after waiting is retried", conflict, Action{Step: Retry}},
		{"the tenth decision abandons", conflict, Action{Step: Abandon}},
	}
	var st JobState
	for i, s := range steps {
		if got := p.Begin(&st, 4, true); got != Decide {
			t.Fatalf("step %d (%s): Begin = %v, want decide", i, s.name, got)
		}
		if got := p.After(&st, s.out); got != s.want {
			t.Errorf("step %d (%s): After(%+v) = %+v, want %+v", i, s.name, s.out, got, s.want)
		}
	}
	if st.Decisions() != len(steps) {
		t.Errorf("%d decisions counted, want %d", st.Decisions(), len(steps))
	}
	if got := p.Begin(&st, 0, true); got != Done || st != (JobState{}) {
		t.Errorf("no pending tasks: Begin = %v with state %+v, want done and a fresh state", got, st)
	}
	if got := p.Begin(&st, 2, false); got != Hold || st.Decisions() != 0 {
		t.Errorf("an incomplete gang: Begin = %v after %d decisions, want hold and none", got, st.Decisions())
	}
}

// Back-offs double up to RetryMax, however many there were.
func TestPolicyBackOffCaps(t *testing.T) {
	p := Policy{MaxAttempts: 1, Backoff: time.Second, RetryBase: time.Millisecond, RetryMax: time.Minute}
	var st JobState
	var last time.Duration
	for i := range 200 {
		p.Begin(&st, 1, true)
		a := p.After(&st, Outcome{Conflicted: 1})
		if a.Step != BackOff || a.Delay < last || a.Delay > time.Minute {
			t.Fatalf("back-off %d: %+v after %v", i, a, last)
		}
		last = a.Delay
	}
	if last != time.Minute {
		t.Errorf("back-off settled at %v, want the cap", last)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, p := range []Policy{{}, {MaxAttempts: 1, Backoff: 1, RetryBase: 2, RetryMax: 1}, {MaxAttempts: 1, Backoff: 1, RetryBase: 1, RetryMax: 1, AbandonAfter: -1}} {
		if p.Validate() == nil {
			t.Errorf("%+v validated", p)
		}
	}
}

// A change to a machine wakes a waiting job when the machine takes tasks
// and one of the job's shapes fits its free room.
func TestWakes(t *testing.T) {
	tasks := []*framework.Task{
		{Requests: map[string]int64{framework.CPU: 2000, framework.Memory: 4}},
		{Requests: map[string]int64{framework.CPU: 2000, framework.Memory: 4}},
		{Requests: map[string]int64{framework.CPU: 500, framework.Memory: 16}},
	}
	shapes := Shapes(tasks)
	if len(shapes) != 2 {
		t.Fatalf("shapes %v: want the two distinct requests", shapes)
	}
	machine := func(cpu, mem int64, unschedulable bool, zone string) *framework.Machine {
		return &framework.Machine{Capacity: map[string]int64{framework.CPU: 4000, framework.Memory: 32}, Labels: map[string]string{"zone": zone},
			Allocated: map[string]int64{framework.CPU: 4000 - cpu, framework.Memory: 32 - mem}, Unschedulable: unschedulable}
	}
	w := Waiting{Shapes: shapes, Task: tasks[0]}
	zoned := framework.Profile{Filters: []framework.FilterPlugin{zoneFilter("a")}}
	for _, c := range []struct {
		p    framework.Profile
		m    *framework.Machine
		want bool
	}{
		{framework.Profile{}, machine(2000, 4, false, "b"), true},
		{framework.Profile{}, machine(1000, 16, false, "b"), true},
		{framework.Profile{}, machine(1000, 8, false, "b"), false},
		{framework.Profile{}, machine(4000, 32, true, "a"), false},
		{framework.Profile{}, nil, false},
		// Room, but a machine the job's static filters refuse.
		{zoned, machine(4000, 32, false, "b"), false},
		{zoned, machine(4000, 32, false, "a"), true},
	} {
		if got := Wakes(c.p, w, c.m); got != c.want {
			t.Errorf("Wakes(%d filters, %v, %+v) = %v", len(c.p.Filters), shapes, c.m, got)
		}
	}
}

// zoneFilter is a static filter that passes the machines of one zone.
type zoneFilter string

func (zoneFilter) Name() string { return "zone" }
func (zoneFilter) Static()      {}
func (z zoneFilter) Filter(_ *framework.Task, m *framework.Machine) *framework.Status {
	if m.Labels["zone"] != string(z) {
		return framework.NewStatus(framework.Unschedulable, "zone", "other zone")
	}
	return nil
}

// A job that fits nowhere waits longer each time in a row, up to
// MaxBackoff, and from Backoff again once it places something.
func TestPolicyWaitsGrow(t *testing.T) {
	p := Policy{MaxAttempts: 1, Backoff: time.Second, MaxBackoff: 5 * time.Second, RetryBase: time.Millisecond, RetryMax: time.Second}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var st JobState
	var got []time.Duration
	for _, o := range []Outcome{{Unfit: 1}, {Unfit: 1}, {Unfit: 1}, {Unfit: 1}, {Placed: 1, Unfit: 1}, {Unfit: 1}} {
		p.Begin(&st, 2, true)
		a := p.After(&st, o)
		if a.Step != Wait {
			t.Fatalf("%+v: %+v, want a wait", o, a)
		}
		got = append(got, a.Delay)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, time.Second, 2 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	if (Policy{MaxAttempts: 1, Backoff: 2, MaxBackoff: 1, RetryBase: 1, RetryMax: 1}).Validate() == nil {
		t.Error("MaxBackoff below Backoff validated")
	}
}

// Google's lightweight simulator's policy: every unfinished job goes to
// the back of the queue after 1 s (BackOff, never Retry or Wait), and is
// abandoned at its 101st attempt if nothing of it was ever placed, or
// its 1,001st in all; attempts that placed nothing or conflicted count.
func TestGooglePolicy(t *testing.T) {
	p := GooglePolicy()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	requeue := Action{Step: BackOff, Delay: time.Second}
	// lives runs decisions with the outcomes first (the first decisions)
	// and then, repeated, rest, until the policy does not requeue the
	// job; it returns how many decisions it took and the last action.
	lives := func(first []Outcome, rest Outcome) (int, Action) {
		var st JobState
		for n := 1; n <= 5000; n++ {
			if got := p.Begin(&st, 10, true); got != Decide {
				t.Fatalf("decision %d: Begin = %v", n, got)
			}
			o := rest
			if n <= len(first) {
				o = first[n-1]
			}
			if a := p.After(&st, o); a != requeue {
				if st.Decisions() != n {
					t.Fatalf("%d decisions counted, want %d", st.Decisions(), n)
				}
				return n, a
			}
		}
		t.Fatal("never abandoned")
		return 0, Action{}
	}
	for _, c := range []struct {
		name  string
		first []Outcome
		rest  Outcome
		want  int
	}{
		{"nothing fits", nil, Outcome{Unfit: 10}, 101},
		{"every placement conflicts", nil, Outcome{Conflicted: 10}, 101},
		{"no fit and conflicts in turn", []Outcome{{Unfit: 10}, {Conflicted: 4, Unfit: 6}}, Outcome{Unfit: 10}, 101},
		{"one task placed at the first attempt", []Outcome{{Placed: 1, Unfit: 9}}, Outcome{Unfit: 9}, 1001},
		{"one task placed at the 100th attempt", append(make([]Outcome, 99), Outcome{Placed: 1, Conflicted: 9}), Outcome{Conflicted: 9}, 1001},
	} {
		for i := range c.first {
			if c.first[i] == (Outcome{}) {
				c.first[i] = Outcome{Unfit: 10}
			}
		}
		if n, a := lives(c.first, c.rest); n != c.want || a.Step != Abandon {
			t.Errorf("%s: %v at decision %d, want abandon at %d", c.name, a, n, c.want)
		}
	}
	// A job that places its last tasks is done, whenever it does.
	var st JobState
	for range 500 {
		p.Begin(&st, 10, true)
		p.After(&st, Outcome{Conflicted: 10})
	}
	p.Begin(&st, 10, true)
	if a := p.After(&st, Outcome{Placed: 10}); a.Step != Done {
		t.Errorf("the last tasks placed: %v, want done", a)
	}
	// The production policy waits (woken by room) where Google's backs off.
	d := DefaultPolicy(time.Second)
	st = JobState{}
	d.Begin(&st, 1, true)
	if a := d.After(&st, Outcome{Unfit: 1}); a.Step != Wait {
		t.Errorf("default policy, no fit: %v, want wait", a)
	}
}

func TestPolicyPreset(t *testing.T) {
	for _, name := range PolicyPresets() {
		p, err := PolicyPreset(name, 10*time.Second)
		if err != nil || p.Validate() != nil {
			t.Errorf("preset %q: %+v, %v", name, p, err)
		}
	}
	if p, _ := PolicyPreset("google", time.Minute); p != GooglePolicy() {
		t.Errorf("google preset %+v", p)
	}
	if p, _ := PolicyPreset("default", time.Minute); p != DefaultPolicy(time.Minute) {
		t.Errorf("default preset %+v", p)
	}
	if _, err := PolicyPreset("omega", time.Second); err == nil {
		t.Error("an unknown preset")
	}
	if (Policy{MaxAttempts: 1, Backoff: 1, RetryBase: 1, RetryMax: 1, AbandonUnplacedAfter: -1}).Validate() == nil {
		t.Error("negative AbandonUnplacedAfter validated")
	}
}
