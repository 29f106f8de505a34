package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/proto/codec"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// TroupeConfig says how to reach a Troupe cell.
type TroupeConfig struct {
	// Endpoints are the gRPC addresses (host:port) of the replicas.
	Endpoints []string
	// AttemptTimeout bounds each try of a commit; a try that times out
	// (or meets an unavailable replica) is retried with the same txn_id,
	// up to 3 tries in all.
	AttemptTimeout time.Duration
	// TLS is the credentials presented to the replicas (nil: plaintext).
	TLS *pki.Source
	// DialOptions are added to the default (TLS's credentials).
	DialOptions []grpc.DialOption
	// RouteToLeader sends each commit to the replica that leads its
	// shard (learnt from Status in WaitReady), as a leader-aware client
	// does; otherwise sessions spread over the endpoints and followers
	// forward proposals to the leader inside Raft.
	RouteToLeader bool
}

// DefaultTroupeConfig returns the configuration for endpoints.
func DefaultTroupeConfig(endpoints []string) TroupeConfig {
	return TroupeConfig{Endpoints: endpoints, AttemptTimeout: 2 * time.Second, RouteToLeader: true}
}

// Validate says what is wrong with c, if anything.
func (c TroupeConfig) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("bench: TroupeConfig.Endpoints is empty"))
	}
	if c.AttemptTimeout <= 0 {
		errs = append(errs, fmt.Errorf("bench: TroupeConfig.AttemptTimeout is %v, want more than 0", c.AttemptTimeout))
	}
	return errors.Join(errs...)
}

// Troupe is the System of a Troupe cell reached over the storev1 gRPC API,
// one connection per replica endpoint, sessions spread over them by client
// id.
type Troupe struct {
	cfg       TroupeConfig
	endpoints []string
	conns     []*grpc.ClientConn
	// txnPrefix starts every txn_id of this process, so that ids stay
	// unique across runs against a store that remembers old ones.
	txnPrefix string
	sessions  atomic.Uint64
	retries   atomic.Uint64
	// leaders[shard] is the connection to the shard's leader, and router
	// maps keys to shards; both set by WaitReady when RouteToLeader.
	leaders []*grpc.ClientConn
	router  keyspace.Router
	// watchMuxes[i] carries the watches on conns[i] (watch_troupe.go).
	watchMuxes []*clientlib.WatchMux
	// storage, for a cell in this process, sums what its state databases
	// wrote (nil: not known, for a cell elsewhere).
	storage func() StorageWrites
}

var (
	_ System          = (*Troupe)(nil)
	_ StorageReporter = (*Troupe)(nil)
)

// StorageWrites implements StorageReporter: zero for a cell elsewhere.
func (t *Troupe) StorageWrites() StorageWrites {
	if t.storage == nil {
		return StorageWrites{}
	}
	return t.storage()
}

// DialTroupe connects to the replicas of cfg. Connections are made
// lazily; see WaitReady.
func DialTroupe(cfg TroupeConfig) (*Troupe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	nonce := make([]byte, 6)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	t := &Troupe{cfg: cfg, endpoints: cfg.Endpoints, txnPrefix: "bench-" + hex.EncodeToString(nonce)}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(pki.StoreCredentials(cfg.TLS)), codec.DialOption()}, clientlib.FlowControlDialOptions()...)
	opts = append(opts, cfg.DialOptions...)
	for _, ep := range cfg.Endpoints {
		conn, err := grpc.NewClient(ep, opts...)
		if err != nil {
			_ = t.Close()
			return nil, fmt.Errorf("bench: dial troupe %s: %w", ep, err)
		}
		t.conns = append(t.conns, conn)
		// Its streams end when conn closes.
		t.watchMuxes = append(t.watchMuxes, clientlib.NewWatchMux(context.Background(), storev1.NewStoreClient(conn)))
	}
	return t, nil
}

// Name implements System.
func (t *Troupe) Name() string { return "troupe" }

