package server

import (
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-cluster/troupe/cellstore/engine"
	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

func put(k, v string) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Put{Put: &storev1.Put{Key: k, Value: []byte(v)}}}
}

func add(k string, d, lo, hi int64) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Add{Add: &storev1.Add{Key: k, Delta: d, Min: lo, Max: hi}}}
}

func del(k string) *storev1.Op {
	return &storev1.Op{Op: &storev1.Op_Delete{Delete: &storev1.Delete{Key: k}}}
}

// FuzzCommitRequest feeds arbitrary bytes through what the server does with
// a commit before Raft (decode, validate, route, split per shard) and then
// through the engine: nothing may panic, the engine must never fail on a
// validated request, and every group gets exactly one result.
func FuzzCommitRequest(f *testing.F) {
	seeds := []*storev1.CommitRequest{
		{TxnId: "a", Groups: []*storev1.Group{{Ops: []*storev1.Op{put("/machines/m1", "x")}}}},
		{TxnId: "b", Atomic: true, Groups: []*storev1.Group{
			{Conditions: []*storev1.Condition{{Key: "/tasks/ns/j/0", Version: 0}}, Ops: []*storev1.Op{put("/tasks/ns/j/0", "t")}},
			{Ops: []*storev1.Op{put("/jobs/ns/j", "j"), del("/tasks/ns/j/1")}},
		}},
		{TxnId: "c", Groups: []*storev1.Group{
			{Ops: []*storev1.Op{add("/alloc/m1/cpu", 500, 0, 4000), put("/bindings/m1/t", "b")}},
			{Ops: []*storev1.Op{add("/alloc/m2/cpu", -1, 0, 10)}},
			{Conditions: []*storev1.Condition{{Key: "/machines/m1", Version: 3}}},
		}},
		{TxnId: "d", Groups: []*storev1.Group{{Ops: []*storev1.Op{add("/x", 1, 5, 1)}}}},
		{TxnId: "e", Groups: []*storev1.Group{{Ops: []*storev1.Op{{}}}}},
		{Groups: []*storev1.Group{{}}},
		{TxnId: "f\xff", Groups: []*storev1.Group{{Ops: []*storev1.Op{put("/x", "v")}}}},
		{TxnId: "g", Groups: []*storev1.Group{{Ops: []*storev1.Op{put("/x\xff", "v")}}}},
	}
	for _, s := range seeds {
		b, err := s.MarshalVT() // proto.Marshal refuses strings that are not UTF-8
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff, 0xff})
	s := &Server{cfg: DefaultConfig(), router: keyspace.NewRouter(4)}
	s.cfg.Limits.MaxValueBytes = 64
	s.cfg.Limits.MaxKeyBytes = 32
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &storev1.CommitRequest{}
		if req.UnmarshalVT(data) != nil { // as the server's codec does (proto/codec)
			return
		}
		failures, err := s.cfg.Limits.ValidateCommit(req)
		if err != nil {
			return
		}
		if !utf8.ValidString(req.GetTxnId()) {
			t.Fatalf("txn_id %q is not UTF-8", req.GetTxnId())
		}
		if len(failures) != len(req.GetGroups()) {
			t.Fatalf("%d failures for %d groups", len(failures), len(req.GetGroups()))
		}
		shardsOf := s.route(req)
		shardOf := make([]uint32, len(shardsOf))
		for i, shards := range shardsOf {
			if len(shards) > 0 {
				shardOf[i] = shards[0]
			}
		}
		cross := crossShardGroups(req, shardsOf, failures)
		seen := make([]bool, len(req.GetGroups()))
		props := s.proposals(req, shardOf, func(gi int) bool { return failures[gi] == nil && !slices.Contains(cross, gi) }, requestHash(req), time.Unix(1, 0))
		if len(cross) > 0 {
			x := s.newCrossShard(req, cross, requestHash(req), time.Unix(1, 0))
			for _, sh := range x.participants {
				props = append(props, shardProposal{shard: sh, p: x.parts[sh]})
			}
		}
		for _, sp := range props {
			for _, g := range sp.p.GetGroups() {
				for _, k := range groupKeys(g) {
					if !utf8.ValidString(k) {
						t.Fatalf("key %q is not UTF-8", k)
					}
					if s.router.Shard(k) != sp.shard {
						t.Fatalf("key %q routed to shard %d, belongs to %d", k, sp.shard, s.router.Shard(k))
					}
				}
			}
			res, err := engine.Apply(engine.NewMemStorage(), sp.p)
			if err != nil {
				t.Fatalf("engine failed on a validated request: %v", err)
			}
			if len(res.Outcome.GetGroups()) != len(sp.p.GetGroups()) {
				t.Fatalf("%d results for %d groups", len(res.Outcome.GetGroups()), len(sp.p.GetGroups()))
			}
			for _, gi := range sp.p.GetGroupIndexes() {
				if (seen[gi] && !slices.Contains(cross, int(gi))) || failures[gi] != nil {
					t.Fatalf("group %d proposed twice or despite failing validation", gi)
				}
				seen[gi] = true
			}
		}
		for gi, ok := range seen {
			if !ok && failures[gi] == nil {
				t.Fatalf("group %d neither proposed nor failed", gi)
			}
		}
	})
}
