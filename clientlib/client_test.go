package clientlib_test

// Tests of the connection layer against real store cells (localstore: three
// nodes in this process, on loopback). No test sleeps to synchronise:
// every wait polls a condition under a deadline.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// An upper bound only: waits return as soon as their condition holds.
const clientTestTimeout = 30 * time.Second

const (
	commitMethod = "/troupe.store.v1.Store/Commit"
	rangeMethod  = "/troupe.store.v1.Store/Range"
	watchMethod  = "/troupe.store.v1.Store/Watch"
)

// clientCluster is a running three-node cell and the fixed gRPC address of
// each node (addresses survive StopNode/StartNode).
type clientCluster struct {
	*localstore.Cluster
	t      *testing.T
	eps    []string
	shards uint32
	router keyspace.Router
}

func startClientCluster(t *testing.T, shards int, tune func(*node.Config)) *clientCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	c, err := localstore.Start(ctx, localstore.Config{Dir: t.TempDir(), Replicas: 3, Shards: shards, Tune: tune})
	if err != nil {
		t.Fatalf("start cell: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &clientCluster{Cluster: c, t: t, eps: c.Endpoints(), shards: uint32(shards), router: keyspace.NewRouter(uint32(shards))}
}

// client returns a Client of every node, recording its RPCs in log (if
// not nil), and optionally with more dial options; it is closed when the
// test ends.
func (cc *clientCluster) client(log *rpcLog, reg prometheus.Registerer, opts ...grpc.DialOption) *clientlib.Client {
	cc.t.Helper()
	cfg := clientlib.DefaultConfig(cc.eps...)
	var err error
	if cfg.TLS, err = cc.Admin(); err != nil {
		cc.t.Fatal(err)
	}
	cfg.AttemptTimeout = 2 * time.Second
	cfg.Registerer = reg
	if log != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(log.unary), grpc.WithChainStreamInterceptor(log.stream))
	}
	cfg.DialOptions = opts
	c, err := clientlib.New(cfg)
	if err != nil {
		cc.t.Fatalf("new client: %v", err)
	}
	cc.t.Cleanup(func() { c.Close() })
	return c
}

// nodeOf returns the index of the node at endpoint ep.
func (cc *clientCluster) nodeOf(ep string) int {
	cc.t.Helper()
	i := slices.Index(cc.eps, ep)
	if i < 0 {
		cc.t.Fatalf("endpoint %q is not one of the cell's %v", ep, cc.eps)
	}
	return i
}

// keyOnShard returns the first fmt.Sprintf(format, i) that lives on shard.
func (cc *clientCluster) keyOnShard(format string, shard uint32) string {
	return cc.router.KeyOn(shard, format)
}

// leaderOf returns the node that every running node sees leading shard,
// if they agree.
func (cc *clientCluster) leaderOf(shard uint32) (int, bool) {
	leader := -1
	for i := range cc.Size() {
		n := cc.Node(i)
		if n == nil {
			continue
		}
		id, _, ok, err := n.NodeHost().GetLeaderID(uint64(shard) + 1)
		if err != nil || !ok || id == 0 || (leader >= 0 && int(id)-1 != leader) {
			return 0, false
		}
		leader = int(id) - 1
	}
	return leader, leader >= 0 && cc.Node(leader) != nil
}

// waitConverged waits until every running node has reached the same
// revision of every shard.
func (cc *clientCluster) waitConverged(ctx context.Context) {
	cc.t.Helper()
	wait.Until(ctx, cc.t, "replicas to converge", func() (bool, string) {
		for sh := range cc.shards {
			var revs []uint64
			for i := range cc.Size() {
				if n := cc.Node(i); n != nil {
					m := n.StateMachine(sh)
					if m == nil {
						return false, fmt.Sprintf("node %d has not opened shard %d", i, sh)
					}
					revs = append(revs, m.Revision())
				}
			}
			if slices.Min(revs) != slices.Max(revs) {
				return false, fmt.Sprintf("shard %d revisions %v", sh, revs)
			}
		}
		return true, ""
	})
}

// rpcLog records a client's RPC attempts.
type rpcLog struct {
	mu    sync.Mutex
	calls []rpcCall
}

