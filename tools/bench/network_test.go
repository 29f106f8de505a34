package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// A cell with delayed links replicates through them: every commit waits
// at least for a follower's acknowledgement over a delayed link and back
// (2 × RaftDelay) and for the client's request and answer (2 ×
// ClientDelay). Lower bounds only: the machine may add any amount. With
// LeaderPreference 1, node 1 leads every shard.
func TestLocalCellNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-replica cell")
	}
	const raft, client = 15 * time.Millisecond, 5 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc := LocalCell{Replicas: 3, Shards: 2, Security: Insecure,
		Network: Network{RaftDelay: raft, ClientDelay: client, LeaderPreference: 1}}
	sys, stop, err := lc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	for i, ep := range sys.endpoints {
		if !strings.HasPrefix(ep, "127.0.0.1:") {
			t.Errorf("endpoint %d is %q, want a client link on loopback", i, ep)
		}
	}
	st, err := storev1.NewStoreClient(sys.conns[0]).Status(ctx, &storev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range st.GetShards() {
		if sh.GetLeaderReplicaId() != 1 {
			t.Errorf("shard %d is led by node %d, want node 1", sh.GetShard(), sh.GetLeaderReplicaId())
		}
	}
	s, err := sys.NewSession(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		start := time.Now()
		if _, err := s.Put(ctx, fmt.Sprintf("/net/k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if took, least := time.Since(start), 2*raft+2*client; took < least {
			t.Errorf("put %d took %v, want at least %v (a Raft round trip and a client one)", i, took, least)
		}
	}

	if err := (Network{RaftDelay: time.Millisecond}).Check(1); err == nil {
		t.Error("a Raft delay on a one-node cell passes Check")
	}
	if err := (Network{ClientDelay: -time.Millisecond}).Check(3); err == nil {
		t.Error("a negative delay passes Check")
	}
}

// BenchmarkCommitHops measures what one round of consensus costs under a
// one-way Raft link delay, by where the commit is driven: on a cell of
// 3 nodes and 2 shards with node 1 leading both, a single-shard put sent
// to node 1 (the leader: a follower's acknowledgement, 2 one-way hops)
// or to node 2 (a follower: it forwards the proposal and learns of the
// commit from the leader, 4 hops), and a put of two keys on the two
// shards, a cross-shard transaction of two rounds (PREPARE, RESOLVE),
// driven by node 1 (2 rounds of 2 hops) or node 2 (2 rounds of 4). It
// reports each commit's p50 and p99 in ms and the p50 over the delay
// (the one-way hops on the path, plus the machine's own time over d).
//
//	go test ./tools/bench -run '^$' -bench CommitHops -benchtime 200x
func BenchmarkCommitHops(b *testing.B) {
	for _, delay := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			lc := LocalCell{Replicas: 3, Shards: 2, Security: Insecure, Network: Network{RaftDelay: delay, LeaderPreference: 1}}
			sys, stop, err := lc.Start(ctx, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			router := keyspace.NewRouter(2)
			var onShard [2]string
			for i := 0; onShard[0] == "" || onShard[1] == ""; i++ {
				k := fmt.Sprintf("/hops/k%d", i)
				if sh := router.Shard(k); onShard[sh] == "" {
					onShard[sh] = k
				}
			}
			seq := 0 // of txn ids
			for _, c := range []struct {
				name string
				node int // 0-based
				keys []string
			}{
				{"put-via-leader", 0, onShard[:1]},
				{"put-via-follower", 1, onShard[:1]},
				{"cross-shard-via-leader", 0, onShard[:]},
				{"cross-shard-via-follower", 1, onShard[:]},
			} {
				b.Run(c.name, func(b *testing.B) {
					client := storev1.NewStoreClient(sys.conns[c.node])
					var took []time.Duration
					for b.Loop() {
						seq++
						g := &storev1.Group{}
						for _, k := range c.keys {
							g.Ops = append(g.Ops, put(k, []byte("v")))
						}
						req := &storev1.CommitRequest{TxnId: fmt.Sprintf("hops-%d", seq), Groups: []*storev1.Group{g}}
						start := time.Now()
						resp, err := client.Commit(ctx, req)
						took = append(took, time.Since(start))
						if err != nil {
							b.Fatal(err)
						}
						if !resp.GetGroups()[0].GetCommitted() {
							b.Fatalf("not committed: %v", resp.GetGroups()[0].GetFailure())
						}
					}
					slices.Sort(took)
					p50, p99 := took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
					b.ReportMetric(float64(p50)/1e6, "p50-ms")
					b.ReportMetric(float64(p99)/1e6, "p99-ms")
					b.ReportMetric(float64(p50)/float64(delay), "p50/delay")
				})
			}
		})
	}
}
