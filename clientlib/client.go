package clientlib

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/proto/codec"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Config configures a Client.
type Config struct {
	// Endpoints are the gRPC addresses (host:port, or a gRPC target URI
	// with a scheme) of the store nodes. Any node serves any request.
	Endpoints []string
	// Logger receives failovers (warnings) and retries (debug). Nil: no
	// logging.
	Logger *zap.Logger
	// TLS is the client's credentials: it presents its certificate to
	// the store nodes, whose certificates must be of the cell's CA, name
	// the host dialled and carry a store identity. Nil: plaintext, to a
	// store started with --insecure.
	TLS *pki.Source
	// DialOptions are added after the defaults (TLS's credentials, 16
	// MiB messages, the store's codec (proto/codec), reconnection backoff
	// up to 5 s), so they can override them.
	DialOptions []grpc.DialOption
	// Retry says how failed attempts are retried. The zero value means
	// the default policy: 20ms doubling up to 1s, ±20% jitter, 10
	// attempts.
	Retry RetryPolicy
	// AttemptTimeout bounds each attempt of a call (0: 5 s). An attempt
	// of a commit that runs out of it has an unknown outcome and is
	// retried with the same txn_id.
	AttemptTimeout time.Duration
	// Registerer gets the client's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

const defaultAttemptTimeout = 5 * time.Second

// DefaultConfig returns the configuration for a cell reached at
// endpoints, with every knob at its default.
func DefaultConfig(endpoints ...string) Config {
	return Config{
		Endpoints:      endpoints,
		Logger:         zap.NewNop(),
		Retry:          defaultRetryPolicy(),
		AttemptTimeout: defaultAttemptTimeout,
	}
}

// withDefaults fills the fields whose zero value means "the default".
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Retry == (RetryPolicy{}) {
		c.Retry = defaultRetryPolicy()
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = defaultAttemptTimeout
	}
	return c
}

// Validate says precisely what is wrong with c, if anything (every
// problem, joined).
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("clientlib: "+format, args...)) }
	if len(c.Endpoints) == 0 {
		add("Config.Endpoints is empty: need the gRPC address (host:port) of at least one store node")
	}
	seen := map[string]int{}
	for i, ep := range c.Endpoints {
		if ep == "" {
			add("Config.Endpoints[%d] is empty", i)
			continue
		}
		if !strings.Contains(ep, "://") {
			if _, _, err := net.SplitHostPort(ep); err != nil {
				add("Config.Endpoints[%d] %q is not host:port: %v", i, ep, err)
			}
		}
		if j, dup := seen[ep]; dup {
			add("Config.Endpoints[%d] %q repeats Endpoints[%d]", i, ep, j)
		}
		seen[ep] = i
	}
	if c.AttemptTimeout < 0 {
		add("Config.AttemptTimeout is %v, want a positive duration (0: the default %v)", c.AttemptTimeout, defaultAttemptTimeout)
	}
	if c.Retry != (RetryPolicy{}) {
		errs = append(errs, c.Retry.validate("Config.Retry")...)
	}
	return errors.Join(errs...)
}

// Client is a connection to a store cell: one gRPC connection per
// endpoint, calls retried with backoff and moved to another endpoint when
// one fails. Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	log     *zap.Logger
	eps     []*endpoint
	cur     atomic.Int64 // index in eps of the current endpoint
	metrics *clientMetrics

	// txnPrefix starts every txn_id of this Client: random, so ids are
	// unique across clients and processes.
	txnPrefix string
	txnSeq    atomic.Uint64

	// leaders maps shards to the endpoints of their leaders, learnt from
	// Status in the background (nil until first learnt).
	leaders    atomic.Pointer[leaderTable]
	refreshing atomic.Bool

	// validator enforces the cell's ValidationPolicies on typed writes
	// once StartPolicies has run (nil: built-in rules only).
	validator atomic.Pointer[Validator]

	mu       sync.Mutex // guards closed and adding to bg
	closed   bool
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

// endpoint is one store node's connection.
type endpoint struct {
	addr  string
	conn  *grpc.ClientConn
	store storev1.StoreClient
	mux   *WatchMux // the Watchers' stream
	// singleWatch: the store answered WatchStream with Unimplemented;
	// Watchers open Watch RPCs until one of them breaks.
	singleWatch atomic.Bool
}

