package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// GetQuery reads one key; the answer is a *GetResult.
type GetQuery struct{ Key string }

// GetResult is the answer to a GetQuery. KV is nil if the key is absent.
type GetResult struct {
	KV       *storev1.KeyValue
	Revision uint64
}

// RangeQuery reads up to Limit keys under Prefix that sort after After
// ("" for the first page), stopping once MaxBytes of keys and values are
// read (0: no byte bound; at least one key is always returned); the answer
// is a *RangeResult.
type RangeQuery struct {
	Prefix   string
	After    string
	Limit    int
	MaxBytes int
}

// RangeResult is the answer to a RangeQuery.
type RangeResult struct {
	KVs      []*storev1.KeyValue
	More     bool // more keys remain after the last one returned
	Revision uint64
}

// LogEntry is one revision of the change log.
type LogEntry struct {
	Revision uint64
	Changes  *storev1.ChangeSet
}

// LogResult is a page of the change log.
type LogResult struct {
	Entries []LogEntry
	// Oldest is the oldest revision still in the log (0: empty log);
	// Current is the shard revision at the time of the read.
	Oldest, Current uint64
}

// OverdueQuery asks for up to Limit cross-shard transactions prepared on
// the shard whose deadline is at or before Now; the answer is an
// *OverdueResult.
type OverdueQuery struct {
	Now   int64
	Limit int
}

// OverdueResult lists overdue transactions with their records.
type OverdueResult struct {
	IDs     []string
	Records []*storev1.Prepared
}

// FreezeQuery asks for the shard's freeze status (engine/freeze.go); the
// answer is an *engine.FreezeStatus.
type FreezeQuery struct{}

// ErrUnknownQuery is returned by Lookup for a query of an unknown type.
var ErrUnknownQuery = errors.New("statemachine: unknown query type")

// Lookup answers GetQuery, RangeQuery, OverdueQuery and FreezeQuery
// from this replica's state.
// Dragonboat calls it after ReadIndex for linearizable reads, directly for
// stale ones.
func (s *StateMachine) Lookup(q any) (any, error) {
	switch q := q.(type) {
	case GetQuery:
		return s.get(q)
	case RangeQuery:
		return s.scan(q)
	case OverdueQuery:
		res := &OverdueResult{}
		err := s.withView(func(v view) (err error) {
			res.IDs, res.Records, err = engine.Overdue(v, q.Now, q.Limit)
			return err
		})
		return res, err
	case FreezeQuery:
		res := &engine.FreezeStatus{}
		err := s.withView(func(v view) (err error) {
			*res, err = engine.ReadFreezeStatus(v)
			return err
		})
		return res, err
	default:
		return nil, fmt.Errorf("%w %T", ErrUnknownQuery, q)
	}
}

// view is a point-in-time read of the whole database.
type view struct{ it *pebble.Iterator }

func (s *StateMachine) withView(fn func(v view) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return errors.New("statemachine: closed")
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	if err := fn(view{it}); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

func (v view) get(key []byte) []byte {
	if v.it.SeekGE(key) && bytes.Equal(v.it.Key(), key) {
		return append([]byte(nil), v.it.Value()...)
	}
	return nil
}

// A view is a read-only engine.Storage.
var _ engine.Storage = view{}

// Get implements engine.Storage.
func (v view) Get(key []byte) ([]byte, error) { return v.get(key), nil }

// Set implements engine.Storage: a view is read-only.
func (v view) Set(_, _ []byte) error { return errors.New("statemachine: a view is read-only") }

// Delete implements engine.Storage: a view is read-only.
func (v view) Delete([]byte) error { return errors.New("statemachine: a view is read-only") }

// Scan implements engine.Storage.
func (v view) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	for ok := v.it.SeekGE(lower); ok; ok = v.it.Next() {
		if upper != nil && bytes.Compare(v.it.Key(), upper) >= 0 {
			break
		}
		if !fn(v.it.Key(), v.it.Value()) {
			break
		}
	}
	return v.it.Error()
}

func (v view) uint64(key []byte) (uint64, error) { return engine.DecodeUint64(v.get(key)) }

func decodeKV(key string, rec []byte) (*storev1.KeyValue, error) {
	ver, val, err := engine.DecodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", key, err)
	}
	return &storev1.KeyValue{Key: key, Value: append([]byte(nil), val...), Version: ver}, nil
}

func (s *StateMachine) get(q GetQuery) (*GetResult, error) {
	res := &GetResult{}
	err := s.withView(func(v view) (err error) {
		if res.Revision, err = v.uint64(engine.RevisionKey()); err != nil {
			return err
		}
		if rec := v.get(engine.DataKey(q.Key)); rec != nil {
			res.KV, err = decodeKV(q.Key, rec)
		}
		return err
	})
	return res, err
}

func (s *StateMachine) scan(q RangeQuery) (*RangeResult, error) {
	res := &RangeResult{}
	lower, upper := engine.DataBounds(q.Prefix)
	if q.After != "" {
		lower = append(engine.DataKey(q.After), 0)
	}
	err := s.withView(func(v view) (err error) {
		if res.Revision, err = v.uint64(engine.RevisionKey()); err != nil {
			return err
		}
		size := 0
		for ok := v.it.SeekGE(lower); ok; ok = v.it.Next() {
			if upper != nil && bytes.Compare(v.it.Key(), upper) >= 0 {
				break
			}
			if len(res.KVs) == q.Limit || (q.MaxBytes > 0 && size >= q.MaxBytes) {
				res.More = true
				break
			}
			size += len(v.it.Key()) + len(v.it.Value())
			kv, err := decodeKV(engine.UserKey(v.it.Key()), v.it.Value())
			if err != nil {
				return err
			}
			res.KVs = append(res.KVs, kv)
		}
		return nil
	})
	return res, err
}

// ReadLog returns up to max change log entries from revision from on, read
// from this replica (which may lag the leader).
func (s *StateMachine) ReadLog(from uint64, max int) (*LogResult, error) {
	res := &LogResult{}
	err := s.withView(func(v view) (err error) {
		if res.Current, err = v.uint64(engine.RevisionKey()); err != nil {
			return err
		}
		if res.Oldest, err = v.uint64(engine.LogStartKey()); err != nil {
			return err
		}
		upper := engine.LogKey(res.Current + 1)
		for ok := v.it.SeekGE(engine.LogKey(from)); ok && len(res.Entries) < max; ok = v.it.Next() {
			k := v.it.Key()
			if bytes.Compare(k, upper) >= 0 {
				break
			}
			cs := &storev1.ChangeSet{}
			if err := cs.UnmarshalVT(v.it.Value()); err != nil {
				return fmt.Errorf("shard %d: change log: %w", s.shard, err)
			}
			res.Entries = append(res.Entries, LogEntry{Revision: binary.BigEndian.Uint64(k[1:]), Changes: cs})
		}
		return nil
	})
	return res, err
}
