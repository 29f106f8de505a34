package sim

import (
	"slices"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/sim/workload"
)

// Windows of busyness: the Omega paper's figure is the median of
// per-day values; hourly windows show the spread within a run of hours.
const (
	hourWindow = time.Hour
	dayWindow  = 24 * time.Hour
)

// Stats are a run's measures, per scheduler, as the Omega paper and its
// open simulator (google/cluster-scheduler-simulator) define them.
// Times are seconds of virtual time; the JSON names are snake_case with
// their unit, each documented in DESIGN.md (The simulator, Measures).
type Stats struct {
	// DurationSeconds is the virtual time the run covered.
	DurationSeconds float64 `json:"duration_seconds"`
	// CPUUtilisation is the mean fraction of the cell's CPU allocated.
	CPUUtilisation float64 `json:"cpu_allocated_fraction"`
	// Failures counts the machines that failed (Config.Failures).
	Failures int `json:"machine_failures"`
	// Prefill is what the workload's prefill put in the cell at time 0,
	// outside every scheduler's measures (nil: no prefill).
	Prefill *PrefillStats `json:"prefill,omitempty"`
	// Workload is what a trace's reader read: its window, the jobs and
	// tasks replayed and those running at its start, the events skipped
	// and why (nil: a synthetic workload).
	Workload   *workload.Report `json:"workload,omitempty"`
	Schedulers []SchedulerStats `json:"schedulers"`
}

// SchedulerStats are one scheduler's measures.
//
// A decision is one attempt at a job: its snapshot, its decision time,
// and a commit of what it placed. A transaction is a decision's commit
// of at least one claim (one framework.CommitPlan of one job's
// placements): successful if no claim conflicted, failed if at least
// one did, even if others committed (incremental), as in Google's
// simulator. A decision with no claim to commit makes no transaction:
// it found no room.
type SchedulerStats struct {
	Name string `json:"name"`
	// Jobs and Tasks submitted to it.
	Jobs  int `json:"jobs"`
	Tasks int `json:"tasks"`
	// Decisions made: Transactions plus NoRoomDecisions.
	Decisions int `json:"decisions"`
	// Transactions are the decisions that committed claims, and
	// FailedTransactions those of them with a conflicted claim.
	Transactions       int `json:"transactions"`
	FailedTransactions int `json:"failed_transactions"`
	// NoRoomDecisions had no claim to commit: no pending task fitted
	// the snapshot (or, under the gang rule, not every one did).
	NoRoomDecisions int `json:"no_room_decisions"`
	// Placements committed (claims), ConflictedPlacements that lost to
	// another writer, UnschedulableTaskDecisions (a task a decision
	// found no machine for, once per decision).
	Placements                 int `json:"placements"`
	ConflictedPlacements       int `json:"conflicted_placements"`
	UnschedulableTaskDecisions int `json:"unschedulable_task_decisions"`
	// PreemptedTasks of this scheduler evicted by higher-priority ones,
	// LostTasks to machine failures.
	PreemptedTasks int `json:"preempted_tasks"`
	LostTasks      int `json:"lost_tasks"`
	// AbandonedJobs were given up by the policy, UnscheduledJobs still
	// had tasks pending at the end (abandoned or not).
	AbandonedJobs   int `json:"abandoned_jobs"`
	UnscheduledJobs int `json:"unscheduled_jobs"`
	// ConflictFraction is the paper's: failed transactions per
	// successful one (0 with none successful).
	ConflictFraction float64 `json:"conflict_fraction"`
	// ConflictedPlacementsPerPlacement is conflicted claims per
	// committed one.
	ConflictedPlacementsPerPlacement float64 `json:"conflicted_placements_per_placement"`
	// BusySeconds is the decision time of every decision: useful
	// (successful transactions), wasted (failed ones) and no room.
	BusySeconds       float64 `json:"busy_seconds"`
	UsefulBusySeconds float64 `json:"useful_busy_seconds"`
	WastedBusySeconds float64 `json:"wasted_busy_seconds"`
	NoRoomBusySeconds float64 `json:"no_room_busy_seconds"`
	// BusynessFraction is BusySeconds over the run;
	// BusynessDailyMedianFraction the paper's figure, the median of
	// the per-day fractions (a day's busy time over the day, or over
	// the part of it the run covered); the hourly ones are the median,
	// 10th and 90th percentiles of per-hour fractions.
	BusynessFraction             float64 `json:"busyness_fraction"`
	BusynessDailyMedianFraction  float64 `json:"busyness_daily_median_fraction"`
	BusynessHourlyMedianFraction float64 `json:"busyness_hourly_median_fraction"`
	BusynessHourlyP10Fraction    float64 `json:"busyness_hourly_p10_fraction"`
	BusynessHourlyP90Fraction    float64 `json:"busyness_hourly_p90_fraction"`
	// TransactionBusyness* charge only the decisions that made a
	// transaction (useful and wasted time), as Google's simulator does.
	TransactionBusynessFraction            float64 `json:"transaction_busyness_fraction"`
	TransactionBusynessDailyMedianFraction float64 `json:"transaction_busyness_daily_median_fraction"`
	// Wait*: from a job's submission to the start of its first
	// decision, over the DecidedJobs that had one.
	DecidedJobs       int     `json:"decided_jobs"`
	WaitMeanSeconds   float64 `json:"wait_mean_seconds"`
	WaitMedianSeconds float64 `json:"wait_median_seconds"`
	WaitP90Seconds    float64 `json:"wait_p90_seconds"`
	// WaitUntilPlaced*: from a job's submission to the commit that
	// first left none of its tasks pending, over the PlacedJobs that
	// got there.
	PlacedJobs                   int     `json:"placed_jobs"`
	WaitUntilPlacedMeanSeconds   float64 `json:"wait_until_placed_mean_seconds"`
	WaitUntilPlacedMedianSeconds float64 `json:"wait_until_placed_median_seconds"`
	WaitUntilPlacedP90Seconds    float64 `json:"wait_until_placed_p90_seconds"`

	// busy and txnBusy are the decision time charged to each hour, of
	// every decision and of those that made a transaction.
	busy, txnBusy          []time.Duration
	useful, wasted, noRoom time.Duration
	waits, placedWaits     []time.Duration
}

