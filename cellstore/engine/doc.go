// Package engine is the cell store's transaction engine: a pure,
// deterministic function from (shard state, proposal) to (new state,
// outcome). It has no clock, no randomness and no I/O of its own: time comes
// inside the proposal, and state lives behind the Storage interface, which
// the Raft state machine backs with a Pebble batch and tests and the
// simulator back with memory.
//
//	proposal ──► Apply(storage, proposal) ──► outcome + change set
//	                 │  reads and writes
//	                 ▼
//	              Storage (Pebble indexed batch | MemStorage)
//
// Within a shard the engine keeps, under internal key prefixes:
//
//	d<key>              user data: uvarint version + value
//	l<rev:8 BE>         change log: the ChangeSet of each revision
//	t<txn id>           remembered outcome of a txn_id (TxnRecord)
//	x<expiry:8 BE><id>  expiry index of remembered outcomes: one outcome,
//	x<expiry:8 BE>\xff<seq:8 BE>  or those of one Raft entry (expiryGroup)
//	i<key>              intents of cross-shard transactions on a key (IntentSet)
//	p<txn id>           a cross-shard transaction prepared here (Prepared)
//	q<deadline:8 BE><id> prepared transactions by deadline, for recovery
//	m<name>             shard metadata: revision, log start, clock, prepared count,
//	                    the freeze a backup holds (freeze.go)
//
// A shard's revision counts the proposals that wrote at least one key; a
// key's version is the revision that last wrote it. Groups of one proposal
// apply in order, each seeing the writes of the groups before it; all writes
// of one proposal share one revision. Cross-shard transactions prepare,
// decide and resolve in three kinds of proposals: see twophase.go.
// Backups freeze and thaw shards: see freeze.go.
package engine
