package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// Known answers for every measure, on workloads small enough to follow
// by hand. Decisions take t_job (t_task 0); a job that fits nowhere
// waits 100 s, or until a task's end makes room for it.

// knownPolicy retries conflicts at once and waits 100 s (no growth)
// when tasks fit nowhere.
var knownPolicy = scheduler.Policy{MaxAttempts: 5, Backoff: 100 * time.Second, MaxBackoff: 100 * time.Second,
	RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second}

// knownConfig is batch schedulers on one machine of cores cores, each
// deciding in tjob.
func knownConfig(schedulers int, cores int64, tjob time.Duration, conflict framework.ConflictMode) Config {
	cfg := Config{Policy: knownPolicy, Seed: 1,
		Machines: []workload.Machine{{Name: "m", CPU: cores * 1000, Memory: cores << 30}}}
	for i := range schedulers {
		cfg.Schedulers = append(cfg.Schedulers, SchedulerConfig{Name: fmt.Sprintf("batch-%d", i), Kind: profiles.Batch,
			Serves: workload.Batch, Modes: &framework.Modes{Conflict: conflict}, Decision: framework.DecisionTime{Job: tjob}})
	}
	return cfg
}

// jobFor returns a batch job that the simulator gives to scheduler i of
// n (by the hash of its ID), submitted at submit, of one-core tasks
// running for durations.
func jobFor(i, n int, name string, submit time.Duration, durations ...time.Duration) workload.Job {
	id := name
	for k := 0; ; k++ {
		h := fnv.New32a()
		h.Write([]byte(id))
		if int(h.Sum32()%uint32(n)) == i {
			break
		}
		id = fmt.Sprintf("%s%d", name, k)
	}
	job := workload.Job{ID: id, Submit: submit, Type: workload.Batch}
	for t, d := range durations {
		job.Tasks = append(job.Tasks, workload.Task{Index: int32(t), CPU: 1000, Memory: 1 << 30, Duration: d})
	}
	return job
}

// want are expected values of a scheduler's measures, by JSON name.
type want map[string]float64

// check compares the measures of s, by their JSON names, with w.
func check(t *testing.T, what string, s SchedulerStats, w want) {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for name, v := range w {
		g, ok := got[name].(float64)
		if !ok {
			t.Errorf("%s: no %s in %s", what, name, b)
			continue
		}
		if math.Abs(g-v) > 1e-9 {
			t.Errorf("%s: %s is %v, want %v", what, name, g, v)
		}
	}
}

