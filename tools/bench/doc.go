// Package bench is the store comparison benchmark's driver: workloads, a
// runner that drives them with N concurrent clients for a duration, latency
// statistics and the JSON result lines. It knows nothing of the systems it
// measures beyond the small System/Session interface; the Troupe
// implementation (over the storev1 gRPC API) lives here, other systems
// (embedded etcd, in tools/benchcompare, a separate module so that etcd
// never enters the main module) and test fakes live with their users.
//
//	Workload ──Op(id, Session)──► op loop per client ──► Session ──► System under test
//	    │                                │
//	    └─ Prepare (preload, untimed)    └─ latency per op ──► Result ──► Reporter (JSON lines)
//
// RunSystem starts a system once per shard count its workloads need
// (ShardsFor: a CrossShardWorkload's own, 4 for place4 and split4; Options.Shards,
// 1 by default, for the others) and stops it before the next start.
// Systems without shards (etcd) ignore the count and are started as
// often, so place4 and split4 get a fresh system on either side.
//
// Usage protocol, per system and workload:
//
//  1. Run opens Workload.Clients() sessions (System.NewSession, client ids
//     0..n-1, which systems spread over their endpoints round-robin),
//  2. calls Workload.Prepare with them (untimed: preloading keys),
//  3. starts every client's op loop at once and stops each when the
//     duration has passed (or after Config.MaxOps ops),
//  4. closes the sessions and returns a Result; a Reporter prints it as
//     {"workload":..,"system":..,"ops_per_sec":..,"p50_ms":..,"p99_ms":..}
//     and, once both compared systems have a result for the workload,
//     {"workload":..,"ratio_ops":..,"ratio_p99":..}; and once Troupe has
//     results for place4 (or split4) and place,
//     {"workload":"place4","vs":"place","system":"troupe","ratio_p50":..,"ratio_p99":..},
//     the cross-shard latencies over the single-shard ones (place on the
//     default one-shard cell).
//
// Besides the JSON lines, each run logs its process CPU per op and, for a
// system that can say (StorageReporter: a Troupe cell in this process),
// what its state databases wrote per op: WAL, memtable flushes and
// compactions, summed over replicas, the write amplification of the
// workload.
//
// An op is one completed commit round trip, whether it committed or met a
// conflict: a conflict is an Outcome, not an error (see Session). Any error
// aborts the run: a benchmark with failed requests measures nothing.
// The Troupe client sends each commit to its shard's leader, learnt from
// Status (TroupeConfig.RouteToLeader), as a leader-aware client does; etcd's
// clients spread over the members and etcd forwards to its leader.
// Retries are the client's business, as in a real client: the Troupe
// session retries a commit that timed out (TroupeConfig.AttemptTimeout) or
// met an unavailable replica with the same txn_id, which the store's
// dedupe makes safe, and the op's latency includes the retries; etcd's
// clientv3 applies its own retry policy.
//
// The workloads:
//
//   - seq: one client, sequential single-key unconditional puts.
//   - cas: Params.Clients clients, compare-version-then-put on random keys
//     among Params.Keys (preloaded), values of Params.ValueSize bytes. Each
//     client keeps the version it last saw for every key (from its writes
//     and from conflicts, which carry the current version); after a
//     conflict it retries the same key with the version it just learned,
//     as an optimistic client re-reads and retries.
//   - place: Params.Clients clients, each op one scheduler-style placement:
//     a new task key that must not exist yet, a binding under a random
//     machine among Params.Machines, and +1 on that machine's counter.
//   - place4: place on a 4-shard Troupe cell with the task, the binding and
//     the counter of each placement on three different shards (client id's
//     job on shard id mod 4, the binding and the counter on two of the
//     other three, at random), so that every commit is a cross-shard
//     transaction. The binding then names another machine than the
//     counter. Machines are chosen per shard, Params.Machines/4 (rounded
//     up) on each.
//   - split4: the three keys of each place4 placement written as three
//     independent single-shard puts sent at once (Session.PutEach), timed
//     together: one round of parallel proposals on three shards, the least
//     any cross-shard commit must do. Its ratio to place is the floor of
//     place4's on the machine at hand.
//   - watch (not in the default list): Params.Watchers watchers (1,000)
//     of one prefix, all opened before the timed part from one position
//     and acknowledged by the system, while Params.Clients writers put
//     random keys among Params.Keys under it, paced to Params.WatchRate
//     commits a second in all if set (-watch-rate, $WATCH_RATE: to
//     compare systems at one commit rate; unpaced, the system whose
//     watchers lag commits more).
//     Each value starts with the writer's clock reading just before it
//     sent the put (same process as the watchers, so the clocks agree);
//     each watcher takes now minus that stamp for every event it gets:
//     commit-to-delivery latency, the commit included, kept in a
//     histogram (1/128 precision). Once the writers stop, every watcher
//     must deliver through the last commit (or be told it fell behind:
//     compacted or cancelled) within max(1 min, 3 durations); each watcher's
//     revisions must rise strictly and cover every committed revision.
//     Events missing at a watcher that was not told are lost, and lost or
//     duplicated events fail the run. Systems offer it through
//     WatchSystem (Troupe: a WatchStream per connection, one connection
//     per endpoint, through clientlib.WatchMux; etcd: clientv3 watches,
//     which share one gRPC stream per client). Its line is
//     {"workload":"watch","system":..,"commit_ops_per_sec":..,"commit_p50_ms":..,
//     "commit_p99_ms":..,"delivery_p50_ms":..,"delivery_p99_ms":..,"events_per_sec":..,
//     "watchers":..,"watch_connections":..,"watch_streams":..,"behind_told":..,"lost":0},
//     and its ratio line adds ratio_events (ratio_ops is of commits,
//     ratio_p99 of delivery p99).
package bench