type rpcCall struct {
	method, target string
	txnID          string // commits
	err            error
}

func (l *rpcLog) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	call := rpcCall{method: method, target: cc.Target(), err: err}
	if r, ok := req.(*storev1.CommitRequest); ok {
		call.txnID = r.GetTxnId()
	}
	l.mu.Lock()
	l.calls = append(l.calls, call)
	l.mu.Unlock()
	return err
}

func (l *rpcLog) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	l.mu.Lock()
	l.calls = append(l.calls, rpcCall{method: method, target: cc.Target(), err: err})
	l.mu.Unlock()
	return s, err
}

// all returns every recorded call.
func (l *rpcLog) all() []rpcCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// of returns the recorded calls of method.
func (l *rpcLog) of(method string) []rpcCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []rpcCall
	for _, c := range l.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

func storePut(k, v string) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte(v)}}}
}

func storeAdd(k string, delta, lo, hi int64) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: delta, Min: lo, Max: hi}}}
}

// putAck is one acknowledged put.
type putAck struct {
	key, value string
	shard      uint32
	revision   uint64
}

// commitPut commits one put through c and returns its acknowledgement; it
// returns an error rather than failing, for use in other goroutines.
func commitPut(ctx context.Context, c *clientlib.Client, key, value string) (putAck, error) {
	resp, err := c.Commit(ctx, &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{storePut(key, value)}}}})
	if err != nil {
		return putAck{}, err
	}
	g := resp.GetGroups()[0]
	if !g.GetCommitted() {
		return putAck{}, fmt.Errorf("put %s: not committed: %v", key, g.GetFailure())
	}
	return putAck{key: key, value: value, shard: g.GetShard(), revision: g.GetRevision()}, nil
}

func mustCommitPut(ctx context.Context, t *testing.T, c *clientlib.Client, key, value string) putAck {
	t.Helper()
	a, err := commitPut(ctx, c, key, value)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// clientMetricValue returns the value of the counter name with labels in reg
// (0 when absent).
func clientMetricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestClientConfigValidate: Validate names every problem precisely, and
// zero values take the defaults.
func TestClientConfigValidate(t *testing.T) {
	if err := clientlib.DefaultConfig("127.0.0.1:7000").Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	if err := (clientlib.Config{Endpoints: []string{"a:1", "dns:///b:2"}}).Validate(); err != nil {
		t.Fatalf("zero knobs should mean defaults: %v", err)
	}
	bad := clientlib.Config{
		Endpoints:      []string{"a:1", "", "nocolon", "a:1"},
		AttemptTimeout: -time.Second,
		Retry:          clientlib.RetryPolicy{Initial: time.Second, Max: time.Millisecond, Multiplier: 0.5, Jitter: 1, MaxAttempts: 0},
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{
		"Endpoints[1] is empty",
		`Endpoints[2] "nocolon" is not host:port`,
		`Endpoints[3] "a:1" repeats Endpoints[0]`,
		"AttemptTimeout is -1s",
		"Retry.Max (1ms) is less than Initial (1s)",
		"Retry.Multiplier is 0.5",
		"Retry.Jitter is 1",
		"Retry.MaxAttempts is 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := (clientlib.Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "Endpoints is empty") {
		t.Errorf("empty config: %v", err)
	}
	if _, err := clientlib.New(bad); err == nil {
		t.Error("New accepted a bad config")
	}
}

// TestClientNewTxnID: ids are unique within a client and across clients.
func TestClientNewTxnID(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		c, err := clientlib.New(clientlib.DefaultConfig("127.0.0.1:1"))
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			id := c.NewTxnID()
			if seen[id] || id == "" || len(id) > 128 {
				t.Fatalf("txn id %q: repeated, empty or too long", id)
			}
			seen[id] = true
		}
		c.Close()
	}
}