// Two schedulers race for a machine of two cores. At 0 s each decides
// about its job: A one task (10 s), B two (30 s), all fitting the empty
// machine; both commit at 1 s, A first, which leaves room for one of B's
// tasks. The run ends at 102 s, when B's 100 s wait (begun at 2 s, and
// cut short by A's task's end) times out.
//
// Fine-grained, incremental: one of B's claims commits, the other
// conflicts: a failed transaction. B retries at once, finds no room (a
// decision without a transaction, 1-2 s) and waits; A's task ends at
// 11 s, which wakes B, whose decision commits at 12 s.
//
// Coarse-grained: B's claims on the machine commit together or not at
// all; A's commit changed the machine, so both conflict. B retries at
// once, finds room for one task and commits it at 2 s (a successful
// transaction, with one task unschedulable), and places the other after
// A's task ends, at 12 s.
func TestKnownRace(t *testing.T) {
	jobs := []workload.Job{jobFor(0, 2, "a", 0, 10*time.Second), jobFor(1, 2, "b", 0, 30*time.Second, 30*time.Second)}
	a := want{"decisions": 1, "transactions": 1, "failed_transactions": 0, "no_room_decisions": 0, "placements": 1,
		"conflicted_placements": 0, "conflict_fraction": 0, "busy_seconds": 1, "useful_busy_seconds": 1, "busyness_fraction": 1.0 / 102,
		"transaction_busyness_fraction": 1.0 / 102, "decided_jobs": 1, "wait_mean_seconds": 0, "placed_jobs": 1,
		"wait_until_placed_mean_seconds": 1, "wait_until_placed_median_seconds": 1, "wait_until_placed_p90_seconds": 1}
	for _, c := range []struct {
		mode framework.ConflictMode
		b    want
	}{
		{framework.Fine, want{"decisions": 3, "transactions": 2, "failed_transactions": 1, "no_room_decisions": 1, "placements": 2,
			"conflicted_placements": 1, "unschedulable_task_decisions": 1, "conflict_fraction": 1, "conflicted_placements_per_placement": 0.5,
			"busy_seconds": 3, "useful_busy_seconds": 1, "wasted_busy_seconds": 1, "no_room_busy_seconds": 1,
			"busyness_fraction": 3.0 / 102, "transaction_busyness_fraction": 2.0 / 102,
			"busyness_daily_median_fraction": 3.0 / 102, "transaction_busyness_daily_median_fraction": 2.0 / 102,
			"busyness_hourly_median_fraction": 3.0 / 102, "busyness_hourly_p10_fraction": 3.0 / 102, "busyness_hourly_p90_fraction": 3.0 / 102,
			"decided_jobs": 1, "wait_mean_seconds": 0, "wait_median_seconds": 0, "wait_p90_seconds": 0,
			"placed_jobs": 1, "wait_until_placed_mean_seconds": 12, "wait_until_placed_median_seconds": 12, "wait_until_placed_p90_seconds": 12,
			"abandoned_jobs": 0, "unscheduled_jobs": 0}},
		{framework.Coarse, want{"decisions": 3, "transactions": 3, "failed_transactions": 1, "no_room_decisions": 0, "placements": 2,
			"conflicted_placements": 2, "unschedulable_task_decisions": 1, "conflict_fraction": 0.5, "conflicted_placements_per_placement": 1,
			"busy_seconds": 3, "useful_busy_seconds": 2, "wasted_busy_seconds": 1, "no_room_busy_seconds": 0,
			"busyness_fraction": 3.0 / 102, "transaction_busyness_fraction": 3.0 / 102,
			"busyness_daily_median_fraction": 3.0 / 102, "transaction_busyness_daily_median_fraction": 3.0 / 102,
			"decided_jobs": 1, "wait_mean_seconds": 0, "placed_jobs": 1, "wait_until_placed_mean_seconds": 12,
			"abandoned_jobs": 0, "unscheduled_jobs": 0}},
	} {
		st := run(t, knownConfig(2, 2, time.Second, c.mode), jobs)
		if st.DurationSeconds != 102 || st.CPUUtilisation <= 0 {
			t.Errorf("%v: ran %vs, CPU allocated %v", c.mode, st.DurationSeconds, st.CPUUtilisation)
		}
		check(t, fmt.Sprintf("mode %v, A", c.mode), st.Schedulers[0], a)
		check(t, fmt.Sprintf("mode %v, B", c.mode), st.Schedulers[1], c.b)
	}
}

// A job whose task fits no machine: decided at 0 s and, after its 100 s
// wait, at 101 s, finding no room each time (no transaction), and
// abandoned after its second decision, at 102 s. Its scheduler was busy
// 2 s of 102, none of them in transactions.
func TestKnownFitsNowhere(t *testing.T) {
	cfg := knownConfig(1, 2, time.Second, framework.Fine)
	cfg.Policy.AbandonAfter = 2
	job := jobFor(0, 1, "big", 0, time.Minute)
	job.Tasks[0].CPU = 4000
	st := run(t, cfg, []workload.Job{job})
	if st.DurationSeconds != 102 {
		t.Errorf("ran %vs, want 102", st.DurationSeconds)
	}
	check(t, "fits nowhere", st.Schedulers[0], want{"jobs": 1, "tasks": 1, "decisions": 2, "transactions": 0, "failed_transactions": 0,
		"no_room_decisions": 2, "placements": 0, "unschedulable_task_decisions": 2, "conflict_fraction": 0,
		"conflicted_placements_per_placement": 0, "busy_seconds": 2, "no_room_busy_seconds": 2, "useful_busy_seconds": 0,
		"busyness_fraction": 2.0 / 102, "transaction_busyness_fraction": 0, "busyness_daily_median_fraction": 2.0 / 102,
		"transaction_busyness_daily_median_fraction": 0, "abandoned_jobs": 1, "unscheduled_jobs": 1,
		"decided_jobs": 1, "wait_mean_seconds": 0, "placed_jobs": 0, "wait_until_placed_mean_seconds": 0, "wait_until_placed_p90_seconds": 0})
}