func newStats(scheds []SchedulerConfig) *Stats {
	st := &Stats{}
	for _, sc := range scheds {
		st.Schedulers = append(st.Schedulers, SchedulerStats{Name: sc.Name})
	}
	return st
}

func (st *Stats) submitted(i, tasks int) {
	st.Schedulers[i].Jobs++
	st.Schedulers[i].Tasks += tasks
}

// waited records the wait of a job until its first decision started.
func (st *Stats) waited(i int, d time.Duration) {
	st.Schedulers[i].waits = append(st.Schedulers[i].waits, d)
}

// placedAll records the wait of a job until none of its tasks was
// pending.
func (st *Stats) placedAll(i int, d time.Duration) {
	st.Schedulers[i].placedWaits = append(st.Schedulers[i].placedWaits, d)
}

// decided records a decision of scheduler i from start to end and what
// its commit did.
func (st *Stats) decided(i int, start, end time.Duration, o scheduler.Outcome) {
	s := &st.Schedulers[i]
	s.Decisions++
	s.Placements += o.Placed
	s.ConflictedPlacements += o.Conflicted
	s.UnschedulableTaskDecisions += o.Unfit
	took := end - start
	charge(&s.busy, start, end)
	switch {
	case o.Placed+o.Conflicted+o.Stopped == 0:
		s.NoRoomDecisions++
		s.noRoom += took
		return
	case o.Conflicted > 0:
		s.FailedTransactions++
		s.wasted += took
	default:
		s.useful += took
	}
	s.Transactions++
	charge(&s.txnBusy, start, end)
}

