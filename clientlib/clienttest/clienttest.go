// Package clienttest starts what tests of cell roles (schedulers,
// controllers, agents, the troupe commands) need: a one-node store in this
// process, and clients of it, in the way net/http/httptest starts servers.
//
//	cell := clienttest.Start(ctx, t) // stopped when the test ends
//	c := cell.Client()               // closed when the test ends, before the cell
//
// Both stop through t.Cleanup, which runs last in first out: the clients
// close before the store they use. Start and Client end the test on
// failure, so call them from the test's goroutine.
package clienttest

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
)

// Store is a one-node store (of one shard, unless StartShards) running in
// this process for a test.
// The embedded localstore.Cluster gives its endpoints and nodes.
type Store struct {
	*localstore.Cluster
	t testing.TB
}

// Start starts a one-node, one-shard store under t.TempDir() and waits
// until it has a leader, or ctx ends. The store stops when the test ends.
func Start(ctx context.Context, t testing.TB) *Store {
	t.Helper()
	return StartShards(ctx, t, 1)
}

// StartShards is Start with a store of shards shards, for tests of
// commits that span shards.
func StartShards(ctx context.Context, t testing.TB, shards int) *Store {
	t.Helper()
	lc, err := localstore.Start(ctx, localstore.Config{Dir: t.TempDir(), Replicas: 1, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return &Store{Cluster: lc, t: t}
}

// admin is the identity of Client's clients.
var admin = pki.Identity{Role: pki.RoleAdmin, Name: "clienttest"}

// Client returns a new client of the cell, with the default configuration
// and the cell's admin identity, closed when the test that started the
// cell ends.
func (c *Store) Client() *clientlib.Client {
	c.t.Helper()
	return c.client(admin, zap.NewNop())
}

// ClientLogging returns a new client like Client's that logs to log.
func (c *Store) ClientLogging(log *zap.Logger) *clientlib.Client {
	c.t.Helper()
	return c.client(admin, log)
}

// ClientAs returns a new client presenting id (a certificate the cell's
// CA issues for it), as Client's otherwise.
func (c *Store) ClientAs(id pki.Identity) *clientlib.Client {
	c.t.Helper()
	return c.client(id, zap.NewNop())
}

func (c *Store) client(id pki.Identity, log *zap.Logger) *clientlib.Client {
	c.t.Helper()
	cfg := clientlib.DefaultConfig(c.Endpoints()...)
	cfg.Logger = log
	var err error
	if cfg.TLS, err = c.Credentials(id); err != nil {
		c.t.Fatal(err)
	}
	cl, err := clientlib.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Flags returns the credential flags of a troupe process presenting id
// (--ca, --cert, --key), issuing its certificate.
func (c *Store) Flags(id pki.Identity) []string {
	c.t.Helper()
	f, err := c.CredentialFiles(id)
	if err != nil {
		c.t.Fatal(err)
	}
	return []string{"--ca", f.CA, "--cert", f.Cert, "--key", f.Key}
}

// AdminFlags are the credential flags of the cell's admin, as the CLI
// takes them.
func (c *Store) AdminFlags() []string {
	c.t.Helper()
	return c.Flags(admin)
}

// Store returns the gRPC addresses of the cell's running nodes joined with
// commas, as a --store flag takes them.
func (c *Store) EndpointList() string { return strings.Join(c.Endpoints(), ",") }
