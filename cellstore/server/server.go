// Package server is the cell store's gRPC service. It validates and
// authorizes requests, routes each group to its shard, proposes one Raft
// entry per shard touched, and merges the per-shard outcomes into the reply.
// Reads go to a shard's replica after a ReadIndex (or straight to the local
// replica when stale reads are asked for); watches are served from the
// node's watch.Hub.
//
// The Backend interface hides Raft: cellstore/node implements it with
// Dragonboat; MemBackend implements it in memory, one replica per shard,
// for tests of the service without Raft.
package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Backend is the replicated shards of one store node. Its methods are safe
// for concurrent use and return gRPC status errors.
type Backend interface {
	// Propose replicates p on shard and returns the outcome of applying it.
	Propose(ctx context.Context, shard uint32, p *storev1.Proposal) (*storev1.Outcome, error)
	// Read answers a statemachine query on shard, linearizably (after a
	// ReadIndex) or from the local replica.
	Read(ctx context.Context, shard uint32, q any, linearizable bool) (any, error)
	// Status describes the node and its shards.
	Status(ctx context.Context) (*storev1.StatusResponse, error)
}

// Config configures a Server.
type Config struct {
	Limits Limits
	// DedupeWindow is how long the outcome of a txn_id is remembered.
	DedupeWindow time.Duration
	// LogRetention is how many revisions of change log each shard keeps.
	LogRetention uint64
	// ProgressInterval is how often an idle watch gets a progress
	// notification.
	ProgressInterval time.Duration
	// MaxInflight bounds the proposals in flight on this node; beyond it
	// commits fail fast with RESOURCE_EXHAUSTED.
	MaxInflight int
	// MaxInflightPerIdentity bounds one identity's share of MaxInflight:
	// beyond it that identity's commits fail fast with RESOURCE_EXHAUSTED
	// while others' still run. Callers without an identity (no TLS) are
	// bound by MaxInflight alone. 0: a quarter of MaxInflight, so three
	// identities flooding at once leave room for everyone else.
	MaxInflightPerIdentity int
	// TxnTimeout is how long a cross-shard transaction may stay prepared
	// before any leader that finds it settles it (aborting it unless
	// every participant prepared).
	TxnTimeout time.Duration
	// FreezeTimeout is the longest a backup may keep the cell frozen:
	// its freeze lapses after this (in proposal time) even if its driver
	// dies. A commit refused by a frozen shard is proposed again for at
	// most twice this long.
	FreezeTimeout time.Duration
	// FrozenRetry is how often a commit refused by a frozen shard looks
	// (at this node's replica) whether the freeze is gone, to be proposed
	// again.
	FrozenRetry time.Duration
	// PrepareDelay, for fault tests only, holds every cross-shard
	// transaction this node drives after its prepares, before its
	// resolution and reply, so that a test can kill the node there
	// (one every participant refused holds nothing and is not held).
	PrepareDelay time.Duration
	Authorizer   Authorizer
	// Now is the clock whose readings go into proposals.
	Now     func() time.Time
	Logger  *zap.Logger
	Metrics *Metrics
}

// DefaultConfig returns a Server configuration with the default knobs.
func DefaultConfig() Config {
	return Config{
		Limits:           DefaultLimits(),
		DedupeWindow:     5 * time.Minute,
		LogRetention:     100000,
		ProgressInterval: time.Second,
		MaxInflight:      4096,
		TxnTimeout:       5 * time.Second,
		FreezeTimeout:    2 * time.Second,
		FrozenRetry:      2 * time.Millisecond,
		Authorizer:       AllowAll{},
		Now:              time.Now,
		Logger:           zap.NewNop(),
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	switch {
	case c.DedupeWindow <= 0:
		return fmt.Errorf("server: DedupeWindow must be positive, got %v", c.DedupeWindow)
	case c.LogRetention == 0:
		return fmt.Errorf("server: LogRetention must be positive")
	case c.ProgressInterval <= 0:
		return fmt.Errorf("server: ProgressInterval must be positive, got %v", c.ProgressInterval)
	case c.MaxInflight <= 0:
		return fmt.Errorf("server: MaxInflight must be positive, got %d", c.MaxInflight)
	case c.MaxInflightPerIdentity < 0 || c.MaxInflightPerIdentity > c.MaxInflight:
		return fmt.Errorf("server: MaxInflightPerIdentity must be in [0, MaxInflight=%d], got %d", c.MaxInflight, c.MaxInflightPerIdentity)
	case c.TxnTimeout <= 0:
		return fmt.Errorf("server: TxnTimeout must be positive, got %v", c.TxnTimeout)
	case c.FreezeTimeout <= 0 || c.FrozenRetry <= 0:
		return fmt.Errorf("server: FreezeTimeout and FrozenRetry must be positive, got %v and %v", c.FreezeTimeout, c.FrozenRetry)
	case c.Authorizer == nil || c.Now == nil || c.Logger == nil:
		return fmt.Errorf("server: Authorizer, Now and Logger are required")
	}
	return nil
}

// Server implements storev1.StoreServer.
type Server struct {
	storev1.UnimplementedStoreServer
	cfg      Config
	backend  Backend
	hub      *watch.Hub
	router   keyspace.Router
	inflight *inflight // one unit per proposal in flight
}

var _ storev1.StoreServer = (*Server)(nil)

// New returns a Server over backend and hub for a cell of shards shards.
func New(cfg Config, backend Backend, hub *watch.Hub, shards uint32) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Server{cfg: cfg, backend: backend, hub: hub, router: keyspace.NewRouter(shards),
		inflight: newInflight(cfg.MaxInflight, cmp.Or(cfg.MaxInflightPerIdentity, max(1, cfg.MaxInflight/4)), func(id pki.Identity) { cfg.Metrics.throttled.WithLabelValues(id.Role).Inc() })}, nil
}

