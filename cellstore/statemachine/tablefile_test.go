package statemachine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// countingFS counts the writes reaching its files and fails them once
// failWrites is set.
type countingFS struct {
	vfs.FS
	writes     int
	failWrites bool
}

var errWrite = errors.New("disk full")

func (fs *countingFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return &countingFile{File: f, fs: fs}, err
}

type countingFile struct {
	vfs.File
	fs *countingFS
}

func (f *countingFile) Write(p []byte) (int, error) {
	if f.fs.failWrites {
		return 0, errWrite
	}
	f.fs.writes++
	return f.File.Write(p)
}

// pattern returns n bytes that differ from one write to the next.
func pattern(n, seed int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + seed)
	}
	return p
}

func TestTableFileGathersWrites(t *testing.T) {
	under := &countingFS{FS: vfs.NewMem()}
	fs := tableFS{under}
	f, err := fs.Create("000001.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	write := func(p []byte) {
		t.Helper()
		want.Write(p)
		if n, err := f.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write of %d bytes = %d, %v", len(p), n, err)
		}
	}
	// 256 blocks of 4 KiB: a megabyte in four writes of the buffer.
	for i := range 256 {
		write(pattern(4<<10, i))
	}
	if under.writes != 3 {
		t.Fatalf("1 MiB in 4 KiB writes reached the file in %d writes, want 3 (the fourth buffer still gathered)", under.writes)
	}
	// What the file shows includes what it has gathered.
	info, err := f.Stat()
	if err != nil || info.Size() != int64(want.Len()) {
		t.Fatalf("Stat = %v, %v; want size %d", info, err, want.Len())
	}
	write(pattern(100, 1))
	got := make([]byte, 100)
	if _, err := f.ReadAt(got, int64(want.Len()-100)); err != nil || !bytes.Equal(got, want.Bytes()[want.Len()-100:]) {
		t.Fatalf("ReadAt of the last write: %v", err)
	}
	// A write larger than the buffer goes through on its own.
	before := under.writes
	write(pattern(tableWriteBuffer+1, 2))
	if under.writes != before+1 {
		t.Fatalf("a write larger than the buffer took %d writes", under.writes-before)
	}
	write(pattern(10, 3))
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	write(pattern(20, 4))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := under.Open("000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	all, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(all, want.Bytes()) {
		t.Fatalf("file holds %d bytes (%v), want the %d written in order", len(all), err, want.Len())
	}

	// Files other than tables are the file system's own.
	other, err := fs.Create("MANIFEST-000001", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, ok := other.(*tableFile); ok {
		t.Fatal("a MANIFEST got a gathering table file")
	}
}

func TestTableFileWriteFailureSticks(t *testing.T) {
	under := &countingFS{FS: vfs.NewMem()}
	f, err := tableFS{under}.Create("000002.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pattern(1000, 0)); err != nil {
		t.Fatal(err) // gathered, not yet written
	}
	under.failWrites = true
	if err := f.Sync(); !errors.Is(err, errWrite) {
		t.Fatalf("Sync after a failed write = %v, want %v", err, errWrite)
	}
	under.failWrites = false
	// The gathered bytes are lost: nothing may look whole after that.
	if _, err := f.Write(pattern(10, 1)); !errors.Is(err, errWrite) {
		t.Fatalf("Write after a failed write = %v", err)
	}
	if _, err := f.SyncTo(10); !errors.Is(err, errWrite) {
		t.Fatalf("SyncTo after a failed write = %v", err)
	}
	if err := f.Close(); !errors.Is(err, errWrite) {
		t.Fatalf("Close after a failed write = %v", err)
	}
}

func TestStorageMetrics(t *testing.T) {
	m := New(Config{Dir: t.TempDir(), Logger: zap.NewNop()}, 0)
	if _, ok := m.StorageMetrics(); ok {
		t.Fatal("metrics of a database not yet open")
	}
	if _, err := m.Open(nil); err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 64<<10)
	for i := range 20 {
		update(t, m, putEntry(t, uint64(i+1), fmt.Sprintf("/k/%d", i), value))
	}
	got, ok := m.StorageMetrics()
	// Every Update's batch goes through the WAL as it commits, the values
	// twice (the key and the change log); flushes happen in the background.
	if !ok || got.WALBytes < 2*20*uint64(len(value)) || got.DiskBytes == 0 {
		t.Fatalf("StorageMetrics after 20 puts of 64 KiB = %+v, %v; want WAL bytes at least %d", got, ok, 2*20*len(value))
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.StorageMetrics(); ok {
		t.Fatal("metrics of a closed database")
	}
}

// TestTablesSurviveCrash: what a flush or a compaction wrote through
// tableFS is on disk once Pebble has taken the table in, with nothing but
// what was synced surviving the crash (Update commits without syncing
// Pebble's WAL, so the tables are all there is).
func TestTablesSurviveCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := openPebble(fs, "db", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 1000)
	put := func(from, to int) {
		t.Helper()
		b := db.NewBatch()
		for i := from; i < to; i++ {
			if err := b.Set(fmt.Appendf(nil, "d/%06d", i), value, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, n int) {
		t.Helper()
		crashed, err := openPebble(fs.CrashClone(vfs.CrashCloneCfg{}), "db", zap.NewNop())
		if err != nil {
			t.Fatalf("%s: open after a crash: %v", what, err)
		}
		defer crashed.Close()
		for i := range n {
			v, closer, err := crashed.Get(fmt.Appendf(nil, "d/%06d", i))
			if err != nil {
				t.Fatalf("%s: key %d after a crash: %v", what, i, err)
			}
			if !bytes.Equal(v, value) {
				t.Fatalf("%s: key %d after a crash holds %d bytes", what, i, len(v))
			}
			closer.Close()
		}
	}
	put(0, 2000) // 2 MB: tables larger than a write buffer
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("flushed", 2000)
	put(2000, 4000)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(context.Background(), []byte("d/"), []byte("d0"), true); err != nil {
		t.Fatal(err)
	}
	check("compacted", 4000)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
