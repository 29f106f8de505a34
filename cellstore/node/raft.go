package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/logger"

	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

var logDBConfigs = map[string]func() dbconfig.LogDBConfig{
	"tiny":   dbconfig.GetTinyMemLogDBConfig,
	"small":  dbconfig.GetSmallMemLogDBConfig,
	"medium": dbconfig.GetMediumMemLogDBConfig,
	"large":  dbconfig.GetLargeMemLogDBConfig,
}

// expertConfig is Dragonboat's expert configuration of a node: one step
// worker and one log store for all the node's shards. The worker saves
// the Raft state of every shard with work in one write and one fsync, so
// the PREPAREs (or RESOLVEs) a cross-shard commit proposes on several
// shards at once share the node's log writes instead of queueing behind
// each other's (Dragonboat's default, 16 workers and 16 log stores, gives
// each shard its own; measured in DESIGN, Measurements). Both are fixed
// when a node's data directory is created: Dragonboat refuses to open one
// made with other counts, as it fixes the log store (logstore.go).
func expertConfig(logDBMemory, logStore string) dbconfig.ExpertConfig {
	engine := dbconfig.GetDefaultEngineConfig()
	engine.ExecShards = 1
	logDB := logDBConfigs[logDBMemory]()
	logDB.Shards = 1
	return dbconfig.ExpertConfig{Engine: engine, LogDB: logDB, LogDBFactory: logDBFactory(logStore)}
}

var quietDragonboat sync.Once

// quietenDragonboat sets Dragonboat's package loggers to error level. They
// are process-wide; Troupe's own logs go through zap.
func quietenDragonboat() {
	quietDragonboat.Do(func() {
		for _, name := range []string{"config", "dragonboat", "gossip", "logdb", "LogDB", "pebblekv", "raft", "raftpb",
			"registry", "rsm", "server", "settings", "tan", "tools", "transport", "raft-mt", "grpc"} {
			logger.GetLogger(name).SetLevel(logger.ERROR)
		}
	})
}

// shardID is the Dragonboat shard ID of shard index i (Dragonboat reserves
// 0).
func shardID(i uint32) uint64 { return uint64(i) + 1 }

// raftBackend implements server.Backend with a Dragonboat NodeHost.
type raftBackend struct {
	nh        *dragonboat.NodeHost
	n         *Node
	sessions  []*client.Session
	proposers []*proposer
}

var _ server.Backend = (*raftBackend)(nil)

func (b *raftBackend) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.n.cfg.ProposalTimeout)
}

// attempt runs fn with a per-attempt timeout until it succeeds, fails for
// good, or ctx ends. Dragonboat drops a proposal or ReadIndex silently when
// a follower cannot forward it (no leader yet, a leader change, a
// connection not yet up), and the caller only learns of it by timing out.
// Re-proposing is safe because every proposal carries its txn_id and the
// engine returns the first outcome of a txn_id it has already applied; a
// read is safe to repeat anyway.
func (b *raftBackend) attempt(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	per := b.n.cfg.RTT * time.Duration(2*b.n.cfg.ElectionRTT)
	for {
		actx, acancel := context.WithTimeout(ctx, per)
		err := fn(actx)
		acancel()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
		if errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, errWait) {
			select { // no leader yet, or a change under way: give it a moment
			case <-time.After(b.n.cfg.RTT):
			case <-ctx.Done():
				return err
			}
		}
	}
}

// errWait tells attempt that what fn waits for has not happened yet.
var errWait = errors.New("node: not yet")

// retryable reports whether a Dragonboat error may go away on retry.
func retryable(err error) bool {
	return errors.Is(err, errWait) || errors.Is(err, dragonboat.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, dragonboat.ErrAborted) ||
		errors.Is(err, dragonboat.ErrRejected)
}

// Propose implements server.Backend: the shard's proposer group-commits it.
func (b *raftBackend) Propose(ctx context.Context, shard uint32, p *storev1.Proposal) (*storev1.Outcome, error) {
	return b.proposers[shard].propose(ctx, p)
}

// Read implements server.Backend.
func (b *raftBackend) Read(ctx context.Context, shard uint32, q any, linearizable bool) (any, error) {
	var (
		res any
		err error
	)
	if linearizable {
		err = b.attempt(ctx, func(ctx context.Context) (err error) {
			res, err = b.nh.SyncRead(ctx, shardID(shard), q)
			return err
		})
	} else {
		res, err = b.nh.StaleRead(shardID(shard), q)
	}
	if err != nil {
		return nil, raftError("read", shard, err)
	}
	return res, nil
}

// raftError maps Dragonboat's errors to the store's. Whether a timed-out
// commit was applied is unknown (storeerr.Timeout): the client retries it
// with the same txn_id and the store's dedupe makes that safe.
func raftError(op string, shard uint32, err error) error {
	def := storeerr.ShardUnavailable
	switch {
	case errors.Is(err, dragonboat.ErrSystemBusy):
		def = storeerr.ShardBusy
	case errors.Is(err, dragonboat.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		def = storeerr.Timeout
	case errors.Is(err, dragonboat.ErrCanceled), errors.Is(err, context.Canceled):
		def = storeerr.Canceled
	case errors.Is(err, dragonboat.ErrPayloadTooBig):
		def = storeerr.ProposalTooLarge
	}
	return def.With("%s: shard %d: %v", op, shard, err)
}

// Status implements server.Backend.
func (b *raftBackend) Status(context.Context) (*storev1.StatusResponse, error) {
	return b.n.Status(), nil
}
