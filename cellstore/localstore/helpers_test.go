package localstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Upper bounds only: every wait below polls a condition and returns as soon
// as it holds.
const (
	testTimeout    = 30 * time.Second // one test's whole budget
	attemptTimeout = 2 * time.Second  // one RPC attempt inside a retry loop
	pollInterval   = 5 * time.Millisecond
)

// testCluster is a running local cell with one gRPC client per node. Node
// addresses stay the same across StopNode/StartNode, so the clients
// reconnect by themselves.
type testCluster struct {
	*localstore.Cluster
	t       *testing.T
	shards  uint32
	router  keyspace.Router
	clients []storev1.StoreClient
	txnSeq  atomic.Int64
	// attempt bounds one RPC attempt in retry loops (0: attemptTimeout).
	attempt time.Duration
}

// startCell starts a cell of replicas nodes and shards shards in a temporary
// directory; it is closed when the test ends.
func startCell(t *testing.T, replicas, shards int, tune func(*node.Config)) *testCluster {
	t.Helper()
	return startCellWith(t, localstore.Config{Replicas: replicas, Shards: shards, Tune: tune})
}

// startCellWith starts a cell of cfg in a temporary directory.
func startCellWith(t *testing.T, cfg localstore.Config) *testCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cfg.Dir = t.TempDir()
	c, err := localstore.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start cell: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	tc := &testCluster{Cluster: c, t: t, shards: uint32(cfg.Shards), router: keyspace.NewRouter(uint32(cfg.Shards))}
	eps := c.Endpoints()
	if len(eps) != cfg.Replicas {
		t.Fatalf("cell has %d endpoints, want %d", len(eps), cfg.Replicas)
	}
	for _, addr := range eps {
		tc.clients = append(tc.clients, storev1.NewStoreClient(tc.dial(addr)))
	}
	return tc
}

