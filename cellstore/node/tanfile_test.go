package node

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/vfs"
)

func skipWithoutAllocate(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("log files are allocated at full size on Linux only")
	}
}

// A log file being written is allocated at full size but reads, seeks
// and stats as the bytes written; closed, it is cut to them.
func TestSizedFileReadsWhatWasWritten(t *testing.T) {
	skipWithoutAllocate(t)
	fs := newSizedFS(vfs.Default)
	name := filepath.Join(t.TempDir(), "000001.log")
	w, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if n := fileSize(t, name); n != logFileSize {
		t.Fatalf("log file on disk: %d bytes, want %d allocated", n, logFileSize)
	}
	if _, err := w.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	r, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != "hello world" {
		t.Fatalf("read %q, %v; want the bytes written", got, err)
	}
	if fi, err := r.Stat(); err != nil {
		t.Fatal(err)
	} else if fi.Size() != 11 {
		t.Fatalf("Stat: size %d, want 11", fi.Size())
	}
	if pos, err := r.Seek(-5, io.SeekEnd); err != nil || pos != 6 {
		t.Fatalf("Seek from the end: %d %v, want 6", pos, err)
	}
	buf := make([]byte, 8)
	if n, err := r.ReadAt(buf, 6); n != 5 || err != io.EOF || string(buf[:n]) != "world" {
		t.Fatalf("ReadAt past the end: %d %q %v", n, buf[:n], err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := fileSize(t, name); n != 11 {
		t.Fatalf("closed log file: %d bytes, want cut to 11", n)
	}
	if r2, err := fs.Open(name); err != nil {
		t.Fatal(err)
	} else if _, ok := r2.(*sizedFile); ok {
		t.Fatal("a closed log file is still read through its logical size")
	} else {
		r2.Close()
	}
}

func fileSize(t *testing.T, name string) int64 {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// tanLog opens tan through tanFactory on dir, as a node does.
func tanLog(t *testing.T, dir string) raftio.ILogDB {
	t.Helper()
	cfg := config.NodeHostConfig{Expert: expertConfig("tiny", LogStoreTan)}
	cfg.Expert.FS = vfs.Default
	db, err := tanFactory{}.Create(cfg, nil, []string{dir}, []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// saveEntries saves entries [first, first+n) of shard 1, replica 1, each
// with a 2 KiB command, and the state that commits them.
func saveEntries(t *testing.T, db raftio.ILogDB, first, n uint64) {
	t.Helper()
	ents := make([]pb.Entry, 0, n)
	for i := first; i < first+n; i++ {
		ents = append(ents, pb.Entry{Term: 1, Index: i, Cmd: bytes.Repeat([]byte{byte(i)}, 2<<10)})
	}
	u := pb.Update{ShardID: 1, ReplicaID: 1, EntriesToSave: ents,
		State: pb.State{Term: 1, Vote: 1, Commit: first + n - 1}}
	if err := db.SaveRaftState([]pb.Update{u}, 1); err != nil {
		t.Fatal(err)
	}
}

// checkEntries reads entries [1, last] back and checks each.
func checkEntries(t *testing.T, db raftio.ILogDB, last uint64) {
	t.Helper()
	ents, _, err := db.IterateEntries(nil, 0, 1, 1, 1, last+1, 1<<30)
	if err != nil {
		t.Fatalf("reading the log: %v", err)
	}
	if uint64(len(ents)) != last {
		t.Fatalf("read %d entries, want %d", len(ents), last)
	}
	for i, e := range ents {
		if e.Index != uint64(i+1) || !bytes.Equal(e.Cmd, bytes.Repeat([]byte{byte(e.Index)}, 2<<10)) {
			t.Fatalf("entry %d read back as index %d, %d bytes", i+1, e.Index, len(e.Cmd))
		}
	}
}

// copyDir copies the files of src to dst byte for byte, at their size on
// disk: a crash's view of a directory whose files are still open (the
// LOCK aside).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, strings.TrimPrefix(path, src))
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if fi.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The zeroed tail as a hole: the same bytes, no 64 MiB to write.
		if err := os.WriteFile(to, bytes.TrimRight(b, "\x00"), 0o644); err != nil {
			return err
		}
		return os.Truncate(to, int64(len(b)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tan reads entries back from the log file it is writing (which is
// allocated at full size), after a crash (the file left at full size
// with a zeroed tail) and after a clean close.
func TestTanLogAtFullSize(t *testing.T) {
	skipWithoutAllocate(t)
	dir := t.TempDir()
	db := tanLog(t, dir)
	saveEntries(t, db, 1, 100)
	checkEntries(t, db, 100)

	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	logs, _ := filepath.Glob(filepath.Join(crashed, "tandb", "*", "*.log"))
	full := 0
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.Size() == logFileSize {
			full++
		}
	}
	if full == 0 {
		t.Fatalf("no log file at full size among %v", logs)
	}
	saveEntries(t, db, 101, 20)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = tanLog(t, crashed)
	checkEntries(t, db, 100)
	saveEntries(t, db, 101, 20)
	checkEntries(t, db, 120)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = tanLog(t, dir)
	defer db.Close()
	checkEntries(t, db, 120)
}

// tan writes a log file's index before it closes the file, so a crash
// between the two leaves a file tan will not rebuild at full size: the
// file is cut to its records before tan opens the directory (tan would
// take the zeroed tail for a corrupt record when it read to the end).
func TestTanLogIndexedAtFullSize(t *testing.T) {
	skipWithoutAllocate(t)
	dir := t.TempDir()
	db := tanLog(t, dir)
	saveEntries(t, db, 1, 100)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "tandb", "*", "*.log"))
	grown := 0
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.Size() > 0 {
			if err := os.Truncate(l, logFileSize); err != nil {
				t.Fatal(err)
			}
			grown++
		}
	}
	if grown == 0 {
		t.Fatalf("no log file with records among %v", logs)
	}
	db = tanLog(t, dir)
	defer db.Close()
	checkEntries(t, db, 100)
}

// logicalSize ends a log at its first zeroed chunk header, and reads past
// a block's zero padding (a tail too short for a header) as tan does.
func TestLogicalSize(t *testing.T) {
	chunk := func(n int) []byte { // a legacy full chunk with n bytes of payload
		c := make([]byte, logHeaderSize+n)
		c[0], c[4], c[5], c[6] = 0xab, byte(n), byte(n>>8), 1
		for i := logHeaderSize; i < len(c); i++ {
			c[i] = 0x5a
		}
		return c
	}
	var padded []byte // a block filled to 5 bytes short, then a chunk
	padded = append(padded, chunk(logBlockSize-logHeaderSize-5)...)
	padded = append(padded, make([]byte, 5)...)
	padded = append(padded, chunk(100)...)
	records := len(padded)
	for _, tc := range []struct {
		name       string
		file       []byte
		want       int64
		allocation int
	}{
		{"zeroed tail", append(chunk(10), chunk(20)...), 17 + 27, 1 << 20},
		{"no tail", append(chunk(10), chunk(20)...), 17 + 27, 0},
		{"padding, then records", padded, int64(records), 1 << 20},
		{"zeroed header in a block's last 11 bytes", chunk(logBlockSize - logHeaderSize - 9), logBlockSize, 1 << 20},
		{"nothing written", nil, 0, 1 << 20},
	} {
		file := append(tc.file, make([]byte, tc.allocation)...)
		got, err := logicalSize(bytes.NewReader(file), int64(len(file)))
		if err != nil || got != tc.want {
			t.Errorf("%s: logicalSize = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
