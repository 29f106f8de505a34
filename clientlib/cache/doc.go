// Package cache keeps a client's local copy of part of the cell, in the
// client-go style:
//
//	store ──List──► Indexer ◄──Watch events── store
//	                  │ handlers (OnAdd/OnUpdate/OnDelete)
//	                  ▼
//	               WorkQueue (deduplicating, rate-limited) ──► workers
//
// An Informer lists a prefix, then watches it from the list's cursor into
// an Indexer: objects by key plus secondary indexes (tasks by job,
// bindings by machine, ...). Handlers only enqueue keys; workers take keys
// from the WorkQueue, re-read the Indexer, and act. The Indexer hands out
// copies, so a caller can never change the cached state in place. A value
// the informer cannot decode is skipped: logged once, told to
// Handler.OnUnreadable, and answered by Informer.Unreadable, so that a
// worker does not take the key for absent.
package cache
