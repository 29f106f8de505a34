// Package statemachine runs the transaction engine inside a Dragonboat v4
// on-disk state machine whose state lives in Pebble.
//
// Each replica of each shard owns one Pebble database. Update applies a
// batch of Raft entries, each through engine.ApplyEntry, on two Pebble
// batches committed as one (batchStorage: user data and the change log
// unindexed, the rest indexed) and writes the last applied Raft index
// into the same commit, so data and applied index are always persisted
// together; Open returns that index and Dragonboat replays the entries
// after it. Batches go to Pebble's WAL
// without fsync; Sync fsyncs it, and Dragonboat never compacts its log past
// the last synced index. Snapshots stream every key of a
// Pebble snapshot; recovery loads them into a fresh database directory and
// switches to it atomically through a CURRENT file, so a crash in the middle
// of a recovery leaves the old state intact.
//
// Dragonboat may call Lookup and SaveSnapshot concurrently with Update;
// reads take a read lock on the database handle, which only
// RecoverFromSnapshot replaces.
package statemachine
