package node

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/plugin/tan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// The Raft log stores a node may keep its log in (Config.LogStore).
// Dragonboat fixes a data directory's log store when it creates it, and
// refuses to open it with another.
const (
	// LogStoreAuto keeps the log store a data directory has, and gives a
	// new one LogStoreTan.
	LogStoreAuto = ""
	// LogStoreTan is Dragonboat's tan: one append-only file per replica,
	// fsynced only when entries, the term or the vote change (a new
	// commit index alone is written, not synced, as etcd does).
	LogStoreTan = "tan"
	// LogStorePebble is Dragonboat's default, a Pebble key-value store
	// for all the node's replicas: it fsyncs every change of Raft state,
	// a new commit index included, so a commit waits for two fsyncs in
	// turn on its leader (DESIGN, "The Raft log store").
	LogStorePebble = "pebble"
)

// logStoreDirs are the directories each log store makes in a node host
// directory (Dragonboat's <host>/<hostname>/<deployment>/...).
var logStoreDirs = map[string]string{LogStoreTan: "tandb", LogStorePebble: "logdb-0"}

// resolveLogStore returns the log store of the node host directory dir:
// the one it holds, or for a new directory want (LogStoreTan if auto). A
// directory that holds another store than want is an error saying so.
func resolveLogStore(dir, want string) (string, error) {
	held := ""
	for store, name := range logStoreDirs {
		matches, err := filepath.Glob(filepath.Join(dir, "*", "*", name))
		if err != nil {
			return "", err
		}
		if len(matches) > 0 {
			held = store
		}
	}
	switch {
	case held == "":
		if want == LogStoreAuto {
			return LogStoreTan, nil
		}
		return want, nil
	case want == LogStoreAuto || want == held:
		return held, nil
	}
	return "", fmt.Errorf("node: the data directory %s holds a %s Raft log, which the %s log store cannot open: "+
		"start with --log-store %s or without it, or move the node to %s by replacing it (members remove, a new data directory, members add)",
		dir, held, want, held, want)
}

// logDBFactory returns the Dragonboat factory of a log store (nil:
// Dragonboat's default, Pebble).
func logDBFactory(store string) config.LogDBFactory {
	if store == LogStoreTan {
		return tanFactory{}
	}
	return nil
}

// tanFactory makes Dragonboat's tan log stores, each wrapped in a
// stateKeeper, on a sizedFS.
type tanFactory struct{}

func (tanFactory) Create(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs, wals []string) (raftio.ILogDB, error) {
	if err := trimLogs(filepath.Join(dirs[0], logStoreDirs[LogStoreTan])); err != nil {
		return nil, err
	}
	cfg.Expert.FS = newSizedFS(cfg.Expert.FS)
	db, err := tan.Factory.Create(cfg, cb, dirs, wals)
	if err != nil {
		return nil, err
	}
	return &stateKeeper{ILogDB: db, states: map[raftio.NodeInfo]pb.State{}}, nil
}

// Name is tan's: Dragonboat records it in the directory and checks it.
func (tanFactory) Name() string { return tan.Factory.Name() }

// stateKeeper hands tan every update's Raft state. Dragonboat leaves an
// update's State empty when it has not changed since the last one, and
// tan takes an empty State for a new term and vote: it then writes and
// fsyncs every update, even one that changes nothing it stores (a
// seq commit cost 7 fsyncs over 3 replicas instead of 3). Given the
// unchanged state, tan skips such updates and writes a new commit index
// alone without fsync, as it means to.
type stateKeeper struct {
	raftio.ILogDB
	mu     sync.Mutex
	states map[raftio.NodeInfo]pb.State // the last non-empty State saved, by replica
}

// SaveRaftState fills in the unchanged states and saves the updates.
func (k *stateKeeper) SaveRaftState(updates []pb.Update, workerID uint64) error {
	k.mu.Lock()
	for i := range updates {
		u := &updates[i]
		ni := raftio.NodeInfo{ShardID: u.ShardID, ReplicaID: u.ReplicaID}
		if !pb.IsEmptyState(u.State) {
			k.states[ni] = u.State
		} else if st, ok := k.states[ni]; ok {
			u.State = st
		}
	}
	k.mu.Unlock()
	return k.ILogDB.SaveRaftState(updates, workerID)
}

// RemoveNodeData forgets the replica's state with its data.
func (k *stateKeeper) RemoveNodeData(shardID, replicaID uint64) error {
	k.mu.Lock()
	delete(k.states, raftio.NodeInfo{ShardID: shardID, ReplicaID: replicaID})
	k.mu.Unlock()
	return k.ILogDB.RemoveNodeData(shardID, replicaID)
}
