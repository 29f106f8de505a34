package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/watch"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// newMemBackend returns a MemBackend of shards shards feeding hub, closed
// when the test ends.
func newMemBackend(t *testing.T, shards uint32, hub *watch.Hub) *MemBackend {
	t.Helper()
	b, err := NewMemBackend(shards, hub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newTestServer(t *testing.T, shards int, tune func(*Config)) *Server {
	t.Helper()
	hub := watch.NewHub(watch.DefaultConfig(), uint32(shards))
	cfg := DefaultConfig()
	if tune != nil {
		tune(&cfg)
	}
	s, err := New(cfg, newMemBackend(t, uint32(shards), hub), hub, uint32(shards))
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
