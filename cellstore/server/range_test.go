package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// smBackend is a Backend of one unreplicated state machine per shard, on
// an in-memory file system: the server without Raft.
type smBackend struct {
	mu    sync.Mutex
	sms   []*statemachine.StateMachine
	index []uint64
}

func newSMBackend(t *testing.T, shards int, hub *watch.Hub) *smBackend {
	b := &smBackend{index: make([]uint64, shards)}
	fs := vfs.NewMem()
	for i := range shards {
		m := statemachine.New(statemachine.Config{Dir: "/cell", Logger: zap.NewNop(), Observer: hub, FS: fs}, uint32(i))
		hub.Attach(uint32(i), m)
		if _, err := m.Open(nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		b.sms = append(b.sms, m)
	}
	return b
}

func (b *smBackend) Propose(_ context.Context, shard uint32, p *storev1.Proposal) (*storev1.Outcome, error) {
	cmd, err := statemachine.EncodeEntry(p)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index[shard]++
	out, err := b.sms[shard].Update([]sm.Entry{{Index: b.index[shard], Cmd: cmd}})
	if err != nil {
		return nil, err
	}
	outs, err := statemachine.DecodeResult(out[0].Result)
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

func (b *smBackend) Read(_ context.Context, shard uint32, q any, _ bool) (any, error) {
	return b.sms[shard].Lookup(q)
}

func (b *smBackend) Status(context.Context) (*storev1.StatusResponse, error) {
	return &storev1.StatusResponse{ShardCount: uint32(len(b.sms))}, nil
}

func newTestServer(t *testing.T, shards int, tune func(*Config)) *Server {
	t.Helper()
	hub := watch.NewHub(watch.DefaultConfig(), uint32(shards))
	cfg := DefaultConfig()
	if tune != nil {
		tune(&cfg)
	}
	s, err := New(cfg, newSMBackend(t, shards, hub), hub, uint32(shards))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Pages bounded by bytes, merged from several shards, return every key
// exactly once and in order: a shard that stopped early bounds the page.
func TestRangePagesByBytesAcrossShards(t *testing.T) {
	s := newTestServer(t, 4, func(c *Config) { c.Limits.MaxRangeBytes = 10 << 10 })
	ctx := context.Background()
	var want []string
	for i := range 120 {
		k := fmt.Sprintf("/machines/m%03d", i)
		want = append(want, k)
		size := 100 + (i%7)*1500 // some pages fill with few keys
		resp, err := s.Commit(ctx, &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{Ops: []*storev1.Op{put(k, strings.Repeat("x", size))}}}})
		if err != nil || !resp.GetGroups()[0].GetCommitted() {
			t.Fatalf("commit %s: %v %v", k, resp, err)
		}
	}
	for _, limit := range []uint32{0, 1, 7, 50} {
		var got []string
		var cont []byte
		for page := 0; ; page++ {
			if page > 200 {
				t.Fatalf("limit %d: no end after 200 pages", limit)
			}
			resp, err := s.Range(ctx, &storev1.RangeRequest{Prefix: "/machines/", Limit: limit, Continuation: cont})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetKvs()) == 0 {
				t.Fatalf("limit %d: empty page %d", limit, page)
			}
			for _, kv := range resp.GetKvs() {
				got = append(got, kv.GetKey())
			}
			if cont = resp.GetContinuation(); cont == nil {
				break
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("limit %d: pages gave %d keys, want %d in order", limit, len(got), len(want))
		}
	}
}
