package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func TestPrintStatus(t *testing.T) {
	shard := func(i uint32, leader uint64, me uint64, applied uint64) *storev1.ShardStatus {
		return &storev1.ShardStatus{Shard: i, LeaderReplicaId: leader, IsLeader: leader == me, AppliedIndex: applied}
	}
	node := func(id uint64, host, version string, shards ...*storev1.ShardStatus) *storev1.StatusResponse {
		return &storev1.StatusResponse{ReplicaId: id, GrpcAddress: host + ":7000", RaftAddress: host + ":7100", Version: version, Shards: shards}
	}
	sts := []*storev1.StatusResponse{
		node(1, "a", "v2", shard(0, 1, 1, 100), shard(1, 2, 1, 50)),
		node(2, "b", "v2", shard(0, 1, 2, 90), shard(1, 2, 2, 52)),
		node(3, "c", "", shard(0, 0, 3, 40), shard(1, 0, 3, 52)),
		nil, // d:7000, given, a member of no cell
		nil, // e:7000, member 4's published address
	}
	refused := errors.New("connection refused")
	members := []*storev1.Member{
		{NodeId: 1, RaftAddress: "a:7100", GrpcAddress: "a:7000", Version: "v2"},
		{NodeId: 2, RaftAddress: "b:7100", GrpcAddress: "b:7000", Version: "v2"},
		{NodeId: 3, RaftAddress: "c:7100", GrpcAddress: "c:7000"},
		{NodeId: 4, RaftAddress: "e:7100", GrpcAddress: "e:7000", Version: "v1"},
		{NodeId: 5, RaftAddress: "f:7100", Leads: []uint32{2, 3}}, // published nothing
	}
	eps := []string{"a:7000", "b:7000", "c:7000", "d:7000", "e:7000"}
	var out bytes.Buffer
	err := printStatus(&out, eps, sts, []error{nil, nil, nil, refused, refused}, members)
	if err == nil || !strings.Contains(err.Error(), "4 of 6 nodes unhealthy") {
		t.Errorf("error %v", err)
	}
	want := []string{
		"NODE ENDPOINT GRPC RAFT HEALTH LEADS APPLIED LAG VERSION",
		"1 a:7000 a:7000 a:7100 ok 0 150 2 v2",
		"2 b:7000 b:7000 b:7100 ok 1 142 10 v2",
		"3 c:7000 c:7000 c:7100 no leader for shards 0-1 - 92 60 -",
		"- d:7000 - - unreachable: connection refused - - -",
		"4 e:7000 e:7000 e:7100 unreachable: connection refused - - - v1",
		"5 - - f:7100 gRPC address unknown (not published yet; add its address to --endpoint) 2-3 - - -",
		"",
		"CLI: troupe " + version + " (commit " + commit + ")",
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, l := range lines {
		if got := strings.Join(strings.Fields(l), " "); i >= len(want) || got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[min(i, len(want)-1)])
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
}

// The members that did not answer at the endpoints given are asked at the
// addresses they published, each once.
func TestUnasked(t *testing.T) {
	members := []*storev1.Member{
		{NodeId: 1, GrpcAddress: "a:7000"}, // answered at another address
		{NodeId: 2, GrpcAddress: "b:7000"}, // asked there, did not answer
		{NodeId: 3, GrpcAddress: "c:7000"},
		{NodeId: 4}, // published nothing
		{NodeId: 5, GrpcAddress: "e:7000"},
	}
	got := unasked(members, []string{"127.0.0.1:7001", "b:7000"}, []*storev1.StatusResponse{{ReplicaId: 1}, nil})
	if fmt.Sprint(got) != "[c:7000 e:7000]" {
		t.Errorf("unasked %v, want [c:7000 e:7000]", got)
	}
}

// `troupe status` given one node of a three-node cell shows all three:
// each asked at the gRPC address it published, with its addresses, health
// and version. With a node stopped, that node shows unreachable (still
// with the addresses and version it published) and status exits 1,
// unless asked about the endpoint alone (--members=false).
func TestStatusShowsEveryMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell, err := localstore.Start(ctx, localstore.Config{Dir: t.TempDir(), Replicas: 3, Shards: 2,
		Tune: func(nc *node.Config) { nc.Version = version }})
	if err != nil {
		t.Fatal(err)
	}
	defer cell.Close()
	// A viewer may ask for status and members, and write nothing.
	f, err := cell.CredentialFiles(pki.Identity{Role: pki.RoleViewer, Name: "status-test"})
	if err != nil {
		t.Fatal(err)
	}
	eps := cell.Endpoints()
	raft := make([]string, len(eps))
	for i := range eps {
		raft[i] = cell.Node(i).RaftAddr()
	}
	status := func(extra ...string) (string, int) {
		args := append([]string{"status", "--endpoint", eps[0], "--ca", f.CA, "--cert", f.Cert, "--key", f.Key, "--timeout", "2s"}, extra...)
		stdout, stderr, code := cli{}.run(ctx, args...)
		return stdout + stderr, code
	}
	// row returns node id's line, as its fields.
	row := func(out string, id int) []string {
		for _, l := range strings.Split(out, "\n") {
			if fs := strings.Fields(l); len(fs) > 0 && fs[0] == fmt.Sprint(id) {
				return fs
			}
		}
		return nil
	}
	// localstore.Start returns once every node has published its record.
	out, code := status()
	if code != 0 {
		t.Fatalf("status of a healthy cell: exit status %d\n%s", code, out)
	}
	for i := range eps {
		r := row(out, i+1)
		// NODE ENDPOINT GRPC RAFT HEALTH LEADS APPLIED LAG VERSION
		if len(r) != 9 || r[1] != eps[i] || r[2] != eps[i] || r[3] != raft[i] || r[4] != "ok" || r[8] != version {
			t.Errorf("node %d: %q, want %s %s %s ok ... %s\n%s", i+1, r, eps[i], eps[i], raft[i], version, out)
		}
	}
	if t.Failed() {
		return
	}

	cell.StopNode(2)
	// The first answering node lists the members once every shard that
	// node 3 led has a leader again.
	wait.Until(ctx, t, "status to show node 3 unreachable", func() error {
		out, code = status()
		r := row(out, 3)
		if code != 1 || len(r) < 6 || r[1] != eps[2] || r[2] != eps[2] || r[3] != raft[2] || r[4] != "unreachable:" ||
			r[len(r)-1] != version || !strings.Contains(out, "1 of 3 nodes unhealthy") {
			return fmt.Errorf("exit status %d, node 3 %q:\n%s", code, r, out)
		}
		return nil
	})
	for i := range 2 {
		if r := row(out, i+1); len(r) != 9 || r[1] != eps[i] || r[4] != "ok" {
			t.Errorf("node %d: %q\n%s", i+1, r, out)
		}
	}
	// --members=false asks the endpoint alone, as a node's own health
	// check does: another node's outage does not fail it.
	out, code = status("--members=false")
	if r := row(out, 1); code != 0 || len(r) != 9 || r[4] != "ok" || row(out, 2) != nil || row(out, 3) != nil {
		t.Errorf("status --members=false: exit status %d\n%s", code, out)
	}
}
