// Package clientlib is what every Troupe client links: schedulers,
// controllers, agents and the CLI reach the cell store through it.
//
// # Connection layer
//
// A Client holds one gRPC connection per store endpoint (dialled lazily)
// and sends each call to its current endpoint; a commit or Get whose keys
// live on one shard goes first to that shard's leader, learnt from Status
// in the background (a follower would forward it inside Raft anyway):
//
//	            ┌──────────── Client ─────────────┐
//	Commit ───▶ │ txn_id, route  ─▶ attempt 1 ────┼──▶ shard leader
//	Get         │   │                              │
//	List        │   ▼ Unavailable / Deadline /     │
//	Status      │     ResourceExhausted            │
//	            │   backoff, next endpoint ─▶ 2..N ┼──▶ current endpoint
//	Watch ────▶ │ Watcher: on the endpoint's       ┼──▶ current endpoint
//	            │ WatchStream, reopened from the   │
//	            │ last cursor delivered            │
//	            └──────────────────────────────────┘
//
// Every attempt has its own deadline (Config.AttemptTimeout) under the
// caller's context; failed attempts are retried by RetryPolicy
// (exponential backoff with jitter, bounded attempts). Which failures are
// retried follows from what the store promises (DESIGN.md):
//
//   - Unavailable (node down or without a leader) and DeadlineExceeded of
//     an attempt (outcome unknown) are retried, on the next endpoint;
//     ResourceExhausted (overload: refused, not applied) is retried after
//     the backoff on the same one.
//   - A commit is retried as the same request with the same txn_id: the
//     store remembers each txn_id's outcome and answers a retry of an
//     applied request with it (duplicate=true), so a retry never applies
//     twice. Commit fills in a missing txn_id (NewTxnID) for this.
//   - A conflict (a group that failed its condition or counter bound) is a
//     result in the CommitResponse, never an error and never retried here:
//     the caller re-reads and decides (see Txn). InvalidArgument,
//     FailedPrecondition, PermissionDenied and the like are answers too.
//   - When the caller's context ends, the call returns its error wrapped
//     with what was being done; for a commit that may have been applied
//     the message says the outcome is unknown, and retrying with the same
//     txn_id (within the store's dedupe window) tells.
//
// Errors name the call, the endpoint and the attempts, and wrap the last
// gRPC error, so status.Code(err) still gives its code, and an error the
// store defines (cellstore/storeerr) matches its definition:
// errors.Is(err, storeerr.Frozen), storeerr.Is(err, storeerr.PermissionDenied).
//
// # Watching
//
// List reads a prefix in pages and returns the first page's cursor;
// Watch follows the prefix from a cursor:
//
//	kvs, cursor, err := c.List(ctx, "/bindings/m1/")
//	w := c.Watch(ctx, "/bindings/m1/", cursor)
//	defer w.Close()
//	for {
//		resp, err := w.Next()
//		if errors.Is(err, clientlib.ErrCompacted) {
//			// relist (the changes since cursor are gone)
//		}
//		...
//	}
//
// When a stream breaks (its node stopped, or Unavailable), the Watcher
// reopens it on another endpoint from the last cursor it delivered: cursors
// are revision vectors, the same on every replica, so nothing is skipped
// or repeated. A cursor older than the store's change log ends the watch
// with an error matching ErrCompacted; errors.As gives the
// *CompactedError with the oldest cursor the store can still serve.
//
// The Watchers of a Client share one WatchStream per endpoint (WatchMux):
// a change is received once for all of them. A Watcher whose reader falls
// behind by 4,096 responses or 16 MiB is paused and resumed from its
// cursor, so it neither holds up the others nor loses changes. Against a
// store without WatchStream a Watcher opens a Watch RPC of its own.
//
// # Reading what others wrote
//
// Any client allowed to write under a prefix may bypass this library, so
// what it reads meets the rules of a write through it (the cell's
// ValidationPolicies aside, which judge writes only): Get, List and the
// informers of NewInformer take a value only if it decodes as its kind's
// protobuf, belongs at its key and passes the kind's built-in rules
// (DecodeAt). Anything else is skipped, never fatal: Get returns an
// *UnreadableError; List returns the other objects with an Unreadables
// error naming what it skipped; an informer holds no object at the key,
// logs one error and calls its handlers' OnUnreadable once per spell of
// the key's unreadability (EventRecorder.RecordUnreadable records it as a
// Warning event with reason Unreadable on the key's job or machine), and
// answers Unreadable(key) for readers that would otherwise take the
// key's absence from the cache for its absence from the store.
//
// # Metrics
//
// With Config.Registerer set: troupe_client_requests_total{method,code},
// troupe_client_retries_total{method}, troupe_client_request_seconds{method}
// and troupe_client_conflicts_total (failed groups in commit responses).
package clientlib
