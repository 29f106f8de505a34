// Package memstore is the cell store in memory: the store's own
// transaction engine over an engine.MemStorage, one shard, no Raft, no
// network. The simulator and unit tests use it where a real cell would be
// too slow; it gives the same commit outcomes, versions, revisions and
// watch streams as a one-shard cell, and it is a clientlib.Store, so the
// typed layer, informers, controllers, agents and schedulers run on it.
//
//	Commit ──▶ engine.Apply ──▶ data + change log (the last Retention
//	   │                        revisions, as a replica keeps them)
//	   └─▶ Observe callback          │
//	   └─▶ wake the watches ──▶ Watcher.Next reads the log after its
//	                            cursor: events under its prefix, in
//	                            commit order, batched like the server's
//
// # Watching
//
// Watch follows a prefix from a cursor (from List or an earlier response;
// empty: from now) with the server's semantics: each response holds the
// events of one or more consecutive revisions and the cursor after them;
// revisions without events under the prefix only move the cursor. The
// watches share the store's change log, each with its own position, so a
// commit never waits for a watch: a watch that falls more than
// Config.Retention revisions behind ends with the store's compacted error
// (storeerr.Compacted with a CompactedDetail, as the server sends it;
// clientlib.IsCompacted matches it), never with changes silently lost. There are no progress
// notifications.
//
// # Waiting for the watches
//
// A deterministic test (or a virtual-time driver) commits, then waits
// until every consumer has taken in what it committed, without sleeping:
//
//	go inf.Run(ctx)                   // informers over the store
//	s.WaitForWatches(ctx, 1)          // it has listed and opened its watch
//	clientlib.Create(ctx, s, ...)     // commit
//	s.Quiesce(ctx)                    // every watch has delivered
//	                                  // everything, and its consumer is
//	                                  // back in Next
//	inf.Indexer().Get(key)            // reflects the commit
//
// An informer applies a response (and calls its handlers) before it asks
// for the next, so once its watch is back in Next it has applied every
// revision up to Revision(). Quiesce sees only open watches: an informer
// that is listing again (after a compacted cursor) is not waited for.
package memstore
