package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// dialTimeout bounds client connection set-up.
const dialTimeout = 5 * time.Second

// etcdCluster is an embedded etcd cluster of loopback members in this
// process.
type etcdCluster struct {
	members   []*embed.Etcd
	endpoints []string // client URLs, one per member
	// clientTLS is what a client presents and trusts (nil: plaintext).
	clientTLS *tls.Config
	// closing silences the members' logs: etcd reports its own listeners'
	// shutdown as errors.
	closing *atomic.Bool
}

// startEtcdCluster starts n members, each with its own data directory
// under dir and free loopback ports for peers and clients, and waits until
// every member is ready to serve (a leader is elected and the member has
// published itself) or ctx ends. If secure, peers and clients speak TLS
// 1.3 with client certificates (etcdPKI), as Troupe's secure cell does.
//
// Each member's client port serves gRPC only, its HTTP endpoints on a
// port of their own (--listen-client-http-urls), as etcd recommends for
// production (it warns "Running http and grpc server on single port"):
// on a shared TLS port etcd serves gRPC through net/http's HTTP/2 server
// (grpc.Server.ServeHTTP, etcd-io/etcd#15402), which cost the secure
// cluster 15-17% of its throughput on cas and place on the 2-core
// development machine.
func startEtcdCluster(ctx context.Context, dir string, n int, secure bool) (*etcdCluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{closing: new(atomic.Bool)}
	scheme := "http"
	var certs *etcdPKI
	if secure {
		scheme = "https"
		if certs, err = newEtcdPKI(filepath.Join(dir, "pki"), n, time.Now()); err != nil {
			return nil, err
		}
		if c.clientTLS, err = certs.tlsInfo(etcdClientCert).ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	peerURL := func(i int) url.URL { return url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i])} }
	clientURL := func(i int) url.URL { return url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])} }
	httpURL := func(i int) url.URL { return url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])} }
	var initial []string
	for i := range n {
		u := peerURL(i)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, u.String()))
	}

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
		cfg.ListenClientHttpUrls = []url.URL{httpURL(i)}
		cfg.AdvertiseClientUrls = []url.URL{clientURL(i)}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "benchcompare"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.Logger = "zap"
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{"stderr"}
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
		if certs != nil {
			info := certs.tlsInfo(cfg.Name)
			info.ClientCertAuth = true
			cfg.ClientTLSInfo = info
			cfg.PeerTLSInfo = info
			cfg.TlsMinVersion = "TLS1.3"
		}
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

// etcdClientCert names the certificate of the benchmark's clients in an
// etcdPKI; the members' are named as the members (m0, m1, ...).
const etcdClientCert = "client"

// etcdPKI is a secure etcd cluster's certificates, made with Troupe's own
// cellstore/pki so that both systems present the same kind (ECDSA P-256,
// TLS 1.3): a CA, one certificate per member that serves and connects to
// its peers (etcd checks that it names the host the member listens on,
// 127.0.0.1, and that a peer's names the address it connects from, also
// 127.0.0.1), and one client certificate. etcd ignores the certificates'
// Troupe identities (URI SANs).
type etcdPKI struct {
	dir string
}

// etcdPKIValidity is the lifetime of a benchmark's certificates.
const etcdPKIValidity = 24 * time.Hour

// newEtcdPKI writes a new CA and the certificates of n members and of the
// client into dir.
func newEtcdPKI(dir string, n int, now time.Time) (*etcdPKI, error) {
	ca, err := pki.NewCA("benchcompare-etcd", etcdPKIValidity, now)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := pki.WriteCA(dir, ca); err != nil {
		return nil, err
	}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		leaf := pki.Leaf{Identity: pki.Identity{Role: pki.RoleStore, Name: "etcd-" + name}, Hosts: []string{"127.0.0.1", "localhost"}, Validity: etcdPKIValidity / 2}
		if err := ca.IssueTo(dir, name, leaf, now); err != nil {
			return nil, err
		}
	}
	client := pki.Leaf{Identity: pki.Identity{Role: pki.RoleAdmin, Name: "benchcompare"}, Validity: etcdPKIValidity / 2}
	if err := ca.IssueTo(dir, etcdClientCert, client, now); err != nil {
		return nil, err
	}
	return &etcdPKI{dir: dir}, nil
}

// tlsInfo is etcd's description of certificate name's files, TLS 1.3 only.
func (p *etcdPKI) tlsInfo(name string) transport.TLSInfo {
	f := pki.DirFiles(p.dir, name)
	return transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA, MinVersion: tls.VersionTLS13}
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
