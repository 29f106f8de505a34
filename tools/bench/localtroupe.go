package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// LocalCell describes a Troupe cell started in this process: Replicas
// store nodes (each a replica of every shard, its own Dragonboat node
// host, Raft between them over loopback TCP) of Shards shards.
type LocalCell struct {
	Replicas, Shards int
	Security         Security
	// Network, if set, delays the cell's links and places its leaders.
	Network Network
	// LogStore is the nodes' Raft log store (node.Config.LogStore; empty:
	// the default).
	LogStore string
	Logger   *zap.Logger
}

// StartLocalTroupe starts a Troupe cell of replicas replicas and shards
// shards in this process, under dir, secured as sec says, and connects to
// it. close stops both.
func StartLocalTroupe(ctx context.Context, dir string, replicas, shards int, sec Security, logger *zap.Logger) (sys *Troupe, close func() error, err error) {
	return LocalCell{Replicas: replicas, Shards: shards, Security: sec, Logger: logger}.Start(ctx, dir)
}

// Start starts the cell under dir and connects to it. close stops both.
func (lc LocalCell) Start(ctx context.Context, dir string) (sys *Troupe, close func() error, err error) {
	if err := lc.Network.Check(lc.Replicas); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	cfg := localstore.Config{Dir: dir, Replicas: lc.Replicas, Shards: lc.Shards, Logger: lc.Logger, Insecure: lc.Security == Insecure}
	var tunes []func(*node.Config)
	switch lc.Security {
	case Secure, Insecure:
	case Unauthorized:
		tunes = append(tunes, func(nc *node.Config) { nc.Rules = authz.AllowAll() })
	default:
		return nil, nil, fmt.Errorf("bench: security %q is not one of %v", lc.Security, Securities)
	}
	if lc.LogStore != "" {
		tunes = append(tunes, func(nc *node.Config) { nc.LogStore = lc.LogStore })
	}
	links := &delayedLinks{}
	if lc.Network.RaftDelay > 0 {
		tunes = append(tunes, links.raftTune(lc.Network.RaftDelay))
	}
	if lc.Network.LeaderPreference > 0 {
		tunes = append(tunes, preferTune(lc.Network.LeaderPreference))
	}
	if len(tunes) > 0 {
		cfg.Tune = func(nc *node.Config) {
			for _, t := range tunes {
				t(nc)
			}
		}
	}
	cell, err := localstore.Start(ctx, cfg)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("start troupe cell: %w", err), links.close())
	}
	stop := func() error { return errors.Join(cell.Close(), links.close()) }
	if err := links.failed(); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	creds, err := cell.Admin()
	if err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	if lc.Network.LeaderPreference > 0 {
		if err := waitLedBy(ctx, cell, lc.Shards, lc.Network.LeaderPreference); err != nil {
			return nil, nil, errors.Join(err, stop())
		}
	}
	endpoints := cell.Endpoints()
	if lc.Network.ClientDelay > 0 {
		if endpoints, err = links.front(endpoints, lc.Network.ClientDelay); err != nil {
			return nil, nil, errors.Join(err, stop())
		}
	}
	t, err := ConnectTroupe(ctx, endpoints, creds)
	if err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	t.storage = cellStorage(cell, lc.Shards)
	if lc.Network != (Network{}) {
		fmt.Fprintf(os.Stderr, "troupe: %d nodes, %s; %s\n", lc.Replicas, lc.Network, describeLeaders(cell))
	}
	return t, func() error { return errors.Join(t.Close(), stop()) }, nil
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