// Commit implements storev1.StoreServer.
func (s *Server) Commit(ctx context.Context, req *storev1.CommitRequest) (resp *storev1.CommitResponse, err error) {
	start := time.Now()
	defer func() { s.cfg.Metrics.observeCommit(resp, err, time.Since(start)) }()
	failures, err := s.cfg.Limits.ValidateCommit(req)
	if err != nil {
		return nil, err
	}
	shardsOf := s.route(req)
	shardOf := make([]uint32, len(shardsOf))
	for i, shards := range shardsOf {
		if len(shards) > 0 {
			shardOf[i] = shards[0]
		}
	}
	if err := s.admit(ctx, Access{Method: "Commit", Keys: commitAccess(req)}); err != nil {
		return nil, err
	}
	resp = &storev1.CommitResponse{Groups: make([]*storev1.GroupResult, len(req.GetGroups())), ShardCount: s.router.Shards()}
	for i, f := range failures {
		if f != nil {
			resp.Groups[i] = &storev1.GroupResult{Failure: f, Shard: shardOf[i]}
		}
	}
	if req.GetAtomic() && slices.ContainsFunc(failures, func(f *storev1.Failure) bool { return f != nil }) {
		for i, g := range resp.Groups {
			if g == nil {
				resp.Groups[i] = &storev1.GroupResult{Shard: shardOf[i], Failure: engine.Aborted()}
			}
		}
		return resp, nil
	}
	// Groups that span shards (all groups, for an atomic request that
	// does) commit in one cross-shard transaction; the others as usual.
	cross := crossShardGroups(req, shardsOf, failures)
	hash, now := requestHash(req), s.cfg.Now()
	props := s.proposals(req, shardOf, func(gi int) bool { return failures[gi] == nil && !slices.Contains(cross, gi) }, hash, now)
	var (
		wg          sync.WaitGroup
		xdup        bool
		xerr, aperr error
	)
	if len(cross) > 0 {
		wg.Go(func() {
			xdup, xerr = s.commitCrossShard(ctx, s.newCrossShard(req, cross, hash, now), resp)
		})
	}
	if len(props) > 0 {
		aperr = s.propose(ctx, props, resp)
	}
	wg.Wait()
	if err := errors.Join(aperr, xerr); err != nil {
		return nil, err
	}
	resp.Duplicate = resp.Duplicate || xdup
	for i, g := range resp.Groups {
		g.Shard = shardOf[i]
	}
	return resp, nil
}

// crossShardGroups returns the indexes of the groups that must commit
// across shards: those spanning shards, or every group of an atomic
// request whose groups do together.
func crossShardGroups(req *storev1.CommitRequest, shardsOf [][]uint32, failures []*storev1.Failure) []int {
	var cross []int
	all := map[uint32]bool{}
	for gi, shards := range shardsOf {
		for _, sh := range shards {
			all[sh] = true
		}
		if len(shards) > 1 && failures[gi] == nil {
			cross = append(cross, gi)
		}
	}
	if req.GetAtomic() && len(all) > 1 {
		cross = cross[:0]
		for gi := range shardsOf {
			cross = append(cross, gi)
		}
	}
	return cross
}

