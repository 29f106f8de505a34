package cache

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descObjects = prometheus.NewDesc("troupe_cache_objects", "Objects held by a client cache.", []string{"prefix"}, nil)
	descBytes   = prometheus.NewDesc("troupe_cache_bytes", "Encoded size of the objects a client cache holds.", []string{"prefix"}, nil)
	descEvents  = prometheus.NewDesc("troupe_cache_events_total", "Watch events applied to a client cache.", []string{"prefix"}, nil)
	descRelists = prometheus.NewDesc("troupe_cache_relists_total", "Relists of a client cache (compacted cursor, broken watch).", []string{"prefix"}, nil)
	descLag     = prometheus.NewDesc("troupe_cache_watch_lag_seconds", "Time since a client cache's watch last delivered a response.", []string{"prefix"}, nil)
	descSynced  = prometheus.NewDesc("troupe_cache_synced", "1 once a client cache has applied its first list.", []string{"prefix"}, nil)
	descSkipped = prometheus.NewDesc("troupe_cache_unreadable", "Values a client cache skips because it cannot read them (each logged once).",
		[]string{"prefix"}, nil)
)

// Collector exports the informer's figures in Prometheus format, labelled
// with its prefix; register it with the process's registry.
func (in *Informer[T]) Collector() prometheus.Collector { return informerCollector[T]{in} }

type informerCollector[T Object] struct{ in *Informer[T] }

func (c informerCollector[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descObjects, descBytes, descEvents, descRelists, descLag, descSynced, descSkipped} {
		ch <- d
	}
}

func (c informerCollector[T]) Collect(ch chan<- prometheus.Metric) {
	p := c.in.cfg.Prefix
	synced := 0.0
	if c.in.HasSynced() {
		synced = 1
	}
	ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, float64(c.in.indexer.Len()), p)
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(c.in.indexer.Bytes()), p)
	ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(c.in.EventsApplied()), p)
	ch <- prometheus.MustNewConstMetric(descRelists, prometheus.CounterValue, float64(c.in.Relists()), p)
	ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, c.in.WatchLag().Seconds(), p)
	ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, synced, p)
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.GaugeValue, float64(c.in.unreadableCount()), p)
}
