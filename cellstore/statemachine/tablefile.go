package statemachine

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// tableWriteBuffer is what a table file gathers before it writes.
const tableWriteBuffer = 256 << 10

// tableBuffers holds the buffers of closed table files for the next ones:
// a flush or compaction writes tables of a few MiB, hundreds of them a
// minute under load, and a fresh 256 KiB buffer each was 3% of what a
// place run allocated.
var tableBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, tableWriteBuffer)
	return &b
}}

// tableFS hands Pebble table files that write in large pieces. Pebble
// writes a table (a flush's or a compaction's output) through a 4 KiB
// bufio.Writer, so each data block became a write(2) of about 4 KiB; on
// this VM that costs 2.8 µs of kernel time per 4 KiB against 12-15 µs per
// 64 KiB, and flushes and compactions were a quarter of a place run's CPU
// after cas (most of it those writes). A table file gathers its writes
// in tableWriteBuffer and writes them at once. Nothing changes for
// durability: Pebble syncs a table before it uses it, and every sync (and
// anything else that looks at the file) writes out what is gathered
// first. Other files (the WAL, which writes 32 KiB blocks, the MANIFEST,
// OPTIONS) are the underlying file system's own.
type tableFS struct{ vfs.FS }

func (fs tableFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return &tableFile{File: f, buf: (*tableBuffers.Get().(*[]byte))[:0]}, nil
}

// tableFile is a file being written that gathers its writes. Not safe for
// concurrent use (nor is Pebble's writer of it). A failed write of what it
// gathered fails every later call that writes or syncs: the bytes are lost
// and the table must not be taken for whole.
type tableFile struct {
	vfs.File
	buf []byte
	err error
}

func (f *tableFile) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if len(f.buf)+len(p) > cap(f.buf) {
		if err := f.flush(); err != nil {
			return 0, err
		}
		if len(p) >= cap(f.buf) {
			n, err := f.File.Write(p)
			f.err = err
			return n, err
		}
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// flush writes out what the file has gathered.
func (f *tableFile) flush() error {
	if f.err != nil || len(f.buf) == 0 {
		return f.err
	}
	_, f.err = f.File.Write(f.buf)
	f.buf = f.buf[:0]
	return f.err
}

// Close writes out what is gathered and closes the file; its buffer goes
// back to the pool.
func (f *tableFile) Close() error {
	err := f.flush()
	if f.buf != nil {
		buf := f.buf[:0]
		tableBuffers.Put(&buf)
		f.buf = nil
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *tableFile) Sync() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *tableFile) SyncData() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *tableFile) SyncTo(length int64) (bool, error) {
	if err := f.flush(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

func (f *tableFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *tableFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *tableFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *tableFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}
