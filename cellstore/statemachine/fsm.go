package statemachine

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Result codes in sm.Result.Value.
const (
	// ResultOutcome: Data holds an encoded storev1.OutcomeBatch.
	ResultOutcome uint64 = 1
	// ResultRejected: the entry could not be decoded; Data holds the reason.
	ResultRejected uint64 = 2
)

// Observer learns of committed changes as this replica applies them. Calls
// for one shard come from one goroutine, in revision order.
type Observer interface {
	// Applied reports the change set written at revision rev.
	Applied(shard uint32, rev uint64, cs *storev1.ChangeSet)
	// Reset reports that the shard's state was replaced by a snapshot.
	Reset(shard uint32)
}

// Config is what every state machine of a store node shares.
type Config struct {
	// Dir holds one subdirectory per shard.
	Dir      string
	Logger   *zap.Logger
	Observer Observer
	// FS is the file system the replicas live on (nil: the OS's). Tests
	// use Pebble's crashable in-memory file system to simulate crashes.
	FS vfs.FS
}

// StateMachine is one replica of one shard.
type StateMachine struct {
	cfg   Config
	shard uint32 // shard index; the Raft shard ID is shard+1
	dir   string

	mu sync.RWMutex // guards db against replacement by a snapshot
	db *pebble.DB

	idx       keyIndex // owned by Update, Open and RecoverFromSnapshot
	applied   atomic.Uint64
	revision  atomic.Uint64
	recovered atomic.Uint64 // snapshots recovered from since Open
}

var _ sm.IOnDiskStateMachine = (*StateMachine)(nil)

// New returns the state machine of shard index shard. Open must be called
// (by Dragonboat) before use.
func New(cfg Config, shard uint32) *StateMachine {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	return &StateMachine{cfg: cfg, shard: shard, dir: filepath.Join(cfg.Dir, fmt.Sprintf("shard-%d", shard))}
}

// Shard is the shard index this replica serves.
func (s *StateMachine) Shard() uint32 { return s.shard }

// AppliedIndex is the last Raft index applied.
func (s *StateMachine) AppliedIndex() uint64 { return s.applied.Load() }

// Revision is the shard revision as of the last applied entry.
func (s *StateMachine) Revision() uint64 { return s.revision.Load() }

// EncodeEntry encodes proposals as one Raft entry, applied in order.
func EncodeEntry(ps ...*storev1.Proposal) ([]byte, error) {
	return (&storev1.ProposalBatch{Proposals: ps}).MarshalVT()
}

// DecodeResult returns the outcomes of an applied entry, one per proposal.
func DecodeResult(r sm.Result) ([]*storev1.Outcome, error) {
	if r.Value != ResultOutcome {
		return nil, fmt.Errorf("entry rejected: %s", r.Data)
	}
	outs := &storev1.OutcomeBatch{}
	if err := outs.UnmarshalVT(r.Data); err != nil {
		return nil, err
	}
	return outs.GetOutcomes(), nil
}

// SnapshotsRecovered counts the snapshots this replica has loaded since it
// was created: how often it caught up by snapshot rather than by log.
func (s *StateMachine) SnapshotsRecovered() uint64 { return s.recovered.Load() }

// Open opens (or creates) the replica's database and returns the applied
// index persisted with it.
func (s *StateMachine) Open(<-chan struct{}) (uint64, error) {
	if err := s.cfg.FS.MkdirAll(s.dir, 0o755); err != nil {
		return 0, err
	}
	if err := syncDirs(s.cfg.FS, s.dir); err != nil {
		return 0, err
	}
	name, err := s.currentDB()
	if err != nil {
		return 0, err
	}
	if name == "" {
		name = "db-1"
		if err := s.setCurrentDB(name); err != nil {
			return 0, err
		}
	}
	db, err := openPebble(s.cfg.FS, filepath.Join(s.dir, name), s.cfg.Logger)
	if err != nil {
		return 0, fmt.Errorf("shard %d: open %s: %w", s.shard, name, err)
	}
	// Readers (withView: a node's Status while its replicas open) see
	// the database once it is loaded.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.db = db
	if err := s.loadMeta(); err != nil {
		return 0, err
	}
	return s.applied.Load(), nil
}

