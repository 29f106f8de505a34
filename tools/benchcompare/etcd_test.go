package main

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// TestEtcdSession runs bench.CheckSystem and a short run of every
// workload against a real 3-member embedded cluster.
func TestEtcdSession(t *testing.T) {
	ctx, sys := startTestEtcd(t)
	if err := bench.CheckSystem(ctx, sys, "/check"); err != nil {
		t.Fatal(err)
	}
	e := sys.(*etcdSystem)
	got, err := e.clients[0].Get(ctx, "/check/alloc/m1/cpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "2" {
		t.Errorf("counter after two placements: %v, want \"2\"", got.Kvs)
	}

	p := bench.Params{Clients: 8, Keys: 20, ValueSize: 16, Machines: 4, Seed: 1}
	ws, err := bench.ParseWorkloads(bench.DefaultWorkloads, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		res, err := bench.Run(ctx, sys, w, bench.Config{MaxOps: 5})
		if err != nil {
			t.Fatalf("%s: %v", w.Name(), err)
		}
		if want := int64(w.Clients() * 5); res.Ops != want {
			t.Errorf("%s: %d ops, want %d", w.Name(), res.Ops, want)
		}
	}
}

// TestEtcdTLS starts a secure 3-member cluster (peer and client TLS 1.3,
// client certificates), runs bench.CheckSystem through clients with the
// client certificate, and checks that a client without one, or without
// TLS, gets nothing done.
func TestEtcdTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cluster, err := startEtcdCluster(ctx, dir, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	for _, ep := range cluster.endpoints {
		if !strings.HasPrefix(ep, "https://127.0.0.1:") {
			t.Errorf("endpoint %s: want https://127.0.0.1:port", ep)
		}
	}
	for _, m := range cluster.members {
		if cfg := m.Config(); !cfg.PeerTLSInfo.ClientCertAuth || !cfg.ClientTLSInfo.ClientCertAuth || cfg.ListenPeerUrls[0].Scheme != "https" {
			t.Errorf("member %s: peer %v client %v, peer URL %s: want client certificates on both over https",
				cfg.Name, cfg.PeerTLSInfo, cfg.ClientTLSInfo, &cfg.ListenPeerUrls[0])
		}
		if cfg := m.Config(); len(cfg.ListenClientHttpUrls) != 1 {
			t.Errorf("member %s: HTTP at %v, want its own URL so that the client port serves gRPC only", cfg.Name, cfg.ListenClientHttpUrls)
		}
	}
	sys, err := dialEtcd(cluster.endpoints, cluster.clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := bench.CheckSystem(ctx, sys, "/check"); err != nil {
		t.Fatal(err)
	}

	// Without a client certificate the handshake fails (in TLS 1.3 the
	// client learns it on its first read).
	host := strings.TrimPrefix(cluster.endpoints[0], "https://")
	noCert := cluster.clientTLS.Clone()
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	conn, err := tls.Dial("tcp", host, noCert)
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("TLS without a client certificate: %v, want certificate required", err)
	}
	// Without TLS nothing gets done.
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + host}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if _, err := c.Put(pctx, "/check/plaintext", "x"); err == nil {
		t.Error("plaintext Put succeeded")
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("DURATION", "2")
	o, err := parseFlags([]string{"-workloads=cas"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Duration != 2*time.Second || o.Workloads != "cas" || o.Replicas != 3 || o.Shards != 1 {
		t.Errorf("parseFlags: %+v", o)
	}
	t.Setenv("DURATION", "1500ms")
	if o, err := parseFlags(nil); err != nil || o.Duration != 1500*time.Millisecond {
		t.Errorf("DURATION=1500ms: %v, %v", o.Duration, err)
	}
	if _, err := parseFlags([]string{"-duration=0s"}); err == nil {
		t.Error("-duration=0s accepted")
	}
	if o, err := parseFlags([]string{"-repeat=4"}); err != nil || o.repeat != 4 {
		t.Errorf("-repeat=4: %v, %v", o.repeat, err)
	}
	if _, err := parseFlags([]string{"-repeat=0"}); err == nil {
		t.Error("-repeat=0 accepted")
	}
}

func TestRunOrderAlternates(t *testing.T) {
	order := []string{"troupe", "troupe-noauthz", "etcd"}
	for i, want := range [][]string{order, {"etcd", "troupe-noauthz", "troupe"}, order, {"etcd", "troupe-noauthz", "troupe"}} {
		if got := runOrder(order, i); !slices.Equal(got, want) {
			t.Errorf("run %d: %v, want %v", i, got, want)
		}
	}
	if order[0] != "troupe" {
		t.Errorf("runOrder changed -systems' order: %v", order)
	}
	args := []string{"-workloads=cas", "-repeat", "4", "-systems=troupe,etcd"}
	child := childArgs(args, []string{"etcd", "troupe"})
	o, err := parseFlags(child)
	if err != nil || o.repeat != 1 || o.systems != "etcd,troupe" || o.Workloads != "cas" {
		t.Errorf("a run of -repeat parses as repeat %d, systems %q, workloads %q (%v)", o.repeat, o.systems, o.Workloads, err)
	}
	if len(args) != 4 {
		t.Errorf("childArgs changed its arguments: %v", args)
	}
	if _, err := parseFlags([]string{"-repeat=2", "-cpuprofile=/tmp/x"}); err == nil {
		t.Error("-repeat with -cpuprofile accepted")
	}
}

// startTestEtcd starts a real 3-member embedded cluster for test t (it is
// skipped with -short) and stops it when t ends; ctx ends after a minute.
func startTestEtcd(t *testing.T) (context.Context, bench.System) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	sys, closeSys, err := startEtcd(ctx, t.TempDir(), 3, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeSys(); err != nil {
			t.Error(err)
		}
	})
	return ctx, sys
}