// dial connects to a node's gRPC address, as the cell's admin, for the
// rest of the test.
func (c *testCluster) dial(addr string) *grpc.ClientConn {
	t := c.t
	t.Helper()
	creds, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// admin returns an Admin client of node i.
func (c *testCluster) admin(i int) storev1.AdminClient {
	return storev1.NewAdminClient(c.dial(c.Node(i).GRPCAddr()))
}

// join starts a new node and adds it to the cell through node 1's Admin
// service; it returns the node's index and the members after the change.
func (c *testCluster) join(ctx context.Context) (int, []*storev1.Member) {
	c.t.Helper()
	i, err := c.StartNewNode()
	if err != nil {
		c.t.Fatal(err)
	}
	c.clients = append(c.clients, storev1.NewStoreClient(c.dial(c.Node(i).GRPCAddr())))
	resp, err := c.admin(0).AddMember(ctx, &storev1.AddMemberRequest{NodeId: uint64(i + 1), RaftAddress: c.Node(i).RaftAddr(), ShardCount: c.shards})
	if err != nil {
		c.t.Fatalf("add node %d: %v", i+1, err)
	}
	return i, resp.GetMembers()
}

// client returns the gRPC client of node i.
func (c *testCluster) client(i int) storev1.StoreClient { return c.clients[i] }

// running returns the indexes of the running nodes.
func (c *testCluster) running() []int {
	var out []int
	for i := range c.Size() {
		if c.Node(i) != nil {
			out = append(out, i)
		}
	}
	return out
}

// txnID returns a txn_id no other request of this cell uses.
func (c *testCluster) txnID() string {
	return fmt.Sprintf("%s-%d", c.t.Name(), c.txnSeq.Add(1))
}

// keyOnShard returns the first key fmt.Sprintf(format, i), i = 0, 1, ...,
// that lives on shard.
func (c *testCluster) keyOnShard(format string, shard uint32) string {
	return c.router.KeyOn(shard, format)
}

// leader returns the node leading shard, as that node itself sees it, if
// it is running.
func (c *testCluster) leader(shard uint32) (int, bool) {
	for _, i := range c.running() {
		id, _, ok, err := c.Node(i).NodeHost().GetLeaderID(uint64(shard) + 1)
		if err != nil || !ok || id == 0 || int(id) > c.Size() {
			continue
		}
		l := int(id) - 1
		if n := c.Node(l); n != nil {
			if id2, _, ok, err := n.NodeHost().GetLeaderID(uint64(shard) + 1); err == nil && ok && id2 == id {
				return l, true
			}
		}
	}
	return 0, false
}

// waitLeader waits until shard has a running leader and returns it.
func (c *testCluster) waitLeader(ctx context.Context, shard uint32) int {
	c.t.Helper()
	var l int
	wait.Until(ctx, c.t, fmt.Sprintf("a leader of shard %d", shard), func() (bool, string) {
		var ok bool
		l, ok = c.leader(shard)
		return ok, "no running node leads it"
	})
	return l
}

// waitConverged waits until every running node has applied the same Raft
// index and reached the same revision on every shard.
func (c *testCluster) waitConverged(ctx context.Context) {
	c.t.Helper()
	wait.Until(ctx, c.t, "replicas to converge", func() (bool, string) {
		for sh := range c.shards {
			var idx, rev []uint64
			for _, i := range c.running() {
				m := c.Node(i).StateMachine(sh)
				if m == nil {
					return false, fmt.Sprintf("node %d has not opened shard %d", i, sh)
				}
				idx, rev = append(idx, m.AppliedIndex()), append(rev, m.Revision())
			}
			for j := range idx {
				if idx[j] != idx[0] || rev[j] != rev[0] {
					return false, fmt.Sprintf("shard %d: applied indexes %v, revisions %v", sh, idx, rev)
				}
			}
		}
		return true, ""
	})
}

// revisions returns node i's revision of every shard.
func (c *testCluster) revisions(i int) []uint64 {
	out := make([]uint64, c.shards)
	for sh := range c.shards {
		out[sh] = c.Node(i).StateMachine(sh).Revision()
	}
	return out
}

// retryable reports whether an RPC may be retried: the request was refused
// or its outcome is unknown. Commits are retried with the same txn_id, so
// the store's dedupe makes a retry of an applied commit harmless.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// retry calls fn, each attempt with its own deadline, until it succeeds,
// fails for good, or ctx ends. fn gets the attempt number (0-based).
func (c *testCluster) retry(ctx context.Context, fn func(ctx context.Context, attempt int) error) error {
	timeout := c.attempt
	if timeout == 0 {
		timeout = attemptTimeout
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := fn(actx, attempt)
		cancel()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// commit sends req to node first (modulo the cell size) and, on a retryable error, again with the
// same txn_id to the running nodes in turn, until it is answered.
func (c *testCluster) commit(ctx context.Context, first int, req *storev1.CommitRequest) *storev1.CommitResponse {
	c.t.Helper()
	var resp *storev1.CommitResponse
	err := c.retry(ctx, func(ctx context.Context, attempt int) error {
		i := first % c.Size()
		if attempt > 0 || c.Node(i) == nil {
			run := c.running()
			i = run[(first+attempt)%len(run)]
		}
		var err error
		resp, err = c.client(i).Commit(ctx, req)
		return err
	})
	if err != nil {
		c.t.Fatalf("commit %s: %v", req.GetTxnId(), err)
	}
	return resp
}

// commitTo sends req to node i until it is answered, retrying there with
// the same txn_id (the client protocol for an unknown outcome), and returns
// the answer and how many attempts it took. A proposal the Raft layer drops
// (as can happen while connections between nodes come up) is only noticed
// when the attempt's deadline passes, so attempts are kept short.
func (c *testCluster) commitTo(ctx context.Context, i int, req *storev1.CommitRequest) (*storev1.CommitResponse, int) {
	c.t.Helper()
	resp, attempts, err := c.tryCommitTo(ctx, i, req)
	if err != nil {
		c.t.Fatalf("commit %s on node %d: %v", req.GetTxnId(), i, err)
	}
	return resp, attempts
}

// tryCommitTo is commitTo for other goroutines than the test's: it
// returns the error rather than failing the test.
func (c *testCluster) tryCommitTo(ctx context.Context, i int, req *storev1.CommitRequest) (*storev1.CommitResponse, int, error) {
	var (
		resp     *storev1.CommitResponse
		attempts int
	)
	err := c.retry(ctx, func(ctx context.Context, attempt int) error {
		attempts = attempt + 1
		var err error
		resp, err = c.client(i).Commit(ctx, req)
		return err
	})
	return resp, attempts, err
}

// ack is one acknowledged write.
type ack struct {
	key, value string
	shard      uint32
	revision   uint64
}

// put commits one put through node first (or the others if it fails) and
// returns the acknowledgement.
func (c *testCluster) put(ctx context.Context, first int, key, value string) ack {
	c.t.Helper()
	resp := c.commit(ctx, first, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(key, value))}})
	g := resp.GetGroups()[0]
	if !g.GetCommitted() {
		c.t.Fatalf("put %s: not committed: %v", key, g.GetFailure())
	}
	if want := c.router.Shard(key); g.GetShard() != want {
		c.t.Fatalf("put %s: committed on shard %d, the router says %d", key, g.GetShard(), want)
	}
	return ack{key: key, value: value, shard: g.GetShard(), revision: g.GetRevision()}
}

// get reads key linearizably (or stale) from node i, retrying while the
// node is unavailable.
func (c *testCluster) get(ctx context.Context, i int, key string, stale bool) *storev1.GetResponse {
	c.t.Helper()
	var resp *storev1.GetResponse
	err := c.retry(ctx, func(ctx context.Context, _ int) error {
		var err error
		resp, err = c.client(i).Get(ctx, &storev1.GetRequest{Key: key, Stale: stale})
		return err
	})
	if err != nil {
		c.t.Fatalf("get %s from node %d: %v", key, i, err)
	}
	return resp
}