// loadMeta rebuilds the key index and reads the applied index and revision.
func (s *StateMachine) loadMeta() error {
	if err := s.idx.load(s.db); err != nil {
		return fmt.Errorf("shard %d: index: %w", s.shard, err)
	}
	for _, m := range []struct {
		key []byte
		dst *atomic.Uint64
	}{{engine.AppliedIndexKey(), &s.applied}, {engine.RevisionKey(), &s.revision}} {
		v, err := engine.DecodeUint64(s.idx.metaValue(m.key))
		if err != nil {
			return fmt.Errorf("shard %d: %w", s.shard, err)
		}
		m.dst.Store(v)
	}
	return nil
}

// Update applies committed entries in one Pebble batch, with the last
// entry's index as the new applied index.
func (s *StateMachine) Update(entries []sm.Entry) ([]sm.Entry, error) {
	if len(entries) == 0 {
		return entries, nil
	}
	type change struct {
		rev uint64
		cs  *storev1.ChangeSet
	}
	var changes []change
	b, bulk := s.db.NewIndexedBatch(), s.db.NewBatch()
	defer b.Close()
	defer bulk.Close()
	defer s.idx.endUpdate()
	st := batchStorage{b: b, bulk: bulk, idx: &s.idx}
	for i := range entries {
		e := &entries[i]
		if e.Index <= s.applied.Load() {
			panic(fmt.Sprintf("shard %d: entry %d already applied (applied index %d)", s.shard, e.Index, s.applied.Load()))
		}
		batch := &storev1.ProposalBatch{}
		if err := batch.UnmarshalVT(e.Cmd); err != nil {
			e.Result = sm.Result{Value: ResultRejected, Data: []byte("undecodable entry: " + err.Error())}
			continue
		}
		results, err := engine.ApplyEntry(st, batch.GetProposals())
		if err != nil {
			return nil, fmt.Errorf("shard %d: apply entry %d: %w", s.shard, e.Index, err)
		}
		outs := &storev1.OutcomeBatch{Outcomes: make([]*storev1.Outcome, len(results))}
		for j, res := range results {
			outs.Outcomes[j] = res.Outcome
			if res.Changes != nil {
				changes = append(changes, change{res.Outcome.GetRevision(), res.Changes})
			}
		}
		data, err := outs.MarshalVT()
		if err != nil {
			return nil, err
		}
		e.Result = sm.Result{Value: ResultOutcome, Data: data}
	}
	last := entries[len(entries)-1].Index
	if err := st.Set(engine.AppliedIndexKey(), engine.EncodeUint64(last)); err != nil {
		return nil, err
	}
	if err := bulk.Apply(b, nil); err != nil {
		return nil, fmt.Errorf("shard %d: merge batches: %w", s.shard, err)
	}
	if err := s.idx.flushMeta(bulk); err != nil {
		return nil, err
	}
	if err := bulk.Commit(pebble.NoSync); err != nil {
		return nil, fmt.Errorf("shard %d: commit batch: %w", s.shard, err)
	}
	s.applied.Store(last)
	for _, c := range changes {
		s.revision.Store(c.rev)
		if s.cfg.Observer != nil {
			s.cfg.Observer.Applied(s.shard, c.rev, c.cs)
		}
	}
	return entries, nil
}

// Sync makes everything applied so far durable by syncing Pebble's WAL
// (Update commits without sync; see openPebble).
func (s *StateMachine) Sync() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db.LogData(nil, pebble.Sync)
}

// Close closes the database.
func (s *StateMachine) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

const currentFile = "CURRENT"

// currentDB names the active database directory ("" if none yet).
func (s *StateMachine) currentDB() (string, error) {
	f, err := s.cfg.FS.Open(filepath.Join(s.dir, currentFile))
	if oserror.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return strings.TrimSpace(string(b)), err
}

// setCurrentDB points CURRENT at name, atomically and durably.
func (s *StateMachine) setCurrentDB(name string) error {
	fs := s.cfg.FS
	tmp := filepath.Join(s.dir, currentFile+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(name + "\n")); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, filepath.Join(s.dir, currentFile)); err != nil {
		return err
	}
	return syncDir(fs, s.dir)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// syncDirs makes dir and each of its ancestors durable, so that the
// directories MkdirAll may have created survive a crash.
func syncDirs(fs vfs.FS, dir string) error {
	for {
		if err := syncDir(fs, dir); err != nil {
			return err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// nextDBName is the directory a snapshot recovery loads into.
func nextDBName(cur string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(cur, "db-"))
	return "db-" + strconv.Itoa(n+1)
}