// charge adds the time from start to end to the hours it falls in.
func charge(hours *[]time.Duration, start, end time.Duration) {
	for t := start; t < end; {
		w := int(t / hourWindow)
		for len(*hours) <= w {
			*hours = append(*hours, 0)
		}
		next := min(end, time.Duration(w+1)*hourWindow)
		(*hours)[w] += next - t
		t = next
	}
}

func (st *Stats) abandoned(i int) { st.Schedulers[i].AbandonedJobs++ }

func (st *Stats) preempted(i int) { st.Schedulers[i].PreemptedTasks++ }

func (st *Stats) lost(i int) { st.Schedulers[i].LostTasks++ }

// finish derives the summary figures at the end of a run at now.
func (st *Stats) finish(now time.Duration, jobs map[string]*jobState) {
	st.DurationSeconds = now.Seconds()
	for _, js := range jobs {
		if js.measured && len(js.pending()) > 0 {
			st.Schedulers[js.sched.index].UnscheduledJobs++
		}
	}
	for i := range st.Schedulers {
		s := &st.Schedulers[i]
		if s.Placements > 0 {
			s.ConflictedPlacementsPerPlacement = float64(s.ConflictedPlacements) / float64(s.Placements)
		}
		if ok := s.Transactions - s.FailedTransactions; ok > 0 {
			s.ConflictFraction = float64(s.FailedTransactions) / float64(ok)
		}
		s.UsefulBusySeconds, s.WastedBusySeconds, s.NoRoomBusySeconds = s.useful.Seconds(), s.wasted.Seconds(), s.noRoom.Seconds()
		s.BusySeconds = (s.useful + s.wasted + s.noRoom).Seconds()
		if now > 0 {
			s.BusynessFraction = s.BusySeconds / now.Seconds()
			s.TransactionBusynessFraction = (s.useful + s.wasted).Seconds() / now.Seconds()
		}
		hourly := fractions(s.busy, now, hourWindow)
		s.BusynessHourlyMedianFraction = median(hourly)
		s.BusynessHourlyP10Fraction, s.BusynessHourlyP90Fraction = percentile(hourly, 0.1), percentile(hourly, 0.9)
		s.BusynessDailyMedianFraction = median(fractions(s.busy, now, dayWindow))
		s.TransactionBusynessDailyMedianFraction = median(fractions(s.txnBusy, now, dayWindow))
		s.DecidedJobs = len(s.waits)
		s.WaitMeanSeconds, s.WaitMedianSeconds, s.WaitP90Seconds = mean(s.waits), median(s.waits).Seconds(), percentile(s.waits, 0.9).Seconds()
		s.PlacedJobs = len(s.placedWaits)
		s.WaitUntilPlacedMeanSeconds, s.WaitUntilPlacedMedianSeconds, s.WaitUntilPlacedP90Seconds =
			mean(s.placedWaits), median(s.placedWaits).Seconds(), percentile(s.placedWaits, 0.9).Seconds()
	}
}

// fractions returns the busy fraction of each window of a run of length
// now, from the time charged to each hour: the window's busy time over
// its length, or over the part of it the run covered (the last). Google's
// simulator counts a day's time the same way (its plotting script's
// daily busy fraction).
func fractions(hours []time.Duration, now, window time.Duration) []float64 {
	per := int(window / hourWindow)
	var out []float64
	for w := 0; time.Duration(w)*window < now; w++ {
		var b time.Duration
		for h := w * per; h < (w+1)*per && h < len(hours); h++ {
			b += hours[h]
		}
		out = append(out, b.Seconds()/min(window, now-time.Duration(w)*window).Seconds())
	}
	return out
}

// median is the middle value of xs, or the mean of the two middle ones
// (numpy's median, which Google's plotting script takes); 0 for none.
func median[T float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile is the value at index ⌊(n−1)·p⌋ of xs sorted, as Google's
// simulator takes its 90th percentiles; 0 for none.
func percentile[T float64 | time.Duration](xs []T, p float64) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// mean is the mean of ds in seconds; 0 for none.
func mean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t.Seconds() / float64(len(ds))
}
