package localstore_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// clientWith is a store client of node 0 presenting creds (plaintext
// when nil).
func (c *testCluster) clientWith(creds *pki.Source) storev1.StoreClient {
	c.t.Helper()
	conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return storev1.NewStoreClient(conn)
}

func (c *testCluster) as(id pki.Identity) storev1.StoreClient {
	c.t.Helper()
	creds, err := c.Credentials(id)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.clientWith(creds)
}

// snapshot is every key of the cell with its version, as the admin reads it.
func (c *testCluster) snapshot(ctx context.Context) string {
	c.t.Helper()
	kvs, _ := c.rangeAll(ctx, 0, "", 0)
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s@%d=%q\n", kv.GetKey(), kv.GetVersion(), kv.GetValue())
	}
	return b.String()
}

var (
	agentM1   = pki.Identity{Role: pki.RoleAgent, Name: "m1"}
	scheduler = pki.Identity{Role: pki.RoleScheduler, Name: "batch-0"}
	viewer    = pki.Identity{Role: pki.RoleViewer, Name: "ops"}
)

// TestRolesAgainstARealCell sends each role's allowed and forbidden
// operations to a three-node cell: every forbidden one is refused (or its
// connection is), and the store is exactly as before.
func TestRolesAgainstARealCell(t *testing.T) {
	c := startCell(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	for _, k := range []string{"/jobs/ns/j", "/tasks/ns/j/0", "/bindings/m2/ns/j/0", "/runs/m2/ns/j/0", "/machines/m2"} {
		c.put(ctx, 0, k, "v")
	}
	commit := func(cl storev1.StoreClient, groups ...*storev1.Group) error {
		_, err := cl.Commit(ctx, &storev1.CommitRequest{TxnId: c.txnID(), Groups: groups})
		return err
	}
	cond := func(k string, v uint64, ops ...*storev1.Op) *storev1.Group {
		return &storev1.Group{Conditions: []*storev1.Condition{{Key: k, Version: v}}, Ops: ops}
	}
	agent, sched, view := c.as(agentM1), c.as(scheduler), c.as(viewer)
	taskVersion := c.get(ctx, 0, "/tasks/ns/j/0", false).GetKv().GetVersion()

	// Allowed: the agent registers its machine and reports a run; the
	// scheduler binds a task and counts; the viewer reads.
	for name, err := range map[string]error{
		"agent creates its machine":     commit(agent, cond("/machines/m1", 0, putOp("/machines/m1", "m1"))),
		"agent creates its run":         commit(agent, cond("/runs/m1/ns/j/0", 0, putOp("/runs/m1/ns/j/0", "r"))),
		"scheduler binds a task":        commit(sched, cond("/tasks/ns/j/0", taskVersion, putOp("/tasks/ns/j/0", "bound")), cond("/bindings/m1/ns/j/0", 0, putOp("/bindings/m1/ns/j/0", "b")), group(addOp("/alloc/m1/cpu", 100, 0, 1000))),
		"viewer reads":                  func() error { _, err := view.Get(ctx, &storev1.GetRequest{Key: "/jobs/ns/j"}); return err }(),
		"agent watches its bindings":    watchErr(ctx, agent, "/bindings/m1/"),
		"scheduler asks for status":     func() error { _, err := sched.Status(ctx, &storev1.StatusRequest{}); return err }(),
		"agent ranges its own runs":     func() error { _, err := agent.Range(ctx, &storev1.RangeRequest{Prefix: "/runs/m1/"}); return err }(),
		"viewer ranges the whole key":   func() error { _, err := view.Range(ctx, &storev1.RangeRequest{Prefix: ""}); return err }(),
		"agent checks a job's stop key": commit(agent, cond("/runs/m1/ns/j/1", 0, putOp("/runs/m1/ns/j/1", "r"), addOp("/jobstops/ns/j", 0, 0, 0))),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	before := c.snapshot(ctx)
	deniedBefore := metric(t, c.Node(0), "troupe_store_permission_denied_total")
	denied := map[string]error{
		"agent writes another machine's run":         commit(agent, group(putOp("/runs/m2/ns/j/0", "forged"))),
		"agent writes a binding":                     commit(agent, cond("/bindings/m1/ns/j/1", 0, putOp("/bindings/m1/ns/j/1", "self-bound"))),
		"agent writes another machine's binding":     commit(agent, group(deleteOp("/bindings/m2/ns/j/0"))),
		"agent hides a forbidden key in a group":     commit(agent, cond("/machines/m1", 1, putOp("/machines/m1", "m1b")), group(putOp("/machines/m2", "stolen"))),
		"agent reads a task":                         func() error { _, err := agent.Get(ctx, &storev1.GetRequest{Key: "/tasks/ns/j/0"}); return err }(),
		"agent watches every binding":                watchErr(ctx, agent, "/bindings/"),
		"agent watches a prefix of machine names":    watchErr(ctx, agent, "/bindings/m1"),
		"scheduler deletes a job":                    commit(sched, group(deleteOp("/jobs/ns/j"))),
		"scheduler creates a job":                    commit(sched, cond("/jobs/ns/new", 0, putOp("/jobs/ns/new", "j"))),
		"scheduler creates a task":                   commit(sched, cond("/tasks/ns/j/9", 0, putOp("/tasks/ns/j/9", "t"))),
		"scheduler puts a task unconditioned":        commit(sched, group(putOp("/tasks/ns/j/0", "t"))),
		"scheduler writes a run":                     commit(sched, group(putOp("/runs/m2/ns/j/0", "r"))),
		"viewer writes":                              commit(view, group(putOp("/jobs/ns/j", "mine"))),
		"viewer adds":                                commit(view, group(addOp("/alloc/m1/cpu", 1, 0, 10))),
		"agent stops a job":                          commit(agent, group(addOp("/jobstops/ns/j", 1, 0, 1))),
		"viewer deletes":                             commit(view, group(deleteOp("/jobs/ns/j"))),
		"cross-shard commit with one forbidden part": commit(sched, cond("/tasks/ns/j/0", 2, putOp("/tasks/ns/j/0", "x")), group(deleteOp("/jobs/ns/j"))),
	}
	for name, err := range denied {
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: got %v, want PERMISSION_DENIED", name, err)
		}
	}
	// The refusal names the identity, the key and the operation.
	if err := denied["agent writes another machine's run"]; err == nil || !strings.Contains(err.Error(), `agent/m1 may not put key "/runs/m2/ns/j/0"`) {
		t.Errorf("refusal does not say who, what and which key: %v", err)
	}
	if got := metric(t, c.Node(0), "troupe_store_permission_denied_total") - deniedBefore; got != float64(len(denied)) {
		t.Errorf("troupe_store_permission_denied_total rose by %v, want %d", got, len(denied))
	}

	// Admin calls need the admin role.
	for _, id := range []pki.Identity{scheduler, agentM1, viewer} {
		creds, _ := c.Credentials(id)
		conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
		if err != nil {
			t.Fatal(err)
		}
		adm := storev1.NewAdminClient(conn)
		_, err = adm.AddMember(ctx, &storev1.AddMemberRequest{NodeId: 9, RaftAddress: "127.0.0.1:1"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s adds a member: %v", id, err)
		}
		stream, err := adm.Backup(ctx, &storev1.BackupRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s takes a backup: %v", id, err)
		}
		conn.Close()
	}

	// Connections that are refused before any request.
	other, err := pki.NewCA("another", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := other.IssueTo(dir, "foreign", pki.Leaf{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "x"}, Validity: time.Hour / 2}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := c.CA().IssueTo(dir, "expired", pki.Leaf{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "x"}, Validity: time.Hour}, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	caFile := pki.DirFiles(c.PKIDir(), "").CA
	source := func(name string) *pki.Source {
		f := pki.DirFiles(dir, name)
		f.CA = caFile // trusts the cell's CA, presents its own certificate
		s, err := pki.NewSource(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, cl := range map[string]storev1.StoreClient{
		"no certificate":                 c.clientRaw(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.caPool(), ServerName: "127.0.0.1"}),
		"a certificate of another CA":    c.clientWith(source("foreign")),
		"an expired certificate":         c.clientWith(source("expired")),
		"plaintext to a TLS store":       c.clientWith(nil),
		"no certificate, any server ok":  c.clientRaw(&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}),
		"a store cert as a write client": c.as(pki.Identity{Role: pki.RoleStore, Name: "rogue"}),
	} {
		_, err := cl.Commit(ctx, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp("/jobs/ns/j", "rogue"))}})
		if code := status.Code(err); code != codes.Unavailable && code != codes.PermissionDenied {
			t.Errorf("%s: got %v, want the connection refused or PERMISSION_DENIED", name, err)
		}
	}
	// Raft traffic is mutual TLS between store identities: an admin's
	// certificate of the cell's CA does not get in.
	adminCreds, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	raft, err := tls.Dial("tcp", c.Node(1).RaftAddr(), adminCreds.ClientConfig("127.0.0.1", pki.AcceptRoles(pki.RoleStore)))
	if err == nil {
		raft.SetReadDeadline(time.Now().Add(attemptTimeout))
		_, err = raft.Read(make([]byte, 1))
		raft.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an admin on the Raft port: %v, want its certificate refused", err)
	}
	if after := c.snapshot(ctx); after != before {
		t.Errorf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func watchErr(ctx context.Context, cl storev1.StoreClient, prefix string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := cl.Watch(ctx, &storev1.WatchRequest{Prefix: prefix})
	if err != nil {
		return err
	}
	_, err = w.Recv()
	return err
}

// clientRaw dials node 0 with a hand-made TLS configuration.
func (c *testCluster) clientRaw(cfg *tls.Config) storev1.StoreClient {
	c.t.Helper()
	conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return storev1.NewStoreClient(conn)
}

func (c *testCluster) caPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(c.CA().Cert)
	return pool
}

// TestRenewWhileServing renews every certificate of a three-node cell,
// the nodes' and the client's, while a client commits: no commit fails,
// and connections made afterwards present the new certificates.
func TestRenewWhileServing(t *testing.T) {
	c := startCell(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cl := c.as(scheduler)
	var commits, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("/alloc/m%d/cpu", w)
				_, err := cl.Commit(ctx, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp(k, 1, 0, 1<<40))}})
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				commits.Add(1)
			}
		})
	}
	// Renew once the load runs, and again: each time every node's
	// certificate, and the client's.
	admin, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		conn, err := tls.Dial("tcp", c.Node(0).GRPCAddr(), admin.ClientConfig("127.0.0.1", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	wait.Until(ctx, t, "load", func() (bool, string) { return commits.Load() > 50, fmt.Sprint(commits.Load(), " commits") })
	for round := range 2 {
		old := serial()
		for i := range c.Size() {
			id := pki.Identity{Role: pki.RoleStore, Name: fmt.Sprint(i + 1)}
			if err := c.CA().IssueTo(c.PKIDir(), strings.ReplaceAll(id.String(), "/", "-"), pki.Leaf{Identity: id, Hosts: []string{"127.0.0.1", "localhost"}, Validity: time.Hour}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.CA().IssueTo(c.PKIDir(), "scheduler-batch-0", pki.Leaf{Identity: scheduler, Validity: time.Hour}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if now := serial(); now == old {
			t.Fatalf("round %d: node 0 still presents certificate %s after its renewal", round, old)
		}
		n := commits.Load()
		wait.Until(ctx, t, "commits after the renewal", func() (bool, string) { return commits.Load() > n+50, fmt.Sprint(commits.Load()-n, " commits") })
	}
	close(stop)
	wg.Wait()
	if f := failures.Load(); f > 0 {
		t.Fatalf("%d of %d commits failed across the renewals; first: %v", f, commits.Load()+f, firstErr.Load())
	}
	// New Raft connections use the renewed certificates too: restart a
	// node, which its peers dial again.
	c.StopNode(2)
	if err := c.StartNode(2); err != nil {
		t.Fatal(err)
	}
	c.waitConverged(ctx)
}

// TestFloodingIdentityIsThrottled floods one node from one identity while
// another commits: the flooder meets RESOURCE_EXHAUSTED, the other never.
func TestFloodingIdentityIsThrottled(t *testing.T) {
	c := startCell(t, 1, 1, func(nc *node.Config) { nc.Server.MaxInflight, nc.Server.MaxInflightPerIdentity = 64, 4 })
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	flooder, other := c.as(pki.Identity{Role: pki.RoleAdmin, Name: "flood"}), c.as(scheduler)
	var exhausted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := flooder.Commit(ctx, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(putOp(fmt.Sprintf("/flood/%d", w), "x"))}})
				if status.Code(err) == codes.ResourceExhausted {
					exhausted.Add(1)
				} else if err != nil && ctx.Err() == nil {
					t.Errorf("flood: %v", err)
					return
				}
			}
		})
	}
	wait.Until(ctx, t, "the flooder throttled", func() (bool, string) { return exhausted.Load() > 0, "none yet" })
	for i := range 100 {
		_, err := other.Commit(ctx, &storev1.CommitRequest{TxnId: c.txnID(), Groups: []*storev1.Group{group(addOp("/alloc/m1/cpu", 1, 0, 1000))}})
		if err != nil {
			t.Fatalf("commit %d of another identity during the flood: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if got := metric(t, c.Node(0), "troupe_store_identity_throttled_total"); got < 1 {
		t.Errorf("troupe_store_identity_throttled_total = %v", got)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