// New returns a client for cfg. It dials lazily: no network I/O happens
// until the first call.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newClientMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("clientlib: txn id prefix: %w", err)
	}
	c := &Client{cfg: cfg, log: cfg.Logger, metrics: m, txnPrefix: hex.EncodeToString(nonce) + "-"}
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(pki.StoreCredentials(cfg.TLS)),
		// A watch response can carry one revision as large as the
		// largest request (4 MiB by default) plus framing.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
		codec.DialOption(),
		// gRPC's default reconnection backoff grows to 2 minutes; a
		// restarted store node should be found again sooner.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	opts = append(opts, FlowControlDialOptions()...)
	opts = append(opts, cfg.DialOptions...)
	for _, addr := range cfg.Endpoints {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("clientlib: endpoint %s: %w", addr, err)
		}
		store := storev1.NewStoreClient(conn)
		c.eps = append(c.eps, &endpoint{addr: addr, conn: conn, store: store, mux: NewWatchMux(c.bgCtx, store)})
	}
	// Clients start on different endpoints to spread the load.
	c.cur.Store(int64(mrand.IntN(len(c.eps))))
	return c, nil
}

// FlowControlDialOptions returns the options that fix a connection's
// flow-control windows rather than leave them to gRPC's BDP estimator,
// which is on unless a window is set: it answers the first data of a
// round with a window update and a ping, which the store answers with a
// ping ack, so every lone call cost an extra write and read on each side,
// and a goroutine wake-up at either end of each (the store server fixes
// its windows for the same reason, cellstore/node). The stream window
// holds a watch response of the largest request at once; the connection
// window is the estimator's own ceiling. Other clients of the store
// (tools/bench) take them too.
func FlowControlDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(4 << 20), grpc.WithInitialConnWindowSize(16 << 20)}
}

// Close stops background work and closes the connections. Calls in flight
// fail; Watchers end. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.bgCancel()
	c.mu.Unlock()
	c.bg.Wait()
	var errs []error
	for _, ep := range c.eps {
		if err := ep.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("clientlib: close %s: %w", ep.addr, err))
		}
	}
	return errors.Join(errs...)
}

