package statemachine

import (
	"bytes"
	"fmt"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A restored replica holds the backup's keys, versions, revision and change
// log, starts at applied index 0, and applies a new cell's entries from 1.
func TestBackupAndRestore(t *testing.T) {
	src := open(t, t.TempDir(), nil)
	defer src.Close()
	for i := uint64(1); i <= 20; i++ {
		update(t, src, putEntry(t, i, fmt.Sprintf("/k/%02d", i%7), fmt.Sprint(i)))
	}
	// The backup is pinned while a freeze holds, and written after the
	// thaw and later commits: it holds the pinned state, without the
	// freeze.
	update(t, src, entry(t, 21, &storev1.Proposal{TxnId: "b", Phase: storev1.Phase_PHASE_FREEZE, NowUnixNanos: 21, FreezeUntilUnixNanos: 1e9}))
	var buf bytes.Buffer
	pin, err := src.PinBackup()
	if err != nil {
		t.Fatal(err)
	}
	if st := pin.Status(); st.Revision != 20 || !st.FrozenBy("b") || st.Prepared != 0 {
		t.Fatalf("pinned backup: %+v", st)
	}
	update(t, src, entry(t, 22, &storev1.Proposal{TxnId: "b", Phase: storev1.Phase_PHASE_THAW, NowUnixNanos: 22}))
	update(t, src, putEntry(t, 23, "/k/later", "not in the backup"))
	if err := pin.WriteTo(&buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if err := pin.Close(); err != nil {
		t.Fatal(err)
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
	if pin, err := dst.PinBackup(); err != nil || pin.Status().Freeze != nil || pin.Close() != nil {
		t.Fatalf("restored replica holds a freeze: %v", err)
	}
	for i := range 7 {
		key := fmt.Sprintf("/k/%02d", i)
		if a, b := mustGet(t, src, key).KV, mustGet(t, dst, key).KV; a.GetVersion() != b.GetVersion() || !bytes.Equal(a.GetValue(), b.GetValue()) {
			t.Fatalf("%s: restored %v, backed up %v", key, b, a)
		}
	}
	if log, err := dst.ReadLog(1, 100); err != nil || len(log.Entries) != 20 {
		t.Fatalf("restored change log: %v, %v", log, err)
	}
	e := putEntry(t, 24, "/new", "x") // txn-1 is remembered from the old cell
	e.Index = 1
	update(t, dst, e)
	if g := mustGet(t, dst, "/new"); g.KV.GetVersion() != 21 {
		t.Fatalf("first write after restore at version %d, want 21", g.KV.GetVersion())
	}
}

func entry(t *testing.T, index uint64, p *storev1.Proposal) sm.Entry {
	t.Helper()
	cmd, err := EncodeEntry(p)
	if err != nil {
		t.Fatal(err)
	}
	return sm.Entry{Index: index, Cmd: cmd}
}
