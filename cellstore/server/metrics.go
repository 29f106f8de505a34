package server

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Metrics are the server's Prometheus metrics.
type Metrics struct {
	commits       *prometheus.CounterVec // by result: committed, conflict, duplicate, error code
	groupFailures *prometheus.CounterVec // by reason
	commitLatency prometheus.Histogram
	reads         *prometheus.CounterVec
	watchers      prometheus.Gauge
	watchEvents   prometheus.Counter
	compacted     prometheus.Counter
	frozen        prometheus.Counter     // proposals a frozen shard refused
	backupFreeze  prometheus.Histogram   // how long each backup this node drove kept the cell frozen
	denied        *prometheus.CounterVec // requests refused by authorization, by role and method
	throttled     *prometheus.CounterVec // commits refused for their identity's share of MaxInflight, by role
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_store_commits_total", Help: "Commit requests by result: committed (all groups), conflict (some group failed), duplicate, or the gRPC error code.",
		}, []string{"result"}),
		groupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_store_group_failures_total", Help: "Failed commit groups by reason (conflicts are version_mismatch and bound_exceeded).",
		}, []string{"reason"}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "troupe_store_commit_seconds", Help: "Commit latency seen by the server.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_store_reads_total", Help: "Reads by method.",
		}, []string{"method"}),
		watchers:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "troupe_store_watchers", Help: "Open watches, of either watch RPC."}),
		watchEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "troupe_store_watch_events_total", Help: "Events sent to watchers."}),
		compacted:   prometheus.NewCounter(prometheus.CounterOpts{Name: "troupe_store_watch_compacted_total", Help: "Watches refused for a compacted cursor."}),
		frozen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "troupe_store_frozen_refusals_total", Help: "Commit proposals refused by a shard frozen for a backup, and proposed again.",
		}),
		backupFreeze: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "troupe_store_backup_freeze_seconds", Help: "How long each backup this node drove kept the cell frozen (from its FREEZE to its THAW).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_store_permission_denied_total", Help: "Requests refused by authorization (PERMISSION_DENIED), by the caller's role and the method.",
		}, []string{"role", "method"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_store_identity_throttled_total", Help: "Commits refused (RESOURCE_EXHAUSTED) because their caller's identity held its share of the proposals in flight, by role.",
		}, []string{"role"}),
	}
	if reg != nil {
		reg.MustRegister(m.commits, m.groupFailures, m.commitLatency, m.reads, m.watchers, m.watchEvents, m.compacted, m.frozen, m.backupFreeze, m.denied, m.throttled)
	}
	return m
}

func (m *Metrics) observeCommit(resp *storev1.CommitResponse, err error, d time.Duration) {
	m.commitLatency.Observe(d.Seconds())
	if err != nil {
		m.commits.WithLabelValues(status.Code(err).String()).Inc()
		return
	}
	result := "committed"
	if resp.GetDuplicate() {
		result = "duplicate"
	}
	for _, g := range resp.GetGroups() {
		if f := g.GetFailure(); f != nil {
			result = "conflict"
			m.groupFailures.WithLabelValues(reasonLabel(f.GetReason())).Inc()
		}
	}
	m.commits.WithLabelValues(result).Inc()
}

func reasonLabel(r storev1.FailureReason) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "FAILURE_REASON_"))
}