// NewTxnID returns a txn_id no other request uses: the client's random
// prefix and a counter.
func (c *Client) NewTxnID() string {
	return c.txnPrefix + strconv.FormatUint(c.txnSeq.Add(1), 10)
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// current is the index of the current endpoint.
func (c *Client) current() int { return int(c.cur.Load()) }

// failover moves the current endpoint on from eps[from] after err, unless
// another call already has. It prefers the next endpoint whose connection
// is not known to be failing.
func (c *Client) failover(from int, err error) {
	n := len(c.eps)
	if n == 1 {
		return
	}
	next := (from + 1) % n
	for k := 1; k < n; k++ {
		if i := (from + k) % n; c.eps[i].conn.GetState() != connectivity.TransientFailure {
			next = i
			break
		}
	}
	if c.cur.CompareAndSwap(int64(from), int64(next)) {
		c.log.Warn("store endpoint failed; moving to another", zap.String("from", c.eps[from].addr),
			zap.String("to", c.eps[next].addr), zap.Error(err))
	}
}

// Commit sends req and returns the store's answer. A request without a
// txn_id gets one (req.TxnId is set). An attempt that fails with
// Unavailable, DeadlineExceeded (outcome unknown) or ResourceExhausted
// (overload) is retried with the same request, hence the same txn_id:
// the store applies it at most once and answers a retry of an applied
// request with its first outcome (duplicate=true). A failed group (a
// conflict) is a result, not an error, and is never retried here: that is
// the caller's loop. Errors: an answer such as InvalidArgument or
// FailedPrecondition at once; ctx's error (wrapped) when ctx ends, and
// the last attempt's error when the attempts are spent, both saying
// whether the outcome is unknown.
func (c *Client) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	if req == nil {
		return nil, errors.New("clientlib: commit: nil request")
	}
	if req.GetTxnId() == "" {
		req.TxnId = c.NewTxnID()
	}
	var resp *storev1.CommitResponse
	info := callInfo{
		method:   "Commit",
		what:     fmt.Sprintf("commit %q", req.GetTxnId()),
		mayApply: true,
		route:    func() (int, bool) { return c.commitLeader(req) },
	}
	err := c.do(ctx, info, func(ctx context.Context, ep *endpoint) error {
		r, err := ep.store.Commit(ctx, req)
		if err == nil {
			resp = r
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(resp.GetGroups()) != len(req.GetGroups()) {
		return nil, fmt.Errorf("clientlib: %s: the store answered %d group results for %d groups", info.what, len(resp.GetGroups()), len(req.GetGroups()))
	}
	for _, g := range resp.GetGroups() {
		if !g.GetCommitted() {
			c.metrics.conflicts.Inc()
		}
	}
	return resp, nil
}

// Get reads key linearizably; it returns nil, nil when the key does not
// exist. Unavailable, DeadlineExceeded and ResourceExhausted attempts are
// retried.
func (c *Client) Get(ctx context.Context, key string) (*storev1.KeyValue, error) {
	var resp *storev1.GetResponse
	info := callInfo{method: "Get", what: fmt.Sprintf("get %q", key), route: func() (int, bool) { return c.keyLeader(key) }}
	err := c.do(ctx, info, func(ctx context.Context, ep *endpoint) error {
		r, err := ep.store.Get(ctx, &storev1.GetRequest{Key: key})
		if err == nil {
			resp = r
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetKv(), nil
}

// List reads every key under prefix, in key order, page after page (each
// page retried like Get). It returns the cursor of the first page: pages
// are read at different revisions, and watching from the first page's
// cursor replays whatever changed after it (idempotent for a cache keyed
// by version).
func (c *Client) List(ctx context.Context, prefix string) (kvs []*storev1.KeyValue, cursor []byte, err error) {
	var cont []byte
	for page := 1; ; page++ {
		resp, err := c.rangePage(ctx, &storev1.RangeRequest{Prefix: prefix, Continuation: cont}, page)
		if err != nil {
			return nil, nil, err
		}
		if page == 1 {
			cursor = resp.GetCursor()
		}
		kvs = append(kvs, resp.GetKvs()...)
		next := resp.GetContinuation()
		if len(next) == 0 {
			return kvs, cursor, nil
		}
		if cont != nil && bytes.Compare(next, cont) <= 0 {
			return nil, nil, fmt.Errorf("clientlib: list %q: page %d's continuation %q does not advance past %q", prefix, page, next, cont)
		}
		cont = next
	}
}

func (c *Client) rangePage(ctx context.Context, req *storev1.RangeRequest, page int) (*storev1.RangeResponse, error) {
	var resp *storev1.RangeResponse
	info := callInfo{method: "Range", what: fmt.Sprintf("list %q (page %d)", req.GetPrefix(), page)}
	err := c.do(ctx, info, func(ctx context.Context, ep *endpoint) error {
		r, err := ep.store.Range(ctx, req)
		if err == nil {
			resp = r
		}
		return err
	})
	return resp, err
}

// Status returns the status of the current endpoint's node, retried like
// Get.
func (c *Client) Status(ctx context.Context) (*storev1.StatusResponse, error) {
	var resp *storev1.StatusResponse
	err := c.do(ctx, callInfo{method: "Status", what: "status"}, func(ctx context.Context, ep *endpoint) error {
		r, err := ep.store.Status(ctx, &storev1.StatusRequest{})
		if err == nil {
			resp = r
		}
		return err
	})
	return resp, err
}

// Leader routing. A proposal or ReadIndex sent to a follower is forwarded
// to the leader inside Raft; sent to the leader it saves that hop. The
// table is learnt from every endpoint's Status in the background, kept
// for leaderRefreshInterval and dropped when a routed attempt fails; a
// stale entry only costs the hop.

const leaderRefreshInterval = 5 * time.Second

// leaderTable maps each shard to the endpoint of its leader.
type leaderTable struct {
	router   keyspace.Router
	endpoint []int // by shard: index in eps, -1 when unknown
	learnt   time.Time
}

// leaderTable returns the current table (nil if none was learnt yet),
// starting a refresh when it is missing or old.
func (c *Client) leaderTable() *leaderTable {
	t := c.leaders.Load()
	if t == nil || time.Since(t.learnt) > leaderRefreshInterval {
		c.refreshLeaders()
	}
	return t
}

// invalidateLeaders makes the next routed call refresh the table.
func (c *Client) invalidateLeaders() {
	if t := c.leaders.Load(); t != nil {
		stale := *t
		stale.learnt = time.Time{}
		c.leaders.CompareAndSwap(t, &stale)
	}
}

// refreshLeaders learns the leaders in the background, one refresh at a
// time.
func (c *Client) refreshLeaders() {
	if len(c.eps) == 1 || !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.refreshing.Store(false)
		return
	}
	c.bg.Go(func() {
		defer c.refreshing.Store(false)
		if t := c.learnLeaders(c.bgCtx); t != nil {
			c.leaders.Store(t)
		}
	})
}

// learnLeaders asks every endpoint for its Status and returns, for each
// shard, the endpoint of the leader reported with the highest term; nil
// when no endpoint answered.
func (c *Client) learnLeaders(ctx context.Context) *leaderTable {
	answers := make([]*storev1.StatusResponse, len(c.eps))
	var wg sync.WaitGroup
	for i, ep := range c.eps {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
			defer cancel()
			if st, err := ep.store.Status(actx, &storev1.StatusRequest{}); err == nil {
				answers[i] = st
			}
		})
	}
	wg.Wait()
	byReplica := map[uint64]int{}
	shards := uint32(0)
	for i, st := range answers {
		if st != nil {
			byReplica[st.GetReplicaId()] = i
			shards = max(shards, st.GetShardCount())
		}
	}
	if shards == 0 {
		return nil
	}
	t := &leaderTable{router: keyspace.NewRouter(shards), endpoint: make([]int, shards), learnt: time.Now()}
	terms := make([]uint64, shards)
	for sh := range t.endpoint {
		t.endpoint[sh] = -1
	}
	for _, st := range answers {
		for _, ss := range st.GetShards() {
			sh := ss.GetShard()
			if sh >= shards || ss.GetLeaderReplicaId() == 0 || ss.GetTerm() < terms[sh] {
				continue
			}
			terms[sh] = ss.GetTerm()
			if i, ok := byReplica[ss.GetLeaderReplicaId()]; ok {
				t.endpoint[sh] = i
			} else {
				t.endpoint[sh] = -1
			}
		}
	}
	return t
}

// keyLeader returns the endpoint of the leader of key's shard, if known.
func (c *Client) keyLeader(key string) (int, bool) {
	t := c.leaderTable()
	if t == nil {
		return 0, false
	}
	return c.routable(t.endpoint[t.router.Shard(key)])
}

// routable returns endpoint i (-1: none) if a call may be routed to it:
// its connection is not known to be failing.
func (c *Client) routable(i int) (int, bool) {
	if i < 0 || c.eps[i].conn.GetState() == connectivity.TransientFailure {
		return 0, false
	}
	return i, true
}

// commitLeader returns the endpoint of the leader of the shard that every
// group of req lives on (judged by each group's first key), if there is
// one and it is known.
func (c *Client) commitLeader(req *storev1.CommitRequest) (int, bool) {
	t := c.leaderTable()
	if t == nil {
		return 0, false
	}
	shard := -1
	for _, g := range req.GetGroups() {
		k := g.FirstKey()
		if k == "" {
			return 0, false
		}
		s := int(t.router.Shard(k))
		if shard >= 0 && s != shard {
			return 0, false
		}
		shard = s
	}
	if shard < 0 {
		return 0, false
	}
	return c.routable(t.endpoint[shard])
}

// clientMetrics are the client's Prometheus metrics.
type clientMetrics struct {
	requests  *prometheus.CounterVec   // calls by method and final code
	retries   *prometheus.CounterVec   // attempts after the first, by method
	seconds   *prometheus.HistogramVec // call latency, retries included
	conflicts prometheus.Counter       // failed groups in commit responses
}

// newClientMetrics creates the metrics and registers them with reg (nil:
// not registered). Clients sharing a registry share the metrics.
func newClientMetrics(reg prometheus.Registerer) (*clientMetrics, error) {
	m := &clientMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_client_requests_total", Help: "Store calls by method and final gRPC code (retries included in one call; a watch counts each stream).",
		}, []string{"method", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troupe_client_retries_total", Help: "Store call attempts after the first, and watch reconnections, by method.",
		}, []string{"method"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "troupe_client_request_seconds", Help: "Store call latency, retries included, by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "troupe_client_conflicts_total", Help: "Failed groups in commit responses (conflicts and other group failures).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.requests, err = registerMetric(reg, m.requests); err != nil {
		return nil, err
	}
	if m.retries, err = registerMetric(reg, m.retries); err != nil {
		return nil, err
	}
	if m.seconds, err = registerMetric(reg, m.seconds); err != nil {
		return nil, err
	}
	if m.conflicts, err = registerMetric(reg, m.conflicts); err != nil {
		return nil, err
	}
	return m, nil
}

// registerMetric registers col with reg, or returns the collector of the same
// description already registered there.
func registerMetric[C prometheus.Collector](reg prometheus.Registerer, col C) (C, error) {
	err := reg.Register(col)
	if err == nil {
		return col, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return col, fmt.Errorf("clientlib: register metrics: %w", err)
}
