// Command benchcompare runs the store comparison benchmark: the workloads
// of package tools/bench (seq, cas, place) against a 3-replica Troupe cell
// and then against a 3-member embedded etcd v3.7 cluster, each in this
// process, with clients over gRPC on loopback, and prints one JSON line per
// system and workload plus a ratio line (troupe over etcd) per workload:
//
//	{"workload":"cas","system":"troupe","ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//	{"workload":"cas","system":"etcd","ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//	{"workload":"cas","ratio_ops":..,"ratio_p99":..}
//
// Progress and extra figures (conflicts, mean and max latency) go to
// stderr.
//
// It is a separate Go module (tools/benchcompare/go.mod, with the main
// module replaced by ../..) so that etcd and its dependencies never enter
// the main module. Run it with `make bench-compare` or
//
//	cd tools/benchcompare && DURATION=10s go run . -workloads=seq,cas,place
//
// The systems run one after the other, never at once: each gets the whole
// machine. Both write to temporary directories with fsync on.
package main
