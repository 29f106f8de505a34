package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// MemBackend is a Backend in memory: the server without Raft. Each shard
// is one replica's state machine (the statemachine package's, as a node
// runs it) on Pebble's in-memory file system, and each proposal is applied
// at once as a Raft entry of its own. Tests that need a store server but
// no cell run one over it, in this package or behind a gRPC listener in
// another:
//
//	hub := watch.NewHub(watch.DefaultConfig(), shards)
//	b, err := server.NewMemBackend(shards, hub)
//	...
//	defer b.Close()
//	s, err := server.New(server.DefaultConfig(), b, hub, shards)
//	...
//	storev1.RegisterStoreServer(grpcServer, s)
//
// Its answers are those of a one-node cell: every read, linearizable or
// not, sees every proposal that returned; Status reports this node (replica
// 1) as the leader of every shard, in term 1. The state is gone on Close.
//
// (cellstore/memstore is a different thing: a clientlib.Store of one shard
// in memory, taking commits rather than proposals, without the server.)
//
// Its methods are safe for concurrent use and, like every Backend's,
// return gRPC status errors.
type MemBackend struct {
	shards []*memShard
}

var _ Backend = (*MemBackend)(nil)

// memShard is one shard of a MemBackend.
type memShard struct {
	sm *statemachine.StateMachine
	// mu orders the proposals: Update is given one entry at a time, each
	// with the next index.
	mu    sync.Mutex
	index uint64 // of the last entry applied
}

// NewMemBackend returns a backend of shards empty shards whose commits hub
// hears of (Server.New takes the same hub, for watches). Close it when
// done.
func NewMemBackend(shards uint32, hub *watch.Hub) (*MemBackend, error) {
	if shards == 0 || hub == nil {
		return nil, fmt.Errorf("server: NewMemBackend needs at least 1 shard and a hub, got %d shards and hub %v", shards, hub)
	}
	b := &MemBackend{}
	cfg := statemachine.Config{Dir: "/cell", Logger: zap.NewNop(), Observer: hub, FS: vfs.NewMem()}
	for i := range shards {
		m := statemachine.New(cfg, i)
		index, err := m.Open(nil)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("server: open in-memory shard %d: %w", i, err), b.Close())
		}
		hub.Attach(i, m)
		b.shards = append(b.shards, &memShard{sm: m, index: index})
	}
	return b, nil
}

// Close closes the shards' state machines, whose state is then gone.
func (b *MemBackend) Close() error {
	var errs []error
	for _, sh := range b.shards {
		errs = append(errs, sh.sm.Close())
	}
	return errors.Join(errs...)
}

// StateMachine returns shard i's state machine, as node.Node.StateMachine
// does a node's replica: to pin it for a backup, or to read its revision.
func (b *MemBackend) StateMachine(i uint32) *statemachine.StateMachine {
	return b.shards[i].sm
}

func (b *MemBackend) shard(i uint32) (*memShard, error) {
	if int(i) >= len(b.shards) {
		return nil, storeerr.Internal.With("no shard %d of %d", i, len(b.shards))
	}
	return b.shards[i], nil
}

// Propose implements Backend: p is applied before it returns (ctx is not
// consulted).
func (b *MemBackend) Propose(_ context.Context, shard uint32, p *storev1.Proposal) (*storev1.Outcome, error) {
	sh, err := b.shard(shard)
	if err != nil {
		return nil, err
	}
	cmd, err := statemachine.EncodeEntry(p)
	if err != nil {
		return nil, storeerr.Internal.With("commit: encode entry: %v", err)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out, err := sh.sm.Update([]sm.Entry{{Index: sh.index + 1, Cmd: cmd}})
	if err != nil {
		return nil, storeerr.Internal.With("commit: shard %d: %v", shard, err)
	}
	sh.index++
	outs, err := statemachine.DecodeResult(out[0].Result)
	if err == nil && len(outs) != 1 {
		err = fmt.Errorf("%d outcomes for 1 proposal", len(outs))
	}
	if err != nil {
		return nil, storeerr.Internal.With("commit: shard %d: %v", shard, err)
	}
	return outs[0], nil
}

// Read implements Backend. Every read is linearizable: a proposal is
// applied before Propose returns.
func (b *MemBackend) Read(_ context.Context, shard uint32, q any, _ bool) (any, error) {
	sh, err := b.shard(shard)
	if err != nil {
		return nil, err
	}
	res, err := sh.sm.Lookup(q)
	if err != nil {
		return nil, storeerr.Internal.With("read: shard %d: %v", shard, err)
	}
	return res, nil
}

// Status implements Backend: replica 1, leader of every shard in term 1.
func (b *MemBackend) Status(context.Context) (*storev1.StatusResponse, error) {
	st := &storev1.StatusResponse{ReplicaId: 1, ShardCount: uint32(len(b.shards))}
	for i, sh := range b.shards {
		ss := &storev1.ShardStatus{Shard: uint32(i), LeaderReplicaId: 1, Term: 1, IsLeader: true,
			AppliedIndex: sh.sm.AppliedIndex(), Revision: sh.sm.Revision()}
		if lr, err := sh.sm.ReadLog(0, 0); err == nil {
			ss.LogOldestRevision = lr.Oldest
		}
		st.Shards = append(st.Shards, ss)
	}
	return st, nil
}