// route returns the shards each group touches, sorted.
func (s *Server) route(req *storev1.CommitRequest) [][]uint32 {
	out := make([][]uint32, len(req.GetGroups()))
	for gi, g := range req.GetGroups() {
		for _, k := range groupKeys(g) {
			if sh := s.router.Shard(k); !slices.Contains(out[gi], sh) {
				out[gi] = append(out[gi], sh)
			}
		}
		slices.Sort(out[gi])
	}
	return out
}

func groupKeys(g *storev1.Group) []string {
	keys := make([]string, 0, len(g.GetConditions())+len(g.GetOps()))
	for _, c := range g.GetConditions() {
		keys = append(keys, c.GetKey())
	}
	for _, op := range g.GetOps() {
		keys = append(keys, op.Key())
	}
	return keys
}

type shardProposal struct {
	shard uint32
	p     *storev1.Proposal
}

// proposals splits the groups of req that keep says into one proposal
// per shard.
func (s *Server) proposals(req *storev1.CommitRequest, shardOf []uint32, keep func(gi int) bool, hash uint64, now time.Time) []shardProposal {
	var out []shardProposal
	for gi, g := range req.GetGroups() {
		if !keep(gi) {
			continue
		}
		i := slices.IndexFunc(out, func(sp shardProposal) bool { return sp.shard == shardOf[gi] })
		if i < 0 {
			out = append(out, shardProposal{shard: shardOf[gi], p: &storev1.Proposal{
				TxnId:             req.GetTxnId(),
				Atomic:            req.GetAtomic(),
				NowUnixNanos:      now.UnixNano(),
				DedupeWindowNanos: int64(s.cfg.DedupeWindow),
				LogRetention:      s.cfg.LogRetention,
				RequestHash:       hash,
			}})
			i = len(out) - 1
		}
		out[i].p.Groups = append(out[i].p.Groups, g)
		out[i].p.GroupIndexes = append(out[i].p.GroupIndexes, uint32(gi))
	}
	return out
}

