package bench

// watchLine is the JSON form of a watch Result; the field order is the
// format.
type watchLine struct {
	Workload         string  `json:"workload"`
	System           string  `json:"system"`
	CommitOpsPerSec  float64 `json:"commit_ops_per_sec"`
	CommitP50ms      float64 `json:"commit_p50_ms"`
	CommitP99ms      float64 `json:"commit_p99_ms"`
	DeliveryP50ms    float64 `json:"delivery_p50_ms"`
	DeliveryP99ms    float64 `json:"delivery_p99_ms"`
	EventsPerSec     float64 `json:"events_per_sec"`
	Watchers         int     `json:"watchers"`
	WatchConnections int     `json:"watch_connections"`
	WatchStreams     int     `json:"watch_streams"`
	BehindTold       int     `json:"behind_told"`
	Lost             int64   `json:"lost"`
}

// watchRatioLine compares two systems' watch results: commit throughput,
// delivery p99 and delivery rate, each Numerator's over Denominator's.
type watchRatioLine struct {
	Workload    string   `json:"workload"`
	RatioOps    *float64 `json:"ratio_ops"`
	RatioP99    *float64 `json:"ratio_p99"`
	RatioEvents *float64 `json:"ratio_events"`
}

// addWatch writes the line of a watch result,
//
//	{"workload":"watch","system":"troupe","commit_ops_per_sec":2000,"commit_p50_ms":4.1,"commit_p99_ms":12.5,
//	 "delivery_p50_ms":6.2,"delivery_p99_ms":20.1,"events_per_sec":2000000,"watchers":1000,
//	 "watch_connections":3,"watch_streams":1000,"behind_told":0,"lost":0}
//
// (one line), the commit figures being the writers' puts and the delivery
// figures commit-to-delivery at every watcher; and, once both compared
// systems have one,
//
//	{"workload":"watch","ratio_ops":1.1,"ratio_p99":0.8,"ratio_events":1.1}
//
// with ratio_ops of commits a second and ratio_p99 of delivery p99.
func (rep *Reporter) addWatch(r Result) error {
	wr := r.Watch
	if err := rep.write(watchLine{
		Workload:         r.Workload,
		System:           r.System,
		CommitOpsPerSec:  round(r.OpsPerSec(), 1),
		CommitP50ms:      round(ms(r.Latencies.Quantile(0.50)), 3),
		CommitP99ms:      round(ms(r.Latencies.Quantile(0.99)), 3),
		DeliveryP50ms:    round(ms(wr.Delays.Quantile(0.50)), 3),
		DeliveryP99ms:    round(ms(wr.Delays.Quantile(0.99)), 3),
		EventsPerSec:     round(wr.EventsPerSec(), 1),
		Watchers:         wr.Watchers,
		WatchConnections: wr.Connections,
		WatchStreams:     wr.Streams,
		BehindTold:       wr.BehindTold,
		Lost:             wr.Lost,
	}); err != nil {
		return err
	}
	bySystem := rep.results[r.Workload]
	if bySystem == nil {
		bySystem = map[string]Result{}
		rep.results[r.Workload] = bySystem
	}
	bySystem[r.System] = r
	if r.System != rep.numerator && r.System != rep.denominator {
		return nil
	}
	num, okNum := bySystem[rep.numerator]
	den, okDen := bySystem[rep.denominator]
	if !okNum || !okDen || num.Watch == nil || den.Watch == nil {
		return nil
	}
	return rep.write(watchRatioLine{
		Workload:    r.Workload,
		RatioOps:    ratio(num.OpsPerSec(), den.OpsPerSec()),
		RatioP99:    ratio(ms(num.Watch.Delays.Quantile(0.99)), ms(den.Watch.Delays.Quantile(0.99))),
		RatioEvents: ratio(num.Watch.EventsPerSec(), den.Watch.EventsPerSec()),
	})
}
