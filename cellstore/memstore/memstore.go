package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// DefaultRetention is the change sets the store keeps for watches by
// default, as many as a replica's change log keeps by default.
const DefaultRetention = 10000

// Config is a store's clock and bounds.
type Config struct {
	// Now is the time proposals carry (the store's clock: it expires
	// remembered outcomes).
	Now func() time.Time
	// DedupeWindow is how long the outcome of a txn_id is remembered.
	DedupeWindow time.Duration
	// Retention is how many revisions (change sets) the change log keeps:
	// a watch whose cursor is older ends with the compacted error.
	Retention uint64
}

// DefaultConfig returns the wall clock, a one-minute dedupe window and
// DefaultRetention.
func DefaultConfig() Config {
	return Config{Now: time.Now, DedupeWindow: time.Minute, Retention: DefaultRetention}
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.Now == nil {
		errs = append(errs, errors.New("memstore: Config.Now is nil; use time.Now or a virtual clock"))
	}
	if c.DedupeWindow < 0 {
		errs = append(errs, fmt.Errorf("memstore: Config.DedupeWindow is %v; it must not be negative", c.DedupeWindow))
	}
	if c.Retention == 0 {
		errs = append(errs, fmt.Errorf("memstore: Config.Retention is 0; keep at least 1 revision (default %d)", DefaultRetention))
	}
	return errors.Join(errs...)
}

// Store is an in-memory, one-shard cell store. It is safe for concurrent
// use.
type Store struct {
	cfg Config

	mu       sync.Mutex
	st       *engine.MemStorage
	txns     uint64
	observer func(*storev1.ChangeSet)
	// committed is closed and replaced by every commit that writes: the
	// watches blocked in Next wait on it.
	committed chan struct{}
	// watchers are the open watches; watchersChanged is closed and
	// replaced when one opens, ends or blocks in Next (Quiesce and
	// WaitForWatches wait on it).
	watchers        map[*Watcher]struct{}
	watchersChanged chan struct{}
}

// New returns an empty store whose proposals carry the time now() and
// remember outcomes for window, keeping DefaultRetention revisions for
// watches.
func New(now func() time.Time, window time.Duration) *Store {
	s, err := NewWithConfig(Config{Now: now, DedupeWindow: window, Retention: DefaultRetention})
	if err != nil {
		panic(err) // only a nil now: a programming error, as before Config
	}
	return s
}

// NewWithConfig returns an empty store configured by cfg.
func NewWithConfig(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, st: engine.NewMemStorage(), committed: make(chan struct{}),
		watchers: map[*Watcher]struct{}{}, watchersChanged: make(chan struct{})}, nil
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
		NowUnixNanos:      s.cfg.Now().UnixNano(),
		DedupeWindowNanos: int64(s.cfg.DedupeWindow),
		LogRetention:      s.cfg.Retention,
	}
	p.GroupIndexes = make([]uint32, len(req.GetGroups()))
	for i := range p.GroupIndexes {
		p.GroupIndexes[i] = uint32(i)
	}
	res, err := engine.Apply(s.st, p)
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	if res.Changes != nil {
		if s.observer != nil {
			s.observer(res.Changes)
		}
		close(s.committed)
		s.committed = make(chan struct{})
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
	r, err := s.revision()
	return out, keyspace.Cursor{r}.Encode(), err
}

// Revision returns the store's current revision: that of its last
// commit that wrote (0 before any).
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.revision()
	if err != nil {
		panic(fmt.Sprintf("memstore: %v", err)) // the store wrote it itself
	}
	return r
}

// revision reads the current revision; s.mu is held.
func (s *Store) revision() (uint64, error) {
	return s.meta(engine.RevisionKey())
}

func (s *Store) meta(key []byte) (uint64, error) {
	b, err := s.st.Get(key)
	if err != nil {
		return 0, err
	}
	return engine.DecodeUint64(b)
}

func kv(key string, rec []byte) (*storev1.KeyValue, error) {
	version, value, err := engine.DecodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("memstore: key %q: %w", key, err)
	}
	return &storev1.KeyValue{Key: key, Value: bytes.Clone(value), Version: version}, nil
}