// A run of two and a half days (60 h) with decisions of an hour, one
// scheduler, no conflicts: jobs at 0 h and 0.5 h (decided 0-1 h and,
// after waiting half an hour, 1-2 h), 23.5 h (decided across midnight,
// half in each day), 30 h, 50 h and 50.5 h (decided 50-51 h and 51-52 h;
// its task runs until 60 h). The days are busy 2.5 h of 24, 1.5 h of 24
// and 2 h of the 12 the run covered: fractions 0.104, 0.0625 and 0.167,
// of median 2.5/24, where the whole run's is 6/60. Of the 60 hours, 5
// are busy throughout, 2 half (23 h and 24 h), 53 not at all.
func TestKnownDays(t *testing.T) {
	h := func(x float64) time.Duration { return time.Duration(x * float64(time.Hour)) }
	var jobs []workload.Job
	for i, at := range []float64{0, 0.5, 23.5, 30, 50, 50.5} {
		d := time.Second
		if i == 5 {
			d = h(8)
		}
		jobs = append(jobs, jobFor(0, 1, fmt.Sprintf("j%d", i), h(at), d))
	}
	st := run(t, knownConfig(1, 8, time.Hour, framework.Fine), jobs)
	if st.DurationSeconds != 60*3600 {
		t.Fatalf("ran %vs, want 60 h", st.DurationSeconds)
	}
	check(t, "days", st.Schedulers[0], want{"decisions": 6, "transactions": 6, "failed_transactions": 0, "busy_seconds": 6 * 3600,
		"busyness_fraction": 0.1, "busyness_daily_median_fraction": 2.5 / 24, "transaction_busyness_fraction": 0.1,
		"transaction_busyness_daily_median_fraction": 2.5 / 24, "busyness_hourly_median_fraction": 0,
		"busyness_hourly_p10_fraction": 0, "busyness_hourly_p90_fraction": 0.5,
		// Waits 0, 0.5 h, 0, 0, 0, 0.5 h; until placed 1, 1.5, 1, 1, 1, 1.5 h.
		"decided_jobs": 6, "wait_mean_seconds": 600, "wait_median_seconds": 0, "wait_p90_seconds": 1800,
		"placed_jobs": 6, "wait_until_placed_mean_seconds": 4200, "wait_until_placed_median_seconds": 3600,
		"wait_until_placed_p90_seconds": 5400})
	if got := fractions(st.Schedulers[0].busy, 60*time.Hour, dayWindow); len(got) != 3 ||
		math.Abs(got[0]-2.5/24) > 1e-12 || math.Abs(got[1]-1.5/24) > 1e-12 || math.Abs(got[2]-2.0/12) > 1e-12 {
		t.Errorf("daily fractions %v, want [2.5/24 1.5/24 2/12]", got)
	}
}

