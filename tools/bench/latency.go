package bench

import (
	"math"
	"slices"
	"time"
)

// Latencies is a sorted set of op latencies. A plain sorted slice is exact
// and small enough for runs of seconds (a million ops is 8 MB).
type Latencies struct {
	sorted []time.Duration
}

// MergeLatencies gathers the latencies recorded by several clients.
func MergeLatencies(parts ...[]time.Duration) Latencies {
	var n int
	for _, p := range parts {
		n += len(p)
	}
	all := make([]time.Duration, 0, n)
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return Latencies{sorted: all}
}

// Count is the number of latencies.
func (l Latencies) Count() int { return len(l.sorted) }

// Quantile returns the nearest-rank q-quantile (0 < q <= 1): the smallest
// latency that at least q of all latencies do not exceed. 0 when empty.
func (l Latencies) Quantile(q float64) time.Duration {
	n := len(l.sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	return l.sorted[rank-1]
}

// Mean is the average latency (0 when empty).
func (l Latencies) Mean() time.Duration {
	if len(l.sorted) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range l.sorted {
		sum += d
	}
	return sum / time.Duration(len(l.sorted))
}

// Max is the largest latency (0 when empty).
func (l Latencies) Max() time.Duration {
	if len(l.sorted) == 0 {
		return 0
	}
	return l.sorted[len(l.sorted)-1]
}