// TestClientCommitGetList: commits land on both shards, Get reads them
// back (and nil for an absent key), and List pages through them in key
// order with more keys than a page holds, returning the first page's
// cursor.
func TestClientCommitGetList(t *testing.T) {
	cell := startClientCluster(t, 2, func(nc *node.Config) { nc.Server.Limits.MaxRangeLimit = 7 })
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	log := &rpcLog{}
	c := cell.client(log, nil)

	if kv, err := c.Get(ctx, "/l/absent"); kv != nil || err != nil {
		t.Fatalf("get absent key: %v, %v; want nil, nil", kv, err)
	}
	const n = 20
	acks := map[string]putAck{}
	last := make([]uint64, cell.shards)
	for i := range n {
		a := mustCommitPut(ctx, t, c, fmt.Sprintf("/l/k%02d", i), fmt.Sprintf("v%d", i))
		acks[a.key] = a
		last[a.shard] = max(last[a.shard], a.revision)
	}
	for sh, r := range last {
		if r == 0 {
			t.Fatalf("no key landed on shard %d: the test needs both", sh)
		}
	}
	for _, call := range log.of(commitMethod) {
		if call.txnID == "" {
			t.Fatalf("a commit went out without txn_id")
		}
	}
	for k, a := range acks {
		kv, err := c.Get(ctx, k)
		if err != nil || kv == nil || string(kv.GetValue()) != a.value || kv.GetVersion() != a.revision {
			t.Fatalf("get %s: %v, %v; want %q at version %d", k, kv, err, a.value, a.revision)
		}
	}

	kvs, cursor, err := c.List(ctx, "/l/")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if pages := len(log.of(rangeMethod)); pages < (n+6)/7 {
		t.Fatalf("list took %d Range calls; %d keys at 7 a page need at least %d", pages, n, (n+6)/7)
	}
	if len(kvs) != n {
		t.Fatalf("list returned %d keys, want %d", len(kvs), n)
	}
	for i, kv := range kvs {
		want := acks[fmt.Sprintf("/l/k%02d", i)]
		if kv.GetKey() != want.key || string(kv.GetValue()) != want.value || kv.GetVersion() != want.revision {
			t.Fatalf("list[%d] = %v, want %+v", i, kv, want)
		}
	}
	cur, err := keyspace.DecodeCursor(cursor, cell.shards)
	if err != nil {
		t.Fatalf("list cursor: %v", err)
	}
	for sh, r := range last {
		if cur[sh] < r {
			t.Fatalf("list cursor %v is before the last commit %d of shard %d", cur, r, sh)
		}
	}
	if st, err := c.Status(ctx); err != nil || st.GetShardCount() != cell.shards {
		t.Fatalf("status: %v, %v", st, err)
	}
}

// TestClientCommitAmbiguousAppliedOnce: the first commit reaches the store
// but its answer is lost (the library sees DeadlineExceeded); the library
// retries the same request with the same txn_id and the store answers with
// the first outcome (duplicate=true): the counter was added to once.
func TestClientCommitAmbiguousAppliedOnce(t *testing.T) {
	cell := startClientCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	var (
		dropped atomic.Bool
		mu      sync.Mutex
		txnIDs  []string
	)
	dropFirst := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if method != commitMethod {
			return err
		}
		mu.Lock()
		txnIDs = append(txnIDs, req.(*storev1.CommitRequest).GetTxnId())
		mu.Unlock()
		if err == nil && dropped.CompareAndSwap(false, true) {
			return status.Error(codes.DeadlineExceeded, "test: the answer was lost")
		}
		return err
	})
	reg := prometheus.NewRegistry()
	c := cell.client(nil, reg, dropFirst)
	const counter = "/amb/counter"
	req := &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{storeAdd(counter, 5, 0, 100), storePut("/amb/marker", "x")}}}}
	resp, err := c.Commit(ctx, req)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if !dropped.Load() {
		t.Fatal("the interceptor dropped no answer")
	}
	mu.Lock()
	ids := slices.Clone(txnIDs)
	mu.Unlock()
	if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] || ids[0] != req.GetTxnId() {
		t.Fatalf("commit attempts carried txn ids %v (request's %q); want the same id twice", ids, req.GetTxnId())
	}
	g := resp.GetGroups()[0]
	if !resp.GetDuplicate() || !g.GetCommitted() {
		t.Fatalf("retried commit answered %v; want the first outcome, committed, duplicate=true", resp)
	}
	kv, err := c.Get(ctx, counter)
	if err != nil || kv == nil {
		t.Fatalf("get counter: %v, %v", kv, err)
	}
	if v, _ := strconv.ParseInt(string(kv.GetValue()), 10, 64); v != 5 || kv.GetVersion() != g.GetRevision() {
		t.Fatalf("counter is %q at version %d; want 5 (added once) at %d", kv.GetValue(), kv.GetVersion(), g.GetRevision())
	}
	if r := clientMetricValue(t, reg, "troupe_client_retries_total", map[string]string{"method": "Commit"}); r != 1 {
		t.Errorf("troupe_client_retries_total{method=Commit} = %v, want 1", r)
	}
	if r := clientMetricValue(t, reg, "troupe_client_requests_total", map[string]string{"method": "Commit", "code": "OK"}); r != 1 {
		t.Errorf("troupe_client_requests_total{method=Commit,code=OK} = %v, want 1", r)
	}
}