// rangeAll lists prefix on node i page by page (limit keys a page) and
// returns the keys and the first page's cursor.
func (c *testCluster) rangeAll(ctx context.Context, i int, prefix string, limit uint32) ([]*storev1.KeyValue, []byte) {
	c.t.Helper()
	var (
		kvs    []*storev1.KeyValue
		cursor []byte
		cont   []byte
	)
	for page := 0; ; page++ {
		var resp *storev1.RangeResponse
		err := c.retry(ctx, func(ctx context.Context, _ int) error {
			var err error
			resp, err = c.client(i).Range(ctx, &storev1.RangeRequest{Prefix: prefix, Limit: limit, Continuation: cont})
			return err
		})
		if err != nil {
			c.t.Fatalf("range %s on node %d: %v", prefix, i, err)
		}
		if limit > 0 && len(resp.GetKvs()) > int(limit) {
			c.t.Fatalf("range %s page %d: %d keys, limit %d", prefix, page, len(resp.GetKvs()), limit)
		}
		if page == 0 {
			cursor = resp.GetCursor()
		}
		kvs = append(kvs, resp.GetKvs()...)
		if len(resp.GetContinuation()) == 0 {
			return kvs, cursor
		}
		if page > 10000 {
			c.t.Fatalf("range %s: no end after %d pages", prefix, page)
		}
		cont = resp.GetContinuation()
	}
}

// decodeCursor decodes a cursor of this cell.
func (c *testCluster) decodeCursor(b []byte) keyspace.Cursor {
	c.t.Helper()
	cur, err := keyspace.DecodeCursor(b, c.shards)
	if err != nil {
		c.t.Fatalf("decode cursor %x: %v", b, err)
	}
	return cur
}

func putOp(k, v string) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte(v)}}}
}

func deleteOp(k string) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: k}}}
}

func addOp(k string, delta, lo, hi int64) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: delta, Min: lo, Max: hi}}}
}

func group(ops ...*storev1.Op) *storev1.Group { return &storev1.Group{Ops: ops} }

// watcher reads a watch stream in the background so that tests can wait
// for its responses with deadlines.
type watcher struct {
	cancel context.CancelFunc
	out    chan watchItem
}

type watchItem struct {
	resp *storev1.WatchResponse
	err  error // the stream's final error
}

// watch opens a watch on node i.
func (c *testCluster) watch(ctx context.Context, i int, prefix string, cursor []byte) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, out: make(chan watchItem)}
	c.t.Cleanup(cancel)
	stream, err := c.client(i).Watch(ctx, &storev1.WatchRequest{Prefix: prefix, Cursor: cursor})
	go func() {
		for err == nil {
			var resp *storev1.WatchResponse
			if resp, err = stream.Recv(); err == nil {
				select {
				case w.out <- watchItem{resp: resp}:
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case w.out <- watchItem{err: err}:
		case <-ctx.Done():
		}
	}()
	return w
}

// next returns the next response, or the stream's final error; it fails
// the test when ctx ends first.
func (w *watcher) next(ctx context.Context, t *testing.T) (*storev1.WatchResponse, error) {
	t.Helper()
	select {
	case it := <-w.out:
		return it.resp, it.err
	case <-ctx.Done():
		t.Fatalf("timed out waiting for a watch response")
		return nil, nil
	}
}

// mustNext is next for a stream that must not end.
func (w *watcher) mustNext(ctx context.Context, t *testing.T) *storev1.WatchResponse {
	t.Helper()
	resp, err := w.next(ctx, t)
	if err != nil {
		t.Fatalf("watch ended: %v", err)
	}
	return resp
}

// event is a watch event reduced to what tests compare.
type event struct {
	typ        storev1.EventType
	key, value string
	version    uint64
	shard      uint32
}

func (e event) String() string {
	return fmt.Sprintf("%s %s=%q@%d/s%d", e.typ, e.key, e.value, e.version, e.shard)
}

func eventsOf(resp *storev1.WatchResponse) []event {
	var out []event
	for _, ev := range resp.GetEvents() {
		out = append(out, event{typ: ev.GetType(), key: ev.GetKv().GetKey(), value: string(ev.GetKv().GetValue()),
			version: ev.GetKv().GetVersion(), shard: ev.GetShard()})
	}
	return out
}

// putEvent is the event an acknowledged put must produce.
func (a ack) putEvent() event {
	return event{typ: storev1.EventType_EVENT_TYPE_PUT, key: a.key, value: a.value, version: a.revision, shard: a.shard}
}

// covers reports whether cursor has reached every shard revision in revs.
func covers(cursor keyspace.Cursor, revs []uint64) bool {
	for sh, r := range revs {
		if cursor[sh] < r {
			return false
		}
	}
	return true
}

// lastRevisions returns, per shard, the highest revision among acks.
func lastRevisions(shards uint32, acks []ack) []uint64 {
	out := make([]uint64, shards)
	for _, a := range acks {
		out[a.shard] = max(out[a.shard], a.revision)
	}
	return out
}

// collectUntil reads w until its cursor covers revs, returning every event
// seen on the way. With progress notifications on, it returns even when no
// more events come.
func (c *testCluster) collectUntil(ctx context.Context, w *watcher, revs []uint64) []event {
	c.t.Helper()
	var evs []event
	for {
		resp := w.mustNext(ctx, c.t)
		evs = append(evs, eventsOf(resp)...)
		if covers(c.decodeCursor(resp.GetCursor()), revs) {
			return evs
		}
	}
}
