package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// readyPoll is how often a starting Troupe cell is asked whether it is
// ready.
const readyPoll = 50 * time.Millisecond

// Security is how a local Troupe cell is secured, so that benchmarks
// can show what TLS and authorization cost.
type Security string

// The securities of a local cell.
const (
	// Secure is the default: TLS 1.3 with client certificates and the
	// built-in authorization rules (the benchmark's client is an admin).
	Secure Security = "tls"
	// Unauthorized is TLS with rules that allow everything
	// (authz.AllowAll): a secure cell's cost without authorization.
	Unauthorized Security = "tls-noauthz"
	// Insecure is plaintext without authorization (--insecure).
	Insecure Security = "insecure"
)

// Securities lists them.
var Securities = []Security{Secure, Unauthorized, Insecure}

// StartLocalTroupe starts a Troupe cell of replicas replicas and shards
// shards in this process, under dir, secured as sec says, and connects to
// it. close stops both.
func StartLocalTroupe(ctx context.Context, dir string, replicas, shards int, sec Security, logger *zap.Logger) (sys *Troupe, close func() error, err error) {
	cfg := localstore.Config{Dir: dir, Replicas: replicas, Shards: shards, Logger: logger, Insecure: sec == Insecure}
	switch sec {
	case Secure, Insecure:
	case Unauthorized:
		cfg.Tune = func(nc *node.Config) { nc.Rules = authz.AllowAll() }
	default:
		return nil, nil, fmt.Errorf("bench: security %q is not one of %v", sec, Securities)
	}
	cell, err := localstore.Start(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("start troupe cell: %w", err)
	}
	creds, err := cell.Admin()
	if err != nil {
		return nil, nil, errors.Join(err, cell.Close())
	}
	t, err := ConnectTroupe(ctx, cell.Endpoints(), creds)
	if err != nil {
		return nil, nil, errors.Join(err, cell.Close())
	}
	return t, func() error { return errors.Join(t.Close(), cell.Close()) }, nil
}

// ConnectTroupe connects to the cell at endpoints, presenting creds (nil:
// plaintext), and waits until it serves.
func ConnectTroupe(ctx context.Context, endpoints []string, creds *pki.Source) (*Troupe, error) {
	cfg := DefaultTroupeConfig(endpoints)
	cfg.TLS = creds
	t, err := DialTroupe(cfg)
	if err != nil {
		return nil, err
	}
	if err := t.WaitReady(ctx, readyPoll); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}
