package statemachine

import (
	"bytes"
	"fmt"
	"testing"

	"go.uber.org/zap"
)

// A restored replica holds the backup's keys, versions, revision and change
// log, starts at applied index 0, and applies a new cell's entries from 1.
func TestBackupAndRestore(t *testing.T) {
	src := open(t, t.TempDir(), nil)
	defer src.Close()
	for i := uint64(1); i <= 20; i++ {
		update(t, src, putEntry(t, i, fmt.Sprintf("/k/%02d", i%7), fmt.Sprint(i)))
	}
	var buf bytes.Buffer
	rev, err := src.Backup(&buf, make(chan struct{}))
	if err != nil || rev != 20 {
		t.Fatalf("backup: revision %d, %v", rev, err)
	}

	cfg := Config{Dir: t.TempDir(), Logger: zap.NewNop()}
	if got, err := Restore(cfg, 0, bytes.NewReader(buf.Bytes())); err != nil || got != 20 {
		t.Fatalf("restore: revision %d, %v", got, err)
	}
	if _, err := Restore(cfg, 0, bytes.NewReader(buf.Bytes())); err == nil {
		t.Fatal("restore over an existing replica accepted")
	}
	if _, err := Restore(Config{Dir: t.TempDir(), Logger: zap.NewNop()}, 0, bytes.NewReader(buf.Bytes()[:buf.Len()-1])); err == nil {
		t.Fatal("truncated backup accepted")
	}
	dst := New(cfg, 0)
	if applied, err := dst.Open(nil); err != nil || applied != 0 || dst.Revision() != 20 {
		t.Fatalf("restored replica: applied %d, revision %d, %v", applied, dst.Revision(), err)
	}
	defer dst.Close()
	for i := range 7 {
		key := fmt.Sprintf("/k/%02d", i)
		if a, b := mustGet(t, src, key).KV, mustGet(t, dst, key).KV; a.GetVersion() != b.GetVersion() || !bytes.Equal(a.GetValue(), b.GetValue()) {
			t.Fatalf("%s: restored %v, backed up %v", key, b, a)
		}
	}
	if log, err := dst.ReadLog(1, 100); err != nil || len(log.Entries) != 20 {
		t.Fatalf("restored change log: %v, %v", log, err)
	}
	e := putEntry(t, 21, "/new", "x") // txn-1 is remembered from the old cell
	e.Index = 1
	update(t, dst, e)
	if g := mustGet(t, dst, "/new"); g.KV.GetVersion() != 21 {
		t.Fatalf("first write after restore at version %d, want 21", g.KV.GetVersion())
	}
}
