package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// publish writes the instance's /schedulers/<name> record every interval
// until ctx ends: registration, heartbeat and counters.
func (s *Scheduler) publish(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var rec *troupev1.SchedulerInfo
	for {
		st := s.Stats()
		next := &troupev1.SchedulerInfo{Metadata: &troupev1.ObjectMeta{Name: s.cfg.Name}, Kind: s.cfg.Kind,
			Heartbeat: timestamppb.New(s.clock.Now()),
			Counters: &troupev1.SchedulerCounters{Attempts: st.Attempts, Conflicts: st.Conflicts, Placements: st.Placements,
				Unschedulable: st.Unschedulable, Busyness: st.Busyness}}
		var err error
		if rec == nil {
			if rec, err = clientlib.Get(ctx, s.c, clientlib.Schedulers, clientlib.Schedulers.Prefix+s.cfg.Name); errors.Is(err, clientlib.ErrNotFound) {
				rec, err = clientlib.Create(ctx, s.c, clientlib.Schedulers, next)
			}
		}
		if err == nil && rec != nil && rec.GetMetadata().GetVersion() != 0 {
			next.Metadata = rec.GetMetadata()
			rec, err = clientlib.Update(ctx, s.c, clientlib.Schedulers, next)
		}
		if err != nil {
			rec = nil // read it again next time
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("publish scheduler record", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

var (
	descAttempts      = prometheus.NewDesc("troupe_scheduler_attempts_total", "Commits a scheduler tried.", []string{"scheduler"}, nil)
	descConflicts     = prometheus.NewDesc("troupe_scheduler_conflicts_total", "Placements that lost to another writer.", []string{"scheduler"}, nil)
	descPlacements    = prometheus.NewDesc("troupe_scheduler_placements_total", "Placements committed.", []string{"scheduler"}, nil)
	descUnschedulable = prometheus.NewDesc("troupe_scheduler_unschedulable_total", "Task decisions that found no machine.", []string{"scheduler"}, nil)
	descFraction      = prometheus.NewDesc("troupe_scheduler_conflict_fraction", "Conflicts per successful placement (Omega).", []string{"scheduler"}, nil)
	descBusyness      = prometheus.NewDesc("troupe_scheduler_busyness", "Fraction of time spent deciding and committing.", []string{"scheduler"}, nil)
	descPerTask       = prometheus.NewDesc("troupe_scheduler_decision_seconds_per_task", "Mean decision time per task.", []string{"scheduler"}, nil)
	descPerJob        = prometheus.NewDesc("troupe_scheduler_decision_seconds_per_job", "Mean decision time per job decision.", []string{"scheduler"}, nil)
	descWait          = prometheus.NewDesc("troupe_scheduler_job_wait_seconds", "Mean time from submission to first attempt.", []string{"scheduler"}, nil)
	descRate          = prometheus.NewDesc("troupe_scheduler_placements_per_second", "Placements per second since start.", []string{"scheduler"}, nil)
)

// Collector exports the instance's statistics in Prometheus format.
func (s *Scheduler) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Scheduler }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAttempts, descConflicts, descPlacements, descUnschedulable, descFraction,
		descBusyness, descPerTask, descPerJob, descWait, descRate} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st, name := c.s.Stats(), c.s.cfg.Name
	for _, m := range []struct {
		d *prometheus.Desc
		t prometheus.ValueType
		v float64
	}{
		{descAttempts, prometheus.CounterValue, float64(st.Attempts)},
		{descConflicts, prometheus.CounterValue, float64(st.Conflicts)},
		{descPlacements, prometheus.CounterValue, float64(st.Placements)},
		{descUnschedulable, prometheus.CounterValue, float64(st.Unschedulable)},
		{descFraction, prometheus.GaugeValue, st.ConflictFraction},
		{descBusyness, prometheus.GaugeValue, st.Busyness},
		{descPerTask, prometheus.GaugeValue, st.DecisionPerTask.Seconds()},
		{descPerJob, prometheus.GaugeValue, st.DecisionPerJob.Seconds()},
		{descWait, prometheus.GaugeValue, st.MeanWait.Seconds()},
		{descRate, prometheus.GaugeValue, st.PlacementsPerSec},
	} {
		ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, name)
	}
}
