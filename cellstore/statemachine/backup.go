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
// meaningful in the new one. Restore resets only the Raft applied index,
// because the new cell's Raft log starts from its first entry, and drops
// the freeze the backup was taken under (see engine/freeze.go).

// BackupSnapshot is a replica's state pinned at one point for a backup.
// It holds the database handle's read lock until it is written or closed,
// so a snapshot recovery of the replica waits for it. Its methods are for
// one goroutine at a time.
type BackupSnapshot struct {
	s      *StateMachine
	snap   *pebble.Snapshot // nil once released
	status engine.FreezeStatus
}

// PinBackup pins the replica's current state for a backup.
func (s *StateMachine) PinBackup() (*BackupSnapshot, error) {
	s.mu.RLock()
	if s.db == nil {
		s.mu.RUnlock()
		return nil, errors.New("statemachine: closed")
	}
	b := &BackupSnapshot{s: s, snap: s.db.NewSnapshot()}
	it, err := b.snap.NewIter(nil)
	if err == nil {
		b.status, err = engine.ReadFreezeStatus(view{it})
		err = errors.Join(err, it.Close())
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("shard %d: %w", s.shard, err)
	}
	return b, nil
}

// Status is the pinned state's revision, clock, prepared transactions and
// freeze.
func (b *BackupSnapshot) Status() engine.FreezeStatus { return b.status }

// WriteTo writes the pinned state to w in the snapshot stream format and
// releases it; done stops it early.
func (b *BackupSnapshot) WriteTo(w io.Writer, done <-chan struct{}) error {
	snap := b.snap
	if snap == nil {
		return errors.New("statemachine: backup snapshot already released")
	}
	b.snap = nil
	defer b.s.mu.RUnlock()
	return b.s.SaveSnapshot(snap, w, done) // closes snap
}

// Close releases the pinned state, if WriteTo has not.
func (b *BackupSnapshot) Close() error {
	snap := b.snap
	if snap == nil {
		return nil
	}
	b.snap = nil
	defer b.s.mu.RUnlock()
	return snap.Close()
}

// Restore creates the replica of shard under cfg.Dir from a backup stream
// (BackupSnapshot.WriteTo) and returns the revision it holds. The shard's
// directory must not exist. The restored state has applied index 0: a new
// cell's Raft log applies on top of it from its first entry. It holds no
// freeze: the backup's, taken while the old cell was frozen for it, is
// dropped.
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
		b := s.db.NewBatch()
		if err = errors.Join(b.Delete(engine.AppliedIndexKey(), nil), b.Delete(engine.FreezeKey(), nil)); err == nil {
			err = b.Commit(pebble.Sync)
		}
		b.Close()
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
