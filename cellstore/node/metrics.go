package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// raftCollector reports per-shard Raft and state machine figures at scrape
// time.
type raftCollector struct{ n *Node }

var (
	descLeader   = prometheus.NewDesc("troupe_raft_is_leader", "1 if this node leads the shard.", []string{"shard"}, nil)
	descHasLead  = prometheus.NewDesc("troupe_raft_has_leader", "1 if the shard has a known leader.", []string{"shard"}, nil)
	descTerm     = prometheus.NewDesc("troupe_raft_term", "Raft term of the shard.", []string{"shard"}, nil)
	descApplied  = prometheus.NewDesc("troupe_raft_applied_index", "Last Raft index applied by this replica.", []string{"shard"}, nil)
	descRaftLog  = prometheus.NewDesc("troupe_raft_log_entries", "Raft log entries retained by this replica.", []string{"shard"}, nil)
	descRevision = prometheus.NewDesc("troupe_store_revision", "Shard revision on this replica.", []string{"shard"}, nil)
	descChgLog   = prometheus.NewDesc("troupe_store_change_log_revisions", "Revisions kept in the shard's change log.", []string{"shard"}, nil)
	descCPUBound = prometheus.NewDesc("troupe_node_cpu_bound", "1 while the process's CPU limits its commits, so each shard keeps one Raft entry in flight instead of two.", nil, nil)
	descSnapRecv = prometheus.NewDesc("troupe_raft_snapshots_recovered_total", "Snapshots this replica loaded since the process started, to catch up with a log the leader no longer had.", []string{"shard"}, nil)
)

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descHasLead, descTerm, descApplied, descRaftLog, descRevision, descChgLog, descSnapRecv, descCPUBound} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, shard string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, shard)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	if c.n.load != nil {
		ch <- prometheus.MustNewConstMetric(descCPUBound, prometheus.GaugeValue, b2f(c.n.load.Bound()))
	}
	for _, ss := range c.n.Status().GetShards() {
		shard := strconv.Itoa(int(ss.GetShard()))
		gauge(descLeader, b2f(ss.GetIsLeader()), shard)
		gauge(descHasLead, b2f(ss.GetLeaderReplicaId() != 0), shard)
		gauge(descTerm, float64(ss.GetTerm()), shard)
		gauge(descApplied, float64(ss.GetAppliedIndex()), shard)
		gauge(descRevision, float64(ss.GetRevision()), shard)
		ch <- prometheus.MustNewConstMetric(descSnapRecv, prometheus.CounterValue, float64(ss.GetSnapshotsRecovered()), shard)
		if ss.GetLogOldestRevision() > 0 {
			gauge(descChgLog, float64(ss.GetRevision()-ss.GetLogOldestRevision()+1), shard)
		}
		if lr, err := c.n.nh.GetLogReader(ss.GetRaftShardId()); err == nil {
			first, last := lr.GetRange()
			if last >= first {
				gauge(descRaftLog, float64(last-first+1), shard)
			}
		}
	}
}