// TestClientCommitNoRetryOnConflict: a version mismatch is a result,
// returned after one attempt; malformed and refused requests are errors,
// also after one attempt.
func TestClientCommitNoRetryOnConflict(t *testing.T) {
	cell := startClientCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	log := &rpcLog{}
	reg := prometheus.NewRegistry()
	c := cell.client(log, reg)
	a := mustCommitPut(ctx, t, c, "/cf/k", "v1")

	attempts := func(txnID string) int {
		n := 0
		for _, call := range log.of(commitMethod) {
			if call.txnID == txnID {
				n++
			}
		}
		return n
	}
	stale := &storev1.CommitRequest{Groups: []*storev1.Group{{
		Conditions: []*storev1.Condition{{Key: "/cf/k", Version: a.revision + 1000}},
		Ops:        []*storev1.Op{storePut("/cf/k", "v2")},
	}}}
	resp, err := c.Commit(ctx, stale)
	if err != nil {
		t.Fatalf("conflicting commit: %v; a conflict is a result", err)
	}
	f := resp.GetGroups()[0].GetFailure()
	if resp.GetGroups()[0].GetCommitted() || f.GetReason() != storev1.FailureReason_FAILURE_REASON_VERSION_MISMATCH || f.GetCurrentVersion() != a.revision {
		t.Fatalf("conflicting commit answered %v; want VERSION_MISMATCH at version %d", resp, a.revision)
	}
	if n := attempts(stale.GetTxnId()); n != 1 {
		t.Fatalf("conflicting commit took %d attempts, want 1", n)
	}
	if v := clientMetricValue(t, reg, "troupe_client_conflicts_total", nil); v != 1 {
		t.Errorf("troupe_client_conflicts_total = %v, want 1", v)
	}

	// A group across shards commits (two-phase, in the store).
	crossShard := &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{
		storePut(cell.keyOnShard("/cf/a%d", 0), "x"), storePut(cell.keyOnShard("/cf/b%d", 1), "y"),
	}}}}
	if resp, err := c.Commit(ctx, crossShard); err != nil || !resp.GetGroups()[0].GetCommitted() || len(resp.GetGroups()[0].GetShardRevisions()) != 2 {
		t.Fatalf("group across shards: %v %v", resp, err)
	}
	for _, tc := range []struct {
		name string
		req  *storev1.CommitRequest
		code codes.Code
		def  *storeerr.Error
	}{
		{"empty group", &storev1.CommitRequest{Groups: []*storev1.Group{{}}}, codes.InvalidArgument, storeerr.EmptyGroup},
		{"empty key", &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{storePut("", "x")}}}}, codes.InvalidArgument, storeerr.EmptyKey},
	} {
		_, err := c.Commit(ctx, tc.req)
		if status.Code(err) != tc.code {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.code)
		}
		if !errors.Is(err, tc.def) {
			t.Errorf("%s: %v does not match storeerr.%s", tc.name, err, tc.def.Reason())
		}
		if !strings.Contains(err.Error(), tc.req.GetTxnId()) || !strings.Contains(err.Error(), "attempt 1") {
			t.Errorf("%s: error %q does not name the txn and the attempt", tc.name, err)
		}
		if n := attempts(tc.req.GetTxnId()); n != 1 {
			t.Fatalf("%s: %d attempts, want 1", tc.name, n)
		}
	}
}