// requestHash identifies a request's content, so that a txn_id reused for
// another request is told apart from a retry. Every node must hash a
// request alike: a CommitRequest has no map, so MarshalVT's bytes are
// proto.MarshalOptions{Deterministic: true}'s (proto/codec's
// TestMarshalVTIsDeterministic).
func requestHash(req *storev1.CommitRequest) uint64 {
	bare := storev1.CommitRequest{Groups: req.GetGroups(), Atomic: req.GetAtomic()}
	buf := hashBuffers.Get().(*[]byte)
	defer hashBuffers.Put(buf)
	n := bare.SizeVT()
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	bare.MarshalToSizedBufferVT(b) // never fails: MarshalVT's error is always nil
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// hashBuffers hold requestHash's encodings between commits: a request is
// a few kilobytes to megabytes, encoded only to be hashed.
var hashBuffers = sync.Pool{New: func() any { return new([]byte) }}

// propose runs the proposals (in parallel when there are several) and
// merges their outcomes into resp.
func (s *Server) propose(ctx context.Context, props []shardProposal, resp *storev1.CommitResponse) error {
	// All of a request's slots are taken at once or none are.
	release, err := s.inflight.acquire(ctx, len(props))
	if err != nil {
		return err
	}
	defer release()
	outs := make([]*storev1.Outcome, len(props))
	errs := make([]error, len(props))
	todo := make([]int, len(props))
	for i := range todo {
		todo[i] = i
	}
	var thaw thawWait
	for len(todo) > 0 {
		if len(todo) == 1 {
			i := todo[0]
			outs[i], errs[i] = s.backend.Propose(ctx, props[i].shard, props[i].p)
		} else {
			var wg sync.WaitGroup
			for _, i := range todo {
				wg.Go(func() { outs[i], errs[i] = s.backend.Propose(ctx, props[i].shard, props[i].p) })
			}
			wg.Wait()
		}
		// A shard frozen for a backup refused its proposal (and applied
		// nothing): propose it again after a moment, at the time then.
		todo = slices.DeleteFunc(todo, func(i int) bool { return errs[i] != nil || !outs[i].GetFrozen() })
		if len(todo) == 0 {
			break
		}
		shards := make([]uint32, len(todo))
		for j, i := range todo {
			shards[j] = props[i].shard
		}
		if err := thaw.wait(ctx, s, shards); err != nil {
			return err
		}
		for _, i := range todo {
			props[i].p = proto.CloneOf(props[i].p)
			props[i].p.NowUnixNanos = s.cfg.Now().UnixNano()
		}
	}
	for i, out := range outs {
		if errs[i] != nil {
			return errs[i]
		}
		if len(out.GetGroups()) != len(out.GetGroupIndexes()) {
			return storeerr.Internal.With("commit: shard %d returned %d results for %d groups", props[i].shard, len(out.GetGroups()), len(out.GetGroupIndexes()))
		}
		resp.Duplicate = resp.Duplicate || out.GetDuplicate()
		for j, gi := range out.GetGroupIndexes() {
			resp.Groups[gi] = out.GetGroups()[j]
		}
	}
	return nil
}

// Get implements storev1.StoreServer.
func (s *Server) Get(ctx context.Context, req *storev1.GetRequest) (*storev1.GetResponse, error) {
	if err := s.cfg.Limits.checkKey("get", req.GetKey()); err != nil {
		return nil, err
	}
	if err := s.admit(ctx, Access{Method: "Get", Keys: []KeyOp{{Key: req.GetKey(), Op: authz.OpRead}}}); err != nil {
		return nil, err
	}
	res, err := s.backend.Read(ctx, s.router.Shard(req.GetKey()), statemachine.GetQuery{Key: req.GetKey()}, !req.GetStale())
	if err != nil {
		return nil, err
	}
	r := res.(*statemachine.GetResult)
	s.cfg.Metrics.reads.WithLabelValues("get").Inc()
	return &storev1.GetResponse{Kv: r.KV, Revision: r.Revision}, nil
}

// Range implements storev1.StoreServer. With several shards under the
// prefix it reads a page from each and merges them in key order.
func (s *Server) Range(ctx context.Context, req *storev1.RangeRequest) (*storev1.RangeResponse, error) {
	if err := s.admit(ctx, Access{Method: "Range", Prefix: req.GetPrefix(), PrefixOp: authz.OpRead}); err != nil {
		return nil, err
	}
	after := string(req.GetContinuation())
	if after != "" && !bytes.HasPrefix(req.GetContinuation(), []byte(req.GetPrefix())) {
		return nil, storeerr.BadContinuation.With("range: prefix %q", req.GetPrefix())
	}
	limit := s.cfg.Limits.rangeLimit(req.GetLimit())
	shards := s.router.PrefixShards(req.GetPrefix())
	cursor := s.localCursor()
	resp := &storev1.RangeResponse{}
	more := false
	// Each shard's page and the merged page are cut by the same rule (limit
	// keys, MaxRangeBytes of keys and values), so the merged page never
	// reaches past the last key of a shard that stopped early: the next
	// page, which starts after the merged page's last key, skips nothing.
	for _, sh := range shards {
		res, err := s.backend.Read(ctx, sh, statemachine.RangeQuery{Prefix: req.GetPrefix(), After: after, Limit: limit, MaxBytes: s.cfg.Limits.MaxRangeBytes}, !req.GetStale())
		if err != nil {
			return nil, err
		}
		r := res.(*statemachine.RangeResult)
		resp.Kvs = append(resp.Kvs, r.KVs...)
		more = more || r.More
		cursor[sh] = r.Revision
	}
	if len(shards) > 1 {
		slices.SortFunc(resp.Kvs, func(a, b *storev1.KeyValue) int { return strings.Compare(a.GetKey(), b.GetKey()) })
	}
	if n := pageLength(resp.Kvs, limit, s.cfg.Limits.MaxRangeBytes); n < len(resp.Kvs) {
		resp.Kvs, more = resp.Kvs[:n], true
	}
	if more && len(resp.Kvs) > 0 {
		resp.Continuation = []byte(resp.Kvs[len(resp.Kvs)-1].GetKey())
	}
	resp.Cursor = cursor.Encode()
	s.cfg.Metrics.reads.WithLabelValues("range").Inc()
	return resp, nil
}

// pageLength is how many of the merged kvs fit a page of limit keys and
// maxBytes of keys and values (at least one).
func pageLength(kvs []*storev1.KeyValue, limit, maxBytes int) int {
	size := 0
	for i, kv := range kvs {
		if i == limit || (i > 0 && size >= maxBytes) {
			return i
		}
		size += len(kv.GetKey()) + len(kv.GetValue())
	}
	return len(kvs)
}

// localCursor is this replica's revision of every shard.
func (s *Server) localCursor() keyspace.Cursor {
	c := make(keyspace.Cursor, s.router.Shards())
	for i := range c {
		c[i] = s.hub.Revision(uint32(i))
	}
	return c
}

// Status implements storev1.StoreServer.
func (s *Server) Status(ctx context.Context, _ *storev1.StatusRequest) (*storev1.StatusResponse, error) {
	if err := s.admit(ctx, Access{Method: "Status", Call: authz.CallStatus}); err != nil {
		return nil, err
	}
	return s.backend.Status(ctx)
}
