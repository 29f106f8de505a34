// Package memstore is the cell store in memory: the store's own
// transaction engine over an engine.MemStorage, one shard, no Raft, no
// network. The simulator and unit tests use it where a real cell would be
// too slow; it gives the same commit outcomes, versions and revisions as
// a one-shard cell.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Store is an in-memory, one-shard cell store. It is safe for concurrent
// use.
type Store struct {
	mu       sync.Mutex
	st       *engine.MemStorage
	now      func() time.Time
	window   time.Duration
	txns     uint64
	observer func(*storev1.ChangeSet)
}

// Observe has observe called with the changes of every commit that
// writes, in commit order, before the commit returns (and with the store
// locked: observe must not call the store). The simulator keeps its view
// of the cell with it, as a real scheduler's cache follows a watch.
func (s *Store) Observe(observe func(*storev1.ChangeSet)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = observe
}

// New returns an empty store whose proposals carry the time now() and
// remember outcomes for window.
func New(now func() time.Time, window time.Duration) *Store {
	return &Store{st: engine.NewMemStorage(), now: now, window: window}
}

// Commit applies req as one proposal.
func (s *Store) Commit(_ context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	txn := req.GetTxnId()
	if txn == "" {
		s.txns++
		txn = "mem-" + strconv.FormatUint(s.txns, 10)
	}
	p := &storev1.Proposal{
		TxnId:             txn,
		Groups:            req.GetGroups(),
		Atomic:            req.GetAtomic(),
		NowUnixNanos:      s.now().UnixNano(),
		DedupeWindowNanos: int64(s.window),
	}
	for i := range req.GetGroups() {
		p.GroupIndexes = append(p.GroupIndexes, uint32(i))
	}
	res, err := engine.Apply(s.st, p)
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	if res.Changes != nil && s.observer != nil {
		s.observer(res.Changes)
	}
	return &storev1.CommitResponse{Groups: res.Outcome.GetGroups(), Duplicate: res.Outcome.GetDuplicate()}, nil
}

// Get reads key (nil when absent).
func (s *Store) Get(_ context.Context, key string) (*storev1.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.st.Get(engine.DataKey(key))
	if err != nil || rec == nil {
		return nil, err
	}
	return kv(key, rec)
}

// List reads every key under prefix, with the cursor of the read.
func (s *Store) List(_ context.Context, prefix string) ([]*storev1.KeyValue, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lower, upper := engine.DataBounds(prefix)
	var out []*storev1.KeyValue
	var err error
	serr := s.st.Scan(lower, upper, func(k, v []byte) bool {
		var x *storev1.KeyValue
		if x, err = kv(engine.UserKey(k), v); err != nil {
			return false
		}
		out = append(out, x)
		return true
	})
	if serr != nil {
		return nil, nil, serr
	}
	if err != nil {
		return nil, nil, err
	}
	rev, err := s.st.Get(engine.RevisionKey())
	if err != nil {
		return nil, nil, err
	}
	r, err := engine.DecodeUint64(rev)
	return out, keyspace.Cursor{r}.Encode(), err
}

func kv(key string, rec []byte) (*storev1.KeyValue, error) {
	version, value, err := engine.DecodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("memstore: key %q: %w", key, err)
	}
	return &storev1.KeyValue{Key: key, Value: bytes.Clone(value), Version: version}, nil
}
