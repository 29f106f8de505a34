package statemachine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// Snapshot stream format: a sequence of (uvarint key length, key, uvarint
// value length, value) pairs in key order, ended by a zero key length.

const recoverBatchBytes = 4 << 20

// PrepareSnapshot pins the current state for SaveSnapshot.
func (s *StateMachine) PrepareSnapshot() (any, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db.NewSnapshot(), nil
}

// SaveSnapshot streams every key of the pinned state to w.
func (s *StateMachine) SaveSnapshot(ctx any, w io.Writer, done <-chan struct{}) error {
	snap := ctx.(*pebble.Snapshot)
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	bw := bufio.NewWriterSize(w, 1<<20)
	var hdr [binary.MaxVarintLen64]byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%1024 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		for _, b := range [][]byte{it.Key(), it.Value()} {
			if _, err := bw.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(b)))]); err != nil {
				return err
			}
			if _, err := bw.Write(b); err != nil {
				return err
			}
		}
	}
	if _, err := bw.Write([]byte{0}); err != nil {
		return err
	}
	return bw.Flush()
}

// RecoverFromSnapshot replaces the replica's state with the snapshot in r.
// The snapshot is loaded into a new database directory, made durable, and
// only then made current.
func (s *StateMachine) RecoverFromSnapshot(r io.Reader, done <-chan struct{}) error {
	cur, err := s.currentDB()
	if err != nil {
		return err
	}
	next := nextDBName(cur)
	path := filepath.Join(s.dir, next)
	if err := s.cfg.FS.RemoveAll(path); err != nil {
		return err
	}
	db, err := openPebble(s.cfg.FS, path, s.cfg.Logger)
	if err != nil {
		return err
	}
	if err := loadSnapshot(db, bufio.NewReaderSize(r, 1<<20), done); err != nil {
		db.Close()
		return fmt.Errorf("shard %d: load snapshot: %w", s.shard, err)
	}
	if err := s.setCurrentDB(next); err != nil {
		db.Close()
		return err
	}
	s.mu.Lock()
	old := s.db
	s.db = db
	s.mu.Unlock()
	if old != nil {
		if err := old.Close(); err != nil {
			return err
		}
	}
	if err := s.cfg.FS.RemoveAll(filepath.Join(s.dir, cur)); err != nil {
		return err
	}
	if err := s.loadMeta(); err != nil {
		return err
	}
	s.recovered.Add(1)
	if s.cfg.Observer != nil {
		s.cfg.Observer.Reset(s.shard)
	}
	return nil
}

func loadSnapshot(db *pebble.DB, r *bufio.Reader, done <-chan struct{}) error {
	b := db.NewBatch()
	for {
		k, err := readChunk(r)
		if err != nil {
			return err
		}
		if len(k) == 0 {
			break
		}
		v, err := readChunk(r)
		if err != nil {
			return err
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		if b.Len() >= recoverBatchBytes {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b = db.NewBatch()
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	return db.Flush()
}

func readChunk(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > 1<<30 {
		return nil, errors.New("chunk too large")
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}
