package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/lni/vfs"
)

// tan appends each replica's log to a file it preallocates with
// FALLOC_FL_KEEP_SIZE, so every append still grows the file's size and
// every fsync commits that change to the file system's journal. Here a
// 900-byte append then fsync took a median 330-480 µs that way and
// 245-260 µs into a file whose size was already set (docs/measurements.md,
// "tan's log files at full size"), and that fsync is on every commit's
// path. etcd's WAL sets its files' size up front for the same reason.
//
// sizedFS gives tan that: a log file it creates (NNNNNN.log) is allocated
// at its full size at once, and the bytes tan has written, its logical
// size, are kept beside it. Readers of a file being written see only the
// logical size, as they would have seen the file's; a closed file is cut
// to its logical size and synced. A file cut short by a crash keeps its
// zeroed tail: trimLogs cuts it before tan opens the directory, so tan
// reads no file past what it wrote (it takes a zeroed record for a
// corrupt one, and rebuilds only the last log of a directory).
type sizedFS struct {
	vfs.FS

	mu      sync.Mutex
	writing map[string]*atomic.Int64 // logical sizes of the log files being written, by name
}

// logFileSize is the size a log file is allocated at: tan's own
// preallocation, its 64 MiB of records before it moves to a new file and
// an index block.
const logFileSize = 64<<20 + 128<<10

func newSizedFS(fs vfs.FS) *sizedFS {
	return &sizedFS{FS: fs, writing: map[string]*atomic.Int64{}}
}

func isLogFile(name string) bool { return strings.HasSuffix(name, ".log") }

// Create creates a log file at its full size (any other file as the
// wrapped file system does).
func (s *sizedFS) Create(name string) (vfs.File, error) {
	f, err := s.FS.Create(name)
	if err != nil || !isLogFile(name) {
		return f, err
	}
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return f, nil // a file system without descriptors (tests): tan's own way
	}
	if err := allocate(int(fd.Fd()), logFileSize); err != nil {
		if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EOPNOTSUPP) {
			return f, nil
		}
		f.Close()
		return nil, fmt.Errorf("node: allocating Raft log file %s: %w", name, err)
	}
	size := new(atomic.Int64)
	s.mu.Lock()
	s.writing[name] = size
	s.mu.Unlock()
	return &sizedFile{File: f, fs: s, name: name, fd: int(fd.Fd()), size: size, writer: true}, nil
}

// Open opens a file; one being written reads as its logical size.
func (s *sizedFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := s.FS.Open(name, opts...)
	if err != nil {
		return f, err
	}
	s.mu.Lock()
	size := s.writing[name]
	s.mu.Unlock()
	if size == nil {
		return f, nil
	}
	return &sizedFile{File: f, fs: s, name: name, size: size}, nil
}

// sizedFile is a log file allocated at its full size, open for writing
// (writer) or for reading while it is written. pos is the handle's own
// offset; size, shared by the handles, the bytes the writer has written.
type sizedFile struct {
	vfs.File
	fs     *sizedFS
	name   string
	fd     int
	size   *atomic.Int64
	pos    int64
	writer bool
}

func (f *sizedFile) grow(end int64) {
	for {
		cur := f.size.Load()
		if end <= cur || f.size.CompareAndSwap(cur, end) {
			return
		}
	}
}

func (f *sizedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.pos += int64(n)
	f.grow(f.pos)
	return n, err
}

func (f *sizedFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.grow(off + int64(n))
	return n, err
}

func (f *sizedFile) Read(p []byte) (int, error) {
	left := f.size.Load() - f.pos
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := f.File.Read(p)
	f.pos += int64(n)
	return n, err
}

func (f *sizedFile) ReadAt(p []byte, off int64) (int, error) {
	left := f.size.Load() - off
	if left <= 0 {
		return 0, io.EOF
	}
	short := int64(len(p)) > left
	if short {
		p = p[:left]
	}
	n, err := f.File.ReadAt(p, off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (f *sizedFile) Seek(offset int64, whence int) (int64, error) {
	if whence == io.SeekEnd {
		offset, whence = f.size.Load()+offset, io.SeekStart
	}
	pos, err := f.File.Seek(offset, whence)
	if err == nil {
		f.pos = pos
	}
	return pos, err
}

func (f *sizedFile) Stat() (os.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return logicalInfo{FileInfo: fi, size: f.size.Load()}, nil
}

// Close closes the file; the writer's is first cut to its logical size
// and synced, so that no file but one a crash left reads past its records.
func (f *sizedFile) Close() error {
	if !f.writer {
		return f.File.Close()
	}
	f.fs.mu.Lock()
	delete(f.fs.writing, f.name)
	f.fs.mu.Unlock()
	err := syscall.Ftruncate(f.fd, f.size.Load())
	if err == nil {
		err = f.File.Sync()
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("node: closing Raft log file %s: %w", f.name, err)
	}
	return nil
}

type logicalInfo struct {
	os.FileInfo
	size int64
}

func (i logicalInfo) Size() int64 { return i.size }

// The record layout of tan's log files (Pebble's): 32 KiB blocks of
// chunks, each after a header of checksum (4 bytes), length (2), type
// (1) and, for the recyclable types, a log number (4). A block's tail too
// short for a header is zero padding.
const (
	logBlockSize        = 32 << 10
	logHeaderSize       = 7
	logRecyclableHeader = 11
	logFirstRecyclable  = 5 // recyclableFullChunkType
	logLastRecyclable   = 8 // recyclableLastChunkType
)

// logicalSize returns the bytes of the log file r (of size n) that hold
// records: up to the first zeroed chunk header, where a file allocated
// at its full size and cut short by a crash reads zeros. A file with no
// zeroed header is all records (or a corrupt tail tan reports itself).
func logicalSize(r io.ReaderAt, n int64) (int64, error) {
	block := make([]byte, logBlockSize)
	for start := int64(0); start < n; start += logBlockSize {
		m, err := r.ReadAt(block, start)
		if err != nil && !(errors.Is(err, io.EOF) && m > 0) {
			return 0, err
		}
		b := block[:m]
		for off := 0; off+logHeaderSize <= len(b); {
			h := b[off : off+logHeaderSize]
			if allZero(h) {
				if off+logRecyclableHeader > logBlockSize {
					break // the block's zero padding
				}
				return start + int64(off), nil
			}
			size := logHeaderSize
			if h[6] >= logFirstRecyclable && h[6] <= logLastRecyclable {
				size = logRecyclableHeader
			}
			off += size + int(binary.LittleEndian.Uint16(h[4:6]))
		}
	}
	return n, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// trimLogs cuts every log file under dir that is still at its allocated
// size (one a crash left open) to its logical size, and syncs it.
func trimLogs(dir string) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isLogFile(path) {
			return err
		}
		fi, err := d.Info()
		if err != nil || fi.Size() != logFileSize {
			return err
		}
		return trimLog(path)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func trimLog(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := logicalSize(f, logFileSize)
	if err != nil {
		return fmt.Errorf("node: reading Raft log file %s: %w", path, err)
	}
	if size == logFileSize {
		return nil
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}