// TestClientCommitParentContextEnds: when the caller's context ends while
// a commit is unanswered, Commit returns the context's error and says the
// outcome is unknown. (No store: the interceptor never answers.)
func TestClientCommitParentContextEnds(t *testing.T) {
	hang := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	})
	cfg := clientlib.DefaultConfig("127.0.0.1:1")
	cfg.AttemptTimeout = time.Minute
	cfg.DialOptions = []grpc.DialOption{hang}
	c, err := clientlib.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req := &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{storePut("/x", "y")}}}}
	_, err = c.Commit(ctx, req)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "outcome is unknown") || !strings.Contains(err.Error(), req.GetTxnId()) {
		t.Fatalf("commit under an ending context: %v; want DeadlineExceeded, the txn id and an unknown outcome", err)
	}
	done, cancel2 := context.WithCancel(t.Context())
	cancel2()
	_, err = c.Commit(done, &storev1.CommitRequest{Groups: req.GetGroups()})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "before it was sent") {
		t.Fatalf("commit under a cancelled context: %v; want Canceled, not sent", err)
	}
}

// TestClientLeaderRouting: once leaders are learnt, a commit whose groups
// live on one shard goes first to that shard's leader. The two shards are
// given different leaders, so the client's current endpoint cannot
// explain both.
func TestClientLeaderRouting(t *testing.T) {
	cell := startClientCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	var l0, l1 int
	wait.Until(ctx, t, "the nodes to agree on the leaders", func() (bool, string) {
		var ok0, ok1 bool
		l0, ok0 = cell.leaderOf(0)
		l1, ok1 = cell.leaderOf(1)
		return ok0 && ok1, "no agreed leader"
	})
	if l0 == l1 {
		// A transfer can be dropped (the target not caught up, an
		// election meanwhile): ask again now and then until it happens.
		var asked time.Time
		wait.Until(ctx, t, "shard 1's leadership to move", func() (bool, string) {
			l, ok := cell.leaderOf(1)
			if ok && l != l0 {
				return true, ""
			}
			if ok && time.Since(asked) > 300*time.Millisecond {
				asked = time.Now()
				target := (l + 1 + int(asked.UnixNano()%2)) % cell.Size()
				if err := cell.Node(l).NodeHost().RequestLeaderTransfer(2, uint64(target+1)); err != nil {
					return false, fmt.Sprintf("leader transfer to node %d: %v", target, err)
				}
			}
			return false, fmt.Sprintf("leader %d (agreed: %v)", l, ok)
		})
		l1, _ = cell.leaderOf(1)
	}
	log := &rpcLog{}
	c := cell.client(log, nil)
	firstTarget := func(req *storev1.CommitRequest) string {
		for _, call := range log.of(commitMethod) {
			if call.txnID == req.GetTxnId() {
				return call.target
			}
		}
		return ""
	}
	commitTo := func(key string) string {
		req := &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{storePut(key, "v")}}}}
		if _, err := c.Commit(ctx, req); err != nil {
			t.Fatalf("commit %s: %v", key, err)
		}
		return firstTarget(req)
	}
	k0, k1 := cell.keyOnShard("/lr/a%d", 0), cell.keyOnShard("/lr/b%d", 1)
	// The table is learnt in the background after the first commit, from
	// a node whose view of a leadership just moved may lag: wait until
	// both shards' commits go to their leaders, then check they keep to.
	wait.Until(ctx, t, "commits on shards 0 and 1 to go to their leaders", func() (bool, string) {
		got0, got1 := commitTo(k0), commitTo(k1)
		return got0 == cell.eps[l0] && got1 == cell.eps[l1], fmt.Sprintf("went to %s and %s, leaders are %s and %s", got0, got1, cell.eps[l0], cell.eps[l1])
	})
	if l, ok := cell.leaderOf(0); !ok || l != l0 {
		t.Skipf("shard 0's leadership moved during the test")
	}
	for range 3 {
		got := commitTo(k1)
		if l, ok := cell.leaderOf(1); !ok || l != l1 {
			t.Skipf("shard 1's leadership moved during the test") // as can happen on a loaded machine
		}
		if got != cell.eps[l1] {
			t.Fatalf("commit on shard 1 went first to %s, its leader is %s", got, cell.eps[l1])
		}
		if got := commitTo(k0); got != cell.eps[l0] {
			t.Fatalf("commit on shard 0 went first to %s, its leader is %s", got, cell.eps[l0])
		}
	}
}

