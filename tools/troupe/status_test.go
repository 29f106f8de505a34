package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func TestPrintStatus(t *testing.T) {
	shard := func(i uint32, leader uint64, me uint64, applied uint64) *storev1.ShardStatus {
		return &storev1.ShardStatus{Shard: i, LeaderReplicaId: leader, IsLeader: leader == me, AppliedIndex: applied}
	}
	node := func(id uint64, host string, shards ...*storev1.ShardStatus) *storev1.StatusResponse {
		return &storev1.StatusResponse{ReplicaId: id, GrpcAddress: host + ":7000", RaftAddress: host + ":7100", Shards: shards}
	}
	sts := []*storev1.StatusResponse{
		node(1, "a", shard(0, 1, 1, 100), shard(1, 2, 1, 50)),
		node(2, "b", shard(0, 1, 2, 90), shard(1, 2, 2, 52)),
		node(3, "c", shard(0, 0, 3, 40), shard(1, 0, 3, 52)),
		nil,
	}
	members := []*storev1.Member{{NodeId: 1, RaftAddress: "a:7100"}, {NodeId: 2, RaftAddress: "b:7100"},
		{NodeId: 3, RaftAddress: "c:7100"}, {NodeId: 5, RaftAddress: "e:7100", Leads: []uint32{2, 3}}}
	eps := []string{"a:7000", "b:7000", "c:7000", "d:7000"}
	var out bytes.Buffer
	err := printStatus(&out, eps, sts, []error{nil, nil, nil, errors.New("connection refused")}, members)
	if err == nil || !strings.Contains(err.Error(), "2 of 4 nodes unhealthy") {
		t.Errorf("error %v", err)
	}
	want := []string{
		"NODE ENDPOINT GRPC RAFT HEALTH LEADS APPLIED LAG",
		"1 a:7000 a:7000 a:7100 ok 0 150 2",
		"2 b:7000 b:7000 b:7100 ok 1 142 10",
		"3 c:7000 c:7000 c:7100 no leader for shards 0-1 - 92 60",
		"- d:7000 - - unreachable: connection refused - - -",
		"5 - - e:7100 not asked (a member; add its address to --endpoint) 2-3 - -",
		"",
		"CLI: troupe " + version + " (commit " + commit + ")",
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, l := range lines {
		if got := strings.Join(strings.Fields(l), " "); i >= len(want) || got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[min(i, len(want)-1)])
		}
	}
}