// The summary statistics: numpy's median (the mean of the middle two
// for an even count), Google's percentile (index ⌊(n−1)p⌋), the mean.
func TestQuantiles(t *testing.T) {
	for _, c := range []struct {
		xs           []float64
		med, p10, p9 float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{4, 1}, 2.5, 1, 1},
		{[]float64{5, 1, 3}, 3, 1, 3},
		{[]float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 5.5, 1, 9},
	} {
		if m, p10, p90 := median(c.xs), percentile(c.xs, 0.1), percentile(c.xs, 0.9); m != c.med || p10 != c.p10 || p90 != c.p9 {
			t.Errorf("%v: median %v, p10 %v, p90 %v; want %v, %v, %v", c.xs, m, p10, p90, c.med, c.p10, c.p9)
		}
	}
	if m := mean([]time.Duration{time.Second, 2 * time.Second}); m != 1.5 {
		t.Errorf("mean %v", m)
	}
	if m := median([]time.Duration{time.Second, 2 * time.Second}); m != 1500*time.Millisecond {
		t.Errorf("median %v", m)
	}
}

// The recorder classifies decisions as the simulator does: a decision
// with a claim is a transaction, failed if one conflicted (stopped
// claims are not conflicts); its time counts in the hours it spans.
func TestRecorder(t *testing.T) {
	r := NewRecorder([]SchedulerConfig{{Name: "s"}})
	r.Submitted(0, 4)
	r.Waited(0, 2*time.Second)
	r.Decided(0, 0, 2*time.Second, scheduler.Outcome{Placed: 1, Conflicted: 1})            // failed
	r.Decided(0, 2*time.Second, 3*time.Second, scheduler.Outcome{Unfit: 2})                // no room
	r.Decided(0, 59*time.Minute, 61*time.Minute, scheduler.Outcome{Placed: 1, Stopped: 1}) // successful
	r.Placed(0, 61*time.Minute)
	st := r.Finish(2*time.Hour, []int{1}, 0.5)
	check(t, "recorder", st.Schedulers[0], want{"jobs": 1, "tasks": 4, "decisions": 3, "transactions": 2, "failed_transactions": 1,
		"no_room_decisions": 1, "placements": 2, "conflicted_placements": 1, "unschedulable_task_decisions": 2, "conflict_fraction": 1,
		"busy_seconds": 123, "useful_busy_seconds": 120, "wasted_busy_seconds": 2, "no_room_busy_seconds": 1,
		"busyness_fraction": 123.0 / 7200, "transaction_busyness_fraction": 122.0 / 7200,
		"busyness_hourly_median_fraction": 123.0 / 7200, "busyness_hourly_p10_fraction": 60.0 / 3600,
		"busyness_hourly_p90_fraction": 60.0 / 3600, "unscheduled_jobs": 1,
		"wait_mean_seconds": 2, "wait_until_placed_mean_seconds": 3660})
	if st.CPUUtilisation != 0.5 || st.DurationSeconds != 7200 {
		t.Errorf("%+v", st)
	}
}

// The JSON is snake_case, and every time and fraction says its unit:
// no raw nanoseconds.
func TestStatsJSON(t *testing.T) {
	st := run(t, knownConfig(2, 2, time.Second, framework.Fine),
		[]workload.Job{jobFor(0, 2, "a", 0, 10*time.Second), jobFor(1, 2, "b", 0, 30*time.Second)})
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	keys := map[string]any{}
	for k, v := range top {
		keys[k] = v
	}
	for _, s := range top["schedulers"].([]any) {
		for k, v := range s.(map[string]any) {
			keys[k] = v
		}
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for k, v := range keys {
		if !snake.MatchString(k) {
			t.Errorf("%s is not snake_case", k)
		}
		timed := strings.Contains(k, "wait") || strings.Contains(k, "busy") || strings.Contains(k, "duration")
		if timed && !strings.HasSuffix(k, "_seconds") && !strings.HasSuffix(k, "_fraction") {
			t.Errorf("%s does not say its unit", k)
		}
		if x, ok := v.(float64); ok && x >= 1e6 {
			t.Errorf("%s is %v: nanoseconds?", k, x)
		}
	}
	var back Stats
	if err := json.Unmarshal(b, &back); err != nil || back.Schedulers[1].ConflictFraction != st.Schedulers[1].ConflictFraction ||
		back.DurationSeconds != st.DurationSeconds {
		t.Errorf("read back: %+v, %v", back, err)
	}
}