// TestClientFailover: when the node of the client's current endpoint
// stops, commits and reads keep working through the others.
func TestClientFailover(t *testing.T) {
	cell := startClientCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	log := &rpcLog{}
	c := cell.client(log, nil)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	stopped := int(st.GetReplicaId()) - 1
	mustCommitPut(ctx, t, c, "/fo/before", "x")
	cell.StopNode(stopped)
	t.Logf("stopped node %d (%s), the client's current endpoint", stopped, cell.eps[stopped])

	acks := map[string]putAck{}
	for i := range 20 {
		a := mustCommitPut(ctx, t, c, fmt.Sprintf("/fo/k%02d", i), fmt.Sprintf("v%d", i))
		acks[a.key] = a
		kv, err := c.Get(ctx, a.key)
		if err != nil || kv == nil || string(kv.GetValue()) != a.value || kv.GetVersion() != a.revision {
			t.Fatalf("get %s after failover: %v, %v; want %+v", a.key, kv, err, a)
		}
	}
	kvs, _, err := c.List(ctx, "/fo/k")
	if err != nil || len(kvs) != len(acks) {
		t.Fatalf("list after failover: %d keys, %v; want %d", len(kvs), err, len(acks))
	}
	for _, kv := range kvs {
		if a := acks[kv.GetKey()]; string(kv.GetValue()) != a.value || kv.GetVersion() != a.revision {
			t.Fatalf("list after failover: %v, want %+v", kv, a)
		}
	}
	st, err = c.Status(ctx)
	if err != nil || int(st.GetReplicaId())-1 == stopped {
		t.Fatalf("status after failover: %v, %v; want another node than %d", st, err, stopped)
	}
	failed := 0
	for _, call := range log.all() {
		if call.target == cell.eps[stopped] && status.Code(call.err) == codes.Unavailable {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("no call met the stopped node: the test did not exercise failover")
	}
}

// watchPump reads a Watcher in the background so that the test can wait
// for its responses with a deadline.
type watchPump struct {
	out chan watchItem
}

type watchItem struct {
	resp *storev1.WatchResponse
	err  error
}

func pumpWatch(ctx context.Context, w *clientlib.Watcher) *watchPump {
	p := &watchPump{out: make(chan watchItem)}
	go func() {
		for {
			resp, err := w.Next()
			select {
			case p.out <- watchItem{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *watchPump) next(ctx context.Context, t *testing.T) (*storev1.WatchResponse, error) {
	t.Helper()
	select {
	case it := <-p.out:
		return it.resp, it.err
	case <-ctx.Done():
		t.Fatal("timed out waiting for a watch response")
		return nil, nil
	}
}

// watchRecord is what the test keeps of a watch: events by shard in
// arrival order, and the last cursor.
type watchRecord struct {
	events map[uint32][]*storev1.Event
	cursor keyspace.Cursor
	n      int
}

// take records one response, failing on a non-progress response without
// events.
func (r *watchRecord) take(t *testing.T, shards uint32, resp *storev1.WatchResponse) {
	t.Helper()
	if len(resp.GetEvents()) == 0 && !resp.GetProgress() {
		t.Fatalf("watch response with neither events nor progress: %v", resp)
	}
	for _, ev := range resp.GetEvents() {
		r.events[ev.GetShard()] = append(r.events[ev.GetShard()], ev)
		r.n++
	}
	cur, err := keyspace.DecodeCursor(resp.GetCursor(), shards)
	if err != nil {
		t.Fatalf("watch cursor: %v", err)
	}
	r.cursor = cur
}

// covers reports whether the cursor has reached every acknowledged put.
func (r *watchRecord) covers(acks []putAck) bool {
	if r.cursor == nil {
		return false
	}
	for _, a := range acks {
		if r.cursor[a.shard] < a.revision {
			return false
		}
	}
	return true
}

// check compares the events received with the acknowledged puts: per
// shard, revisions strictly increase (no duplicates, commit order), and
// the events are exactly the puts with revision > from[shard].
func (r *watchRecord) check(t *testing.T, acks []putAck, from keyspace.Cursor) {
	t.Helper()
	want := map[uint32]map[uint64]putAck{}
	for _, a := range acks {
		if a.revision > from[a.shard] {
			if want[a.shard] == nil {
				want[a.shard] = map[uint64]putAck{}
			}
			want[a.shard][a.revision] = a
		}
	}
	total := 0
	for sh, evs := range r.events {
		for i, ev := range evs {
			v := ev.GetKv().GetVersion()
			if i > 0 && v <= evs[i-1].GetKv().GetVersion() {
				t.Fatalf("shard %d: event at revision %d after %d: out of order or repeated", sh, v, evs[i-1].GetKv().GetVersion())
			}
			a, ok := want[sh][v]
			if !ok || ev.GetType() != storev1.EventType_EVENT_TYPE_PUT || ev.GetKv().GetKey() != a.key || string(ev.GetKv().GetValue()) != a.value {
				t.Fatalf("shard %d: event %v matches no acknowledged put (%+v)", sh, ev, a)
			}
		}
		total += len(evs)
	}
	n := 0
	for _, m := range want {
		n += len(m)
	}
	if total != n {
		t.Fatalf("received %d events for %d acknowledged puts: some are missing", total, n)
	}
}

// TestWatchOrderedAndFailover: a Watcher receives the events of concurrent
// commits in order, without gaps; when its node stops mid-stream, it goes
// on from its cursor on another node, still without gaps or duplicates.
func TestWatchOrderedAndFailover(t *testing.T) {
	cell := startClientCluster(t, 2, func(nc *node.Config) { nc.Server.ProgressInterval = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	writer := cell.client(nil, nil)
	log := &rpcLog{}
	reader := cell.client(log, nil)
	const prefix = "/w/"
	mustCommitPut(ctx, t, writer, "/w/before", "old")
	_, start, err := reader.List(ctx, prefix)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	from, err := keyspace.DecodeCursor(start, cell.shards)
	if err != nil {
		t.Fatal(err)
	}
	w := reader.Watch(ctx, prefix, start)
	defer w.Close()
	pump := pumpWatch(ctx, w)
	rec := &watchRecord{events: map[uint32][]*storev1.Event{}}
	// A second watcher from "now" (no cursor): it must see everything
	// committed after Watch returned, and nothing before.
	wNow := reader.Watch(ctx, prefix, nil)
	defer wNow.Close()
	pumpNow := pumpWatch(ctx, wNow)
	recNow := &watchRecord{events: map[uint32][]*storev1.Event{}}

	var (
		mu   sync.Mutex
		acks []putAck
	)
	// writers runs n goroutines, each committing its puts; after the
	// first half each waits for resume to close.
	writers := func(phase string, n, each int, resume <-chan struct{}) chan error {
		errc := make(chan error, n)
		for g := range n {
			go func() {
				for i := range each {
					if i == each/2 && resume != nil {
						select {
						case <-resume:
						case <-ctx.Done():
							errc <- ctx.Err()
							return
						}
					}
					a, err := commitPut(ctx, writer, fmt.Sprintf("/w/%s-%d-%d", phase, g, i), fmt.Sprintf("%s%d.%d", phase, g, i))
					if err != nil {
						errc <- err
						return
					}
					mu.Lock()
					acks = append(acks, a)
					mu.Unlock()
				}
				errc <- nil
			}()
		}
		return errc
	}
	waitWriters := func(errc chan error, n int) {
		t.Helper()
		for range n {
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("writer: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("timed out waiting for the writers")
			}
		}
	}
	collectFrom := func(p *watchPump, r *watchRecord, until func() bool) {
		t.Helper()
		for !until() {
			resp, err := p.next(ctx, t)
			if err != nil {
				t.Fatalf("watch ended: %v", err)
			}
			r.take(t, cell.shards, resp)
		}
	}
	collect := func(until func() bool) {
		t.Helper()
		collectFrom(pump, rec, until)
	}
	snapshot := func() []putAck {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(acks)
	}

	// Phase 1: concurrent commits, all seen in order.
	waitWriters(writers("a", 4, 10, nil), 4)
	collect(func() bool { return rec.covers(snapshot()) })
	rec.check(t, snapshot(), from)
	collectFrom(pumpNow, recNow, func() bool { return recNow.covers(snapshot()) })
	recNow.check(t, snapshot(), from)
	wNow.Close()

	// Phase 2: stop the watcher's node while commits go on.
	// Both watchers opened their stream on the reader's current
	// endpoint, which no failure has moved yet.
	streams := log.of(watchStreamMethod)
	watched := cell.nodeOf(streams[0].target)
	for _, s := range streams {
		if s.target != streams[0].target || s.err != nil {
			t.Fatalf("watch streams before the stop: %+v; want all on one endpoint", streams)
		}
	}
	seen := rec.n
	resume := make(chan struct{})
	errc := writers("b", 2, 20, resume)
	collect(func() bool { return rec.n >= seen+5 })
	cell.StopNode(watched)
	t.Logf("stopped node %d (%s), the watcher's, after %d events", watched, cell.eps[watched], rec.n)
	close(resume)
	waitWriters(errc, 2)
	collect(func() bool { return rec.covers(snapshot()) })
	rec.check(t, snapshot(), from)

	streams = log.of(watchStreamMethod)
	if last := streams[len(streams)-1]; last.target == cell.eps[watched] || last.err != nil {
		t.Fatalf("the last watch stream went to %s (err %v); want another node than the stopped %s", last.target, last.err, cell.eps[watched])
	}
	t.Logf("%d events over %d watch streams", rec.n, len(streams))

	// Close ends Next with an error matching context.Canceled.
	w.Close()
	for {
		if _, err := pump.next(ctx, t); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Next after Close: %v, want context.Canceled", err)
			}
			break
		}
	}
}

// TestWatchCompacted: a cursor older than the change log ends the watch
// with an error matching ErrCompacted and carrying the oldest cursor, from
// which a new watch gets every later change.
func TestWatchCompacted(t *testing.T) {
	cell := startClientCluster(t, 2, func(nc *node.Config) {
		nc.Server.LogRetention = 5
		nc.Watch.RingRevisions = 1 // the rings must not serve what the log dropped
	})
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	c := cell.client(nil, nil)
	const prefix = "/cp/"
	for i := range 2 {
		mustCommitPut(ctx, t, c, fmt.Sprintf("/cp/k%d", i), "early")
	}
	_, old, err := c.List(ctx, prefix)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var acks []putAck
	for i := range 24 {
		acks = append(acks, mustCommitPut(ctx, t, c, fmt.Sprintf("/cp/k%d", i%6), fmt.Sprintf("v%d", i)))
	}
	cell.waitConverged(ctx)

	w := c.Watch(ctx, prefix, old)
	defer w.Close()
	resp, err := pumpWatch(ctx, w).next(ctx, t)
	if !errors.Is(err, clientlib.ErrCompacted) {
		t.Fatalf("watch from a compacted cursor: %v, %v; want ErrCompacted", resp, err)
	}
	var ce *clientlib.CompactedError
	if !errors.As(err, &ce) || len(ce.OldestCursor) == 0 {
		t.Fatalf("compacted error %v carries no oldest cursor", err)
	}
	oldest, err2 := keyspace.DecodeCursor(ce.OldestCursor, cell.shards)
	oldCur, _ := keyspace.DecodeCursor(old, cell.shards)
	if err2 != nil || oldest[ce.Shard] <= oldCur[ce.Shard] {
		t.Fatalf("oldest cursor %v (%v) is not past the compacted %v on shard %d", oldest, err2, oldCur, ce.Shard)
	}
	if _, again := w.Next(); !errors.Is(again, clientlib.ErrCompacted) {
		t.Fatalf("Next after the end: %v, want the same error", again)
	}
	t.Logf("%v", err)

	w2 := c.Watch(ctx, prefix, ce.OldestCursor)
	defer w2.Close()
	pump := pumpWatch(ctx, w2)
	rec := &watchRecord{events: map[uint32][]*storev1.Event{}}
	for !rec.covers(acks) {
		resp, err := pump.next(ctx, t)
		if err != nil {
			t.Fatalf("watch from the oldest cursor: %v", err)
		}
		rec.take(t, cell.shards, resp)
	}
	rec.check(t, acks, oldest)
}