// WaitReady returns once every endpoint answers Status with a leader for
// each of its shards (or, for a store without Status, answers a Get) and
// has carried out a commit (a put of /bench/ready/<endpoint>), polling
// every poll; or with ctx's error. The commit makes sure the write path
// works through every endpoint before anything is timed: right after an
// election a proposal can be lost and then waits out its timeout.
func (t *Troupe) WaitReady(ctx context.Context, poll time.Duration) error {
	for i, conn := range t.conns {
		c := storev1.NewStoreClient(conn)
		s := t.newSession(conn, new(atomic.Uint64)) // warm-up retries do not count
		for {
			err := ready(ctx, c)
			if err == nil {
				_, err = s.Put(ctx, "/bench/ready/"+t.endpoints[i], nil)
			}
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("bench: troupe endpoint %s not ready: %w (last: %v)", t.endpoints[i], ctx.Err(), err)
			case <-time.After(poll):
			}
		}
	}
	if t.cfg.RouteToLeader {
		return t.findLeaders(ctx)
	}
	return nil
}

// findLeaders asks every endpoint for its status and records, for each
// shard, the connection to its leader.
func (t *Troupe) findLeaders(ctx context.Context) error {
	byReplica := map[uint64]*grpc.ClientConn{}
	var st *storev1.StatusResponse
	for _, conn := range t.conns {
		s, err := storev1.NewStoreClient(conn).Status(ctx, &storev1.StatusRequest{})
		if err != nil {
			return fmt.Errorf("bench: find leaders: %w", err)
		}
		byReplica[s.GetReplicaId()], st = conn, s
	}
	t.router = keyspace.NewRouter(st.GetShardCount())
	t.leaders = make([]*grpc.ClientConn, st.GetShardCount())
	for _, sh := range st.GetShards() {
		conn, ok := byReplica[sh.GetLeaderReplicaId()]
		if !ok {
			return fmt.Errorf("bench: leader %d of shard %d is not among the endpoints", sh.GetLeaderReplicaId(), sh.GetShard())
		}
		t.leaders[sh.GetShard()] = conn
	}
	return nil
}

func ready(ctx context.Context, c storev1.StoreClient) error {
	st, err := c.Status(ctx, &storev1.StatusRequest{})
	if status.Code(err) == codes.Unimplemented {
		_, err = c.Get(ctx, &storev1.GetRequest{Key: "/bench/ready"})
		return err
	}
	if err != nil {
		return err
	}
	if len(st.GetShards()) == 0 {
		return errors.New("no shards yet")
	}
	for _, sh := range st.GetShards() {
		if sh.GetLeaderReplicaId() == 0 {
			return fmt.Errorf("shard %d has no leader", sh.GetShard())
		}
	}
	return nil
}

// NewSession implements System.
func (t *Troupe) NewSession(_ context.Context, id int) (Session, error) {
	return t.newSession(t.conns[id%len(t.conns)], &t.retries), nil
}

func (t *Troupe) newSession(conn *grpc.ClientConn, retries *atomic.Uint64) *troupeSession {
	s := &troupeSession{
		client:    storev1.NewStoreClient(conn),
		txnPrefix: t.txnPrefix + "-s" + strconv.FormatUint(t.sessions.Add(1), 10) + "-",
		retries:   retries,
		timeout:   t.cfg.AttemptTimeout,
		router:    t.router,
	}
	for _, l := range t.leaders {
		s.leaders = append(s.leaders, storev1.NewStoreClient(l))
	}
	return s
}

// Shards is the cell's shard count, learnt by WaitReady when
// RouteToLeader (else 0).
func (t *Troupe) Shards() int { return int(t.router.Shards()) }

// Retries counts the commits of sessions retried (with the same txn_id)
// after a DEADLINE_EXCEEDED or UNAVAILABLE answer.
func (t *Troupe) Retries() uint64 { return t.retries.Load() }

// Close closes the connections.
func (t *Troupe) Close() error {
	var errs []error
	for _, c := range t.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// commitAttempts bounds the tries of one commit: a commit that timed out
// or met an unavailable replica may or may not have been applied, and the
// store's txn_id dedupe makes a retry with the same id safe.
const commitAttempts = 3

// troupeSession commits one group per request, each with a fresh txn_id.
type troupeSession struct {
	client    storev1.StoreClient
	txnPrefix string
	n         uint64
	retries   *atomic.Uint64
	timeout   time.Duration
	// leaders, when set, are the clients of each shard's leader.
	leaders []storev1.StoreClient
	router  keyspace.Router
}

var _ Session = (*troupeSession)(nil)

// clientFor returns the client to send g to on the given attempt: its
// shard's leader first, when known, then the session's endpoint.
func (s *troupeSession) clientFor(g *storev1.Group, attempt int) storev1.StoreClient {
	if len(s.leaders) == 0 || attempt > 1 {
		return s.client
	}
	return s.leaders[s.router.Shard(g.FirstKey())]
}

func put(key string, value []byte) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: key, Value: value}}}
}

