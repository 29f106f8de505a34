package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// dialTimeout bounds client connection set-up.
const dialTimeout = 5 * time.Second

// etcdCluster is an embedded etcd cluster of loopback members in this
// process.
type etcdCluster struct {
	members   []*embed.Etcd
	endpoints []string // client URLs, one per member
	// closing silences the members' logs: etcd reports its own listeners'
	// shutdown as errors.
	closing *atomic.Bool
}

// startEtcdCluster starts n members, each with its own data directory
// under dir and free loopback ports for peers and clients, and waits until
// every member is ready to serve (a leader is elected and the member has
// published itself) or ctx ends.
func startEtcdCluster(ctx context.Context, dir string, n int) (*etcdCluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	peerURL := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])} }
	clientURL := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])} }
	var initial []string
	for i := range n {
		u := peerURL(i)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, u.String()))
	}

	c := &etcdCluster{closing: new(atomic.Bool)}
	logger := zap.New(closingCore{
		Core: zapcore.NewCore(
			zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
			zapcore.Lock(os.Stderr), zapcore.ErrorLevel),
		closing: c.closing,
	})
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			c.Close()
			return nil, err
		}
		cfg.ListenPeerUrls = []url.URL{peerURL(i)}
		cfg.AdvertisePeerUrls = []url.URL{peerURL(i)}
		cfg.ListenClientUrls = []url.URL{clientURL(i)}
		cfg.AdvertiseClientUrls = []url.URL{clientURL(i)}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "benchcompare"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.Logger = "zap"
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{"stderr"}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, err)
		}
		c.members = append(c.members, e)
		u := clientURL(i)
		c.endpoints = append(c.endpoints, u.String())
	}
	for _, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			c.Close()
			return nil, fmt.Errorf("etcd member %s: %w", e.Config().Name, err)
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("etcd member %s not ready: %w", e.Config().Name, ctx.Err())
		}
	}
	return c, nil
}

// Close stops every member.
func (c *etcdCluster) Close() {
	c.closing.Store(true)
	for _, e := range c.members {
		e.Close()
	}
}

// freePorts returns n distinct free loopback TCP ports. The listeners are
// held until all ports are found so that none comes twice; another process
// could still take one before etcd binds it, which on a test machine is
// unlikely enough.
func freePorts(n int) ([]int, error) {
	var (
		ports []int
		lns   []net.Listener
	)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("find a free port"), err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// closingCore is a zap core that drops every entry once closing is set.
type closingCore struct {
	zapcore.Core
	closing *atomic.Bool
}

func (c closingCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.closing.Load() {
		return ce
	}
	return c.Core.Check(e, ce)
}

func (c closingCore) With(fields []zapcore.Field) zapcore.Core {
	return closingCore{Core: c.Core.With(fields), closing: c.closing}
}
