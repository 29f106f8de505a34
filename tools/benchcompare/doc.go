// Command benchcompare runs the store comparison benchmark: the workloads
// of package tools/bench (seq, cas, place, place4, split4) against a 3-replica
// Troupe cell and then against a 3-member embedded etcd v3.7 cluster, each
// in this process, with clients over gRPC on loopback, and prints one JSON
// line per system and workload plus a ratio line (troupe over etcd) per
// workload:
//
//	{"workload":"cas","system":"troupe","ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//	{"workload":"cas","system":"etcd","ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//	{"workload":"cas","ratio_ops":..,"ratio_p99":..}
//
// place4 and split4 run on a Troupe cell of their own with 4 shards, every
// place4 commit cross-shard and every split4 op three single-shard commits
// on three shards at once (the other workloads on one of -shards shards, 1
// by default; etcd is started afresh as often); Troupe's place4 and split4
// latencies are compared with its place latencies on one more line each:
//
//	{"workload":"place4","vs":"place","system":"troupe","ratio_p50":..,"ratio_p99":..}
//
// Progress and extra figures (conflicts, mean and max latency) go to
// stderr.
//
// It is a separate Go module (tools/benchcompare/go.mod, with the main
// module replaced by ../..) so that etcd and its dependencies never enter
// the main module. Run it with `make bench-compare` or
//
//	cd tools/benchcompare && DURATION=10s go run . -workloads=seq,cas,place,place4,split4
//
// The systems run one after the other, never at once: each gets the whole
// machine. Both write to temporary directories with fsync on.
package main
