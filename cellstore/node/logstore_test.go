package node

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/vfs"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// savedUpdates is an ILogDB that records the updates it is asked to
// save (its other methods are not called).
type savedUpdates struct {
	raftio.ILogDB
	saved   []pb.Update
	removed []raftio.NodeInfo
}

func (s *savedUpdates) SaveRaftState(updates []pb.Update, _ uint64) error {
	s.saved = append(s.saved, updates...)
	return nil
}

func (s *savedUpdates) RemoveNodeData(shardID, replicaID uint64) error {
	s.removed = append(s.removed, raftio.NodeInfo{ShardID: shardID, ReplicaID: replicaID})
	return nil
}

// The keeper hands on a replica's last state in its updates that leave
// State empty (unchanged), never another replica's, and nothing before
// the replica's first state or after its data is removed.
func TestStateKeeperFillsUnchangedStates(t *testing.T) {
	inner := &savedUpdates{}
	k := &stateKeeper{ILogDB: inner, states: map[raftio.NodeInfo]pb.State{}}
	a1 := pb.State{Term: 2, Vote: 1, Commit: 10}
	a2 := pb.State{Term: 2, Vote: 1, Commit: 11}
	b1 := pb.State{Term: 5, Vote: 3, Commit: 7}
	steps := [][]pb.Update{
		{{ShardID: 1, ReplicaID: 1}},            // nothing known yet: stays empty
		{{ShardID: 1, ReplicaID: 1, State: a1}}, // saved as is
		{{ShardID: 1, ReplicaID: 1}, {ShardID: 2, ReplicaID: 1}, {ShardID: 2, ReplicaID: 1, State: b1}},
		{{ShardID: 1, ReplicaID: 1, State: a2}, {ShardID: 2, ReplicaID: 1}},
		{{ShardID: 1, ReplicaID: 1}},
	}
	for i, ups := range steps {
		if err := k.SaveRaftState(ups, 1); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := []pb.State{{}, a1, a1, {}, b1, a2, b1, a2}
	if len(inner.saved) != len(want) {
		t.Fatalf("%d updates saved, want %d", len(inner.saved), len(want))
	}
	for i, u := range inner.saved {
		if u.State != want[i] {
			t.Errorf("update %d (shard %d) saved with state %+v, want %+v", i, u.ShardID, u.State, want[i])
		}
	}
	if err := k.RemoveNodeData(1, 1); err != nil || len(inner.removed) != 1 {
		t.Fatalf("RemoveNodeData: %v, %v", err, inner.removed)
	}
	inner.saved = nil
	if err := k.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1}}, 1); err != nil {
		t.Fatal(err)
	}
	if !pb.IsEmptyState(inner.saved[0].State) {
		t.Errorf("a removed replica's old state %+v was handed on", inner.saved[0].State)
	}
}

// A new directory gets the store asked for (tan if none); an existing
// one keeps its own, and asking for the other is an error that says
// what the directory holds and what to do.
func TestResolveLogStore(t *testing.T) {
	dirWith := func(name string) string {
		dir := t.TempDir()
		if name != "" {
			if err := os.MkdirAll(filepath.Join(dir, "host", "00000000000000000001", name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		holds, want, got, err string
	}{
		{"", LogStoreAuto, LogStoreTan, ""},
		{"", LogStorePebble, LogStorePebble, ""},
		{"", LogStoreTan, LogStoreTan, ""},
		{"logdb-0", LogStoreAuto, LogStorePebble, ""},
		{"logdb-0", LogStorePebble, LogStorePebble, ""},
		{"logdb-0", LogStoreTan, "", "holds a pebble Raft log, which the tan log store cannot open"},
		{"tandb", LogStoreAuto, LogStoreTan, ""},
		{"tandb", LogStorePebble, "", "holds a tan Raft log, which the pebble log store cannot open"},
	} {
		got, err := resolveLogStore(dirWith(tc.holds), tc.want)
		if got != tc.got || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("a directory holding %q, asked for %q: %q, %v; want %q, %q", tc.holds, tc.want, got, err, tc.got, tc.err)
		}
	}
}

// syncCounter is a file system that counts the fsyncs of the files of
// the Raft log stores.
type syncCounter struct {
	vfs.FS
	syncs atomic.Int64
}

func (c *syncCounter) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !(strings.Contains(name, "tandb") || strings.Contains(name, "logdb-")) {
		return f, err
	}
	return vfs.WithFd(f, countedFile{f, &c.syncs}), nil
}

func (c *syncCounter) Create(name string) (vfs.File, error) {
	f, err := c.FS.Create(name)
	return c.wrap(name, f, err)
}

func (c *syncCounter) OpenForAppend(name string) (vfs.File, error) {
	f, err := c.FS.OpenForAppend(name)
	return c.wrap(name, f, err)
}

func (c *syncCounter) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname)
	return c.wrap(newname, f, err)
}

type countedFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (f countedFile) Sync() error {
	f.syncs.Add(1)
	return f.File.Sync()
}

// The reason for tan: a commit of a one-node cell costs its log one
// fsync. (Pebble's log store fsyncs again for the new commit index
// alone, docs/measurements.md; it runs on no file system but the real
// one, so this test cannot count its fsyncs.)
func TestTanFsyncsOncePerCommit(t *testing.T) {
	const commits = 40
	counter := &syncCounter{FS: vfs.Default}
	cfg := testConfig(t, t.TempDir())
	cfg.Shards = 1
	cfg.LogStore = LogStoreTan
	cfg.fs = counter
	_, c, ctx := startReady(t, cfg)
	commit := func(i int) {
		k := "/machines/m" + strconv.Itoa(i)
		resp, err := c.Commit(ctx, &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{
			Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte("v")}}}},
		}}})
		if err != nil || !resp.GetGroups()[0].GetCommitted() {
			t.Fatalf("commit %d: %v %v", i, resp, err)
		}
	}
	commit(-1) // past the entries of the cell's start
	before := counter.syncs.Load()
	for i := range commits {
		commit(i)
	}
	perCommit := float64(counter.syncs.Load()-before) / commits
	t.Logf("%.2f log fsyncs per commit", perCommit)
	if perCommit < 0.75 || perCommit > 1.25 {
		t.Errorf("tan fsyncs its log %.2f times per commit; want once (stateKeeper)", perCommit)
	}
}

// A data directory keeps its log store across restarts whatever the
// default, and refuses the other one with the reason.
func TestLogStoreKeptOnRestart(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Shards = 1
	cfg.LogStore = LogStorePebble
	start := func(cfg Config) *Node {
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start(cfg).Close()
	cfg.LogStore = LogStoreAuto
	start(cfg).Close()
	if m, _ := filepath.Glob(filepath.Join(cfg.DataDir, "raft", "*", "*", "tandb")); len(m) > 0 {
		t.Fatalf("a restart with the default log store made %v in a pebble directory", m)
	}
	cfg.LogStore = LogStoreTan
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "holds a pebble Raft log") {
		t.Fatalf("restart of a pebble directory with tan: %v", err)
	}
}
