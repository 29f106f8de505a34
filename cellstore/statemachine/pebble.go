package statemachine

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

func (s batchStorage) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	if !indexedRange(lower, upper) {
		return fmt.Errorf("statemachine: scan of [%q, %q) would miss the writes of the unindexed batch", lower, upper)
	}
	it, err := s.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if !fn(it.Key(), it.Value()) {
			break
		}
	}
	return it.Close()
}

// indexedRange reports whether the storage keys in [lower, upper) (nil:
// unbounded) are of families written to the indexed batch alone
// (batchStorage.batch).
func indexedRange(lower, upper []byte) bool {
	lo, hi := byte(0), byte(0xff)
	if len(lower) > 0 {
		lo = lower[0]
	}
	if len(upper) > 0 {
		hi = upper[0]
	}
	if lo > hi {
		return true // an empty range
	}
	for p := lo; ; p++ {
		if bulkFamily(p) {
			return false
		}
		if p == hi {
			return true
		}
	}
}

// reader is what Pebble databases, snapshots and batches share for reads.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// getValue returns a copy of key's value, or nil if it does not exist.
func getValue(r reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := append([]byte{}, v...)
	return out, closer.Close()
}

// pebbleLogger sends Pebble's logs to zap: its info chatter at debug level.
type pebbleLogger struct{ l *zap.SugaredLogger }

func (p pebbleLogger) Infof(format string, args ...any)  { p.l.Debugf(format, args...) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Errorf(format, args...) }
func (p pebbleLogger) Fatalf(format string, args ...any) { p.l.Fatalf(format, args...) }

// Each replica's Pebble block cache and memtable size. Blocks are not
// compressed: cell state is small and CPU is what the store runs out of.
const (
	cacheBytes    = 64 << 20
	memTableBytes = 4 << 20
)

// openPebble opens a replica's database.
//
// Update commits its batches to Pebble's WAL without fsync: Dragonboat's
// Raft log is already the durable record of every entry, and Dragonboat
// only compacts it up to an index the state machine has Synced (WAL
// fsynced). After a crash the database is a prefix of the applied batches,
// with its applied index, and Dragonboat replays the rest. (Running Pebble
// without a WAL and flushing memtables in Sync was measured too: Sync then
// blocks applying for the length of a flush, which showed in p99.)
//
// Most engine reads are point reads of keys that do not exist (a new
// txn_id, a "must not exist" condition), so every level gets a Bloom filter.
// The key index answers most of them anyway, so reads tolerate a deeper L0:
// compactions start later and run less often (measured: +20% commits/s on
// the place workload, lower p99).
//
// Memtables are small: inserting a commit's keys into the memtable's
// skiplist was a third of applying it, most of it the search for each
// key's place (cache misses, more of them the fuller the memtable) and the
// first touch of a fresh arena's pages; a 4 MiB memtable halves that
// (smaller skiplist, and Pebble reuses a flushed memtable's arena once it
// no longer grows them). L0 compacts from 32 flushes (128 MiB; 16 of the
// 16 MiB memtables before held 256 MiB): a compromise between compacting
// more often and the L0 files a read looks in (about 1 µs each for a read
// through a view), with the 4x margin to stopping writes kept. Pebble
// scores L0 at twice its sublevels over L0CompactionThreshold, so 32
// flushes (each file of a flush overlaps the last: a sublevel each) is
// a threshold of 64. A threshold of 32 compacted from 16 sublevels,
// twice as often, each compaction rewriting the base level's overlapping
// files too (one such compaction was 5% of a 6 s place run's CPU).
//
// Tables are written through tableFS, in 256 KiB writes rather than
// Pebble's 4 KiB ones (tablefile.go).
func openPebble(fs vfs.FS, dir string, log *zap.Logger) (*pebble.DB, error) {
	cache := pebble.NewCache(cacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{FS: tableFS{fs}, Logger: pebbleLogger{log.Sugar()}, Cache: cache, MemTableSize: memTableBytes,
		L0CompactionThreshold: 64, L0StopWritesThreshold: 128, LBaseMaxBytes: 256 << 20}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	return pebble.Open(dir, opts)
}

// StorageMetrics is what a replica's Pebble database has written since it
// opened (a snapshot's recovery opens a fresh one) and what it holds now:
// the write amplification an operator watches (flushes and compactions
// against the WAL's bytes) and how far compactions lag.
type StorageMetrics struct {
	WALBytes, FlushBytes, CompactionBytes uint64
	Flushes, Compactions                  int64
	L0Files                               int64
	L0Sublevels                           int32
	CompactionDebtBytes                   uint64
	DiskBytes                             uint64
}

// StorageMetrics reports the replica's database; false before it opens or
// after it closes.
func (s *StateMachine) StorageMetrics() (StorageMetrics, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return StorageMetrics{}, false
	}
	m := s.db.Metrics()
	out := StorageMetrics{
		WALBytes:            m.WAL.BytesWritten,
		Flushes:             m.Flush.Count,
		Compactions:         m.Compact.Count,
		L0Files:             m.Levels[0].TablesCount,
		L0Sublevels:         m.Levels[0].Sublevels,
		CompactionDebtBytes: m.Compact.EstimatedDebt,
		DiskBytes:           m.DiskSpaceUsage(),
	}
	for _, l := range m.Levels {
		out.FlushBytes += l.TableBytesFlushed
		out.CompactionBytes += l.TableBytesCompacted
	}
	return out, true
}
