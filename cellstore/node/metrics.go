package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
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

	// The replica's Pebble database (statemachine.StorageMetrics); counters
	// start again when a snapshot's recovery opens a fresh database.
	descStoreWritten = prometheus.NewDesc("troupe_storage_bytes_written_total", "Bytes the shard's state database wrote since it opened, by kind: wal, flush (memtables to tables) and compaction; flush plus compaction over wal is its write amplification.", []string{"shard", "kind"}, nil)
	descStoreFlushes = prometheus.NewDesc("troupe_storage_flushes_total", "Memtable flushes of the shard's state database since it opened.", []string{"shard"}, nil)
	descStoreCompact = prometheus.NewDesc("troupe_storage_compactions_total", "Compactions of the shard's state database since it opened.", []string{"shard"}, nil)
	descStoreL0Files = prometheus.NewDesc("troupe_storage_l0_files", "Tables in level 0 of the shard's state database.", []string{"shard"}, nil)
	descStoreL0Subs  = prometheus.NewDesc("troupe_storage_l0_sublevels", "Sublevels of level 0: the tables a read may look in there.", []string{"shard"}, nil)
	descStoreDebt    = prometheus.NewDesc("troupe_storage_compaction_debt_bytes", "Bytes the shard's state database estimates it must compact to settle.", []string{"shard"}, nil)
	descStoreDisk    = prometheus.NewDesc("troupe_storage_disk_bytes", "Disk space the shard's state database uses.", []string{"shard"}, nil)
)

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descHasLead, descTerm, descApplied, descRaftLog, descRevision, descChgLog, descSnapRecv, descCPUBound,
		descStoreWritten, descStoreFlushes, descStoreCompact, descStoreL0Files, descStoreL0Subs, descStoreDebt, descStoreDisk} {
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
		if m := c.n.stateMachine(ss.GetShard()); m != nil {
			if sm, ok := m.StorageMetrics(); ok {
				collectStorage(ch, sm, shard)
			}
		}
	}
}

// collectStorage reports one replica's state database.
func collectStorage(ch chan<- prometheus.Metric, m statemachine.StorageMetrics, shard string) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, shard)
	}
	counter(descStoreWritten, float64(m.WALBytes), shard, "wal")
	counter(descStoreWritten, float64(m.FlushBytes), shard, "flush")
	counter(descStoreWritten, float64(m.CompactionBytes), shard, "compaction")
	counter(descStoreFlushes, float64(m.Flushes), shard)
	counter(descStoreCompact, float64(m.Compactions), shard)
	gauge(descStoreL0Files, float64(m.L0Files))
	gauge(descStoreL0Subs, float64(m.L0Sublevels))
	gauge(descStoreDebt, float64(m.CompactionDebtBytes))
	gauge(descStoreDisk, float64(m.DiskBytes))
}
