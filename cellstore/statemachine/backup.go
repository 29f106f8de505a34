package statemachine

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"

	"github.com/troupe-cluster/troupe/cellstore/engine"
)

// Backup and restore move a shard's state between cells. A backup is the
// snapshot stream (every key: data, change log, remembered txn outcomes,
// metadata), so keys keep their versions, the shard its revision, change
// log and dedupe records: cursors and txn_ids of the old cell stay
// meaningful in the new one. Only the Raft applied index is reset by
// Restore, because the new cell's Raft log starts from its first entry.

// Backup writes the replica's state at one point in time to w in the
// snapshot stream format and returns the shard revision it holds. It
// holds the database handle's read lock throughout, so a snapshot
// recovery of this replica waits for it; done stops it early.
func (s *StateMachine) Backup(w io.Writer, done <-chan struct{}) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, errors.New("statemachine: closed")
	}
	snap := s.db.NewSnapshot()
	b, err := getValue(snap, engine.RevisionKey())
	if err != nil {
		snap.Close()
		return 0, err
	}
	rev, err := engine.DecodeUint64(b)
	if err != nil {
		snap.Close()
		return 0, fmt.Errorf("shard %d: %w", s.shard, err)
	}
	return rev, s.SaveSnapshot(snap, w, done) // closes snap
}

// Restore creates the replica of shard under cfg.Dir from a Backup stream
// and returns the revision it holds. The shard's directory must not exist.
// The restored state has applied index 0: a new cell's Raft log applies
// on top of it from its first entry.
func Restore(cfg Config, shard uint32, r io.Reader) (uint64, error) {
	s := New(cfg, shard)
	if _, err := s.cfg.FS.Stat(s.dir); err == nil {
		return 0, fmt.Errorf("statemachine: restore shard %d: %s already exists", shard, s.dir)
	} else if !oserror.IsNotExist(err) {
		return 0, fmt.Errorf("statemachine: restore shard %d: %w", shard, err)
	}
	if _, err := s.Open(nil); err != nil {
		return 0, err
	}
	err := loadSnapshot(s.db, bufio.NewReaderSize(r, 1<<20), nil)
	if err == nil {
		err = s.db.Delete(engine.AppliedIndexKey(), pebble.Sync)
	}
	if err == nil {
		err = s.loadMeta()
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("statemachine: restore shard %d: %w", shard, err)
	}
	return s.Revision(), nil
}
