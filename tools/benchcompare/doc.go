// Command benchcompare runs the store comparison benchmark: the workloads
// of package tools/bench (seq, cas, place, place4, split4) against a 3-replica
// Troupe cell and then against a 3-member embedded etcd v3.7 cluster, each
// in this process, with clients over gRPC on loopback.
//
// -systems picks the systems, run in the order given (default
// "troupe,etcd"):
//
//   - troupe: a secure cell, as Troupe runs by default (bench.Secure): TLS
//     1.3 with client certificates, every key of every request authorized
//     by the built-in rules (the benchmark's client is an admin).
//   - troupe-noauthz: TLS as troupe, with rules that allow everything
//     (bench.Unauthorized).
//   - troupe-insecure: plaintext, no authorization (bench.Insecure).
//   - etcd: peer and client TLS 1.3 with client certificates
//     (--client-cert-auth, --peer-client-cert-auth), a CA and certificates
//     made with cellstore/pki in the run's directory; etcd's own
//     authentication (RBAC) stays off, as it is unless enabled.
//   - etcd-insecure: plaintext.
//
// Both etcd variants serve gRPC alone on their client ports, HTTP on
// ports of its own (--listen-client-http-urls), as etcd recommends: a
// shared TLS port would put gRPC behind net/http's HTTP/2 server.
//
// It prints one JSON line per system and workload, plus a ratio line
// (troupe over etcd: the secure pair) per workload:
//
//	{"workload":"cas","system":"troupe","ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//	{"workload":"cas","system":"etcd","ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//	{"workload":"cas","ratio_ops":..,"ratio_p50":..,"ratio_p99":..}
//
// and, when the variants run, a cost line per workload and pair as soon
// as both have a result (cost.go): authorization (troupe over
// troupe-noauthz), TLS (troupe-noauthz over troupe-insecure, etcd over
// etcd-insecure), both (troupe over troupe-insecure) and the plaintext
// comparison (troupe-insecure over etcd-insecure):
//
//	{"workload":"cas","what":"authz","num":"troupe","den":"troupe-noauthz","ratio_ops":..,"ratio_p50":..,"ratio_p99":..,"extra_us_per_op":..}
//
// extra_us_per_op is 1/ops_per_sec of num minus that of den, in µs: what
// the difference in throughput means per op.
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
//	cd tools/benchcompare && DURATION=10s go run . -workloads=seq,cas,place -systems troupe,troupe-noauthz,troupe-insecure,etcd,etcd-insecure
//
// The systems run one after the other, never at once: each gets the whole
// machine. All write to temporary directories with fsync on.
//
// With -rounds N (N > 1) they are started together instead, and each
// workload runs in N rounds in which the systems take turns of
// -duration/N; a system's turns are reported as one run (their latencies
// pooled, their ops over their time). A machine whose speed drifts over a
// minute (a shared host) then slows both systems alike, where run one
// after the other the second met a different machine. The price: a
// system's background work (Troupe's Pebble flushes and compactions,
// etcd's snapshots and bbolt commits) runs on into the other's turns, and
// short turns weigh warm-up more, so the throughput workloads' ratios
// differ between the two ways (docs/measurements.md, sixth session: cas
// 1.96-2.05x in rounds against 2.39-2.59x one after the other); seq, one
// client with little background work, is what rounds are for. Watch does
// not run in rounds.
//
//	cd tools/benchcompare && DURATION=10s go run . -workloads=seq,cas,place -rounds 5
//
// With -repeat N the whole comparison runs N times, each run in a process
// of its own (one that has run cells ran the next ones slower), the
// systems in -systems order, then in reverse, and so on, each run with
// its own ratio lines, and it ends with one line per workload compared
// more than once (as a single run does for -systems naming a system
// twice):
//
//	{"workload":"place","runs":6,"ratio_ops":{"min":..,"median":..,"max":..},"ratio_p50":{..},"ratio_p99":{..}}
//
// On a machine whose speed varies from minute to minute, one comparison
// says little: on this project's 2-core VM, etcd's place alone ranged
// 4.7-7.0k ops/s over 16 runs of one binary (docs/measurements.md,
// seventh session). The spread line is the figure to report.
//
//	cd tools/benchcompare && DURATION=10s go run . -workloads=seq,cas,place -repeat 6
package main