// commit sends g alone, under the session's next txn_id, and returns its
// result.
func (s *troupeSession) commit(ctx context.Context, g *storev1.Group) (*storev1.GroupResult, error) {
	return s.commitAs(ctx, s.nextTxnID(), g)
}

func (s *troupeSession) nextTxnID() string {
	s.n++
	return s.txnPrefix + strconv.FormatUint(s.n, 10)
}

// commitAs sends g alone under txnID and returns its result.
func (s *troupeSession) commitAs(ctx context.Context, txnID string, g *storev1.Group) (*storev1.GroupResult, error) {
	req := &storev1.CommitRequest{TxnId: txnID, Groups: []*storev1.Group{g}}
	var (
		resp *storev1.CommitResponse
		err  error
	)
	for attempt := 1; ; attempt++ {
		attemptCtx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err = s.clientFor(g, attempt).Commit(attemptCtx, req)
		cancel()
		code := status.Code(err)
		if err == nil || attempt == commitAttempts || ctx.Err() != nil ||
			(code != codes.DeadlineExceeded && code != codes.Unavailable) {
			break
		}
		s.retries.Add(1)
	}
	if err != nil {
		return nil, err
	}
	if len(resp.GetGroups()) != 1 {
		return nil, fmt.Errorf("commit: %d group results for 1 group", len(resp.GetGroups()))
	}
	return resp.GetGroups()[0], nil
}

// Put implements Session.
func (s *troupeSession) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return s.putAs(ctx, s.nextTxnID(), key, value)
}

func (s *troupeSession) putAs(ctx context.Context, txnID, key string, value []byte) (uint64, error) {
	r, err := s.commitAs(ctx, txnID, &storev1.Group{Ops: []*storev1.Op{put(key, value)}})
	if err != nil {
		return 0, err
	}
	if !r.GetCommitted() {
		return 0, fmt.Errorf("unconditional put of %s failed: %v", key, r.GetFailure())
	}
	return r.GetRevision(), nil
}

// PutEach implements Session.
func (s *troupeSession) PutEach(ctx context.Context, keys []string, value []byte) error {
	ids := make([]string, len(keys))
	for i := range ids {
		ids[i] = s.nextTxnID()
	}
	return AtOnce(keys, func(i int, key string) error {
		_, err := s.putAs(ctx, ids[i], key, value)
		return err
	})
}

// CompareAndPut implements Session.
func (s *troupeSession) CompareAndPut(ctx context.Context, key string, version uint64, value []byte) (Outcome, error) {
	r, err := s.commit(ctx, &storev1.Group{
		Conditions: []*storev1.Condition{{Key: key, Version: version}},
		Ops:        []*storev1.Op{put(key, value)},
	})
	if err != nil {
		return Outcome{}, err
	}
	if r.GetCommitted() {
		return Outcome{Committed: true, Version: r.GetRevision()}, nil
	}
	f := r.GetFailure()
	if f.GetReason() != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH {
		return Outcome{}, fmt.Errorf("compare-and-put of %s failed: %v", key, f)
	}
	return Outcome{Version: f.GetCurrentVersion()}, nil
}

// Place implements Session: one group, the task's version condition, two
// puts and an add with no effective bound.
func (s *troupeSession) Place(ctx context.Context, p Placement) (Outcome, error) {
	r, err := s.commit(ctx, &storev1.Group{
		Conditions: []*storev1.Condition{{Key: p.Task, Version: 0}},
		Ops: []*storev1.Op{
			put(p.Task, p.TaskValue),
			put(p.Binding, p.BindingValue),
			{Op: &storev1.Op_Add{Add: &storev1.Add{Key: p.Counter, Delta: p.Delta, Min: 0, Max: math.MaxInt64}}},
		},
	})
	if err != nil {
		return Outcome{}, err
	}
	if r.GetCommitted() {
		return Outcome{Committed: true, Version: r.GetRevision()}, nil
	}
	f := r.GetFailure()
	switch f.GetReason() {
	case storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH, storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED:
		return Outcome{Version: f.GetCurrentVersion()}, nil
	}
	return Outcome{}, fmt.Errorf("placement of %s failed: %v", p.Task, f)
}

// Close implements Session; the connection belongs to the Troupe.
func (s *troupeSession) Close() error { return nil }
