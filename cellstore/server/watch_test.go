package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/troupe-cluster/troupe/cellstore/keyspace"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// watchStream is a Store_WatchServer that hands responses to a channel.
type watchStream struct {
	grpc.ServerStream
	ctx context.Context
	out chan *storev1.WatchResponse
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(r *storev1.WatchResponse) error {
	select {
	case w.out <- r:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// A watcher that replays large values gets them in responses of bounded
// size, each ending on a whole revision, in order and without gaps.
func TestWatchResponsesAreBounded(t *testing.T) {
	s := newTestServer(t, 1, func(c *Config) { c.ProgressInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, size = 40, 200 << 10
	for i := range n {
		k := fmt.Sprintf("/runs/m1/t%02d", i)
		if _, err := s.Commit(ctx, &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{Ops: []*storev1.Op{put(k, strings.Repeat("v", size))}}}}); err != nil {
			t.Fatal(err)
		}
	}
	stream := &watchStream{ctx: ctx, out: make(chan *storev1.WatchResponse)}
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(&storev1.WatchRequest{Prefix: "/runs/m1/", Cursor: keyspace.Cursor{0}.Encode()}, stream)
	}()
	next := uint64(1)
	for next <= n {
		select {
		case r := <-stream.out:
			bytes := 0
			for _, ev := range r.GetEvents() {
				if ev.GetKv().GetVersion() != next {
					t.Fatalf("event at revision %d, want %d", ev.GetKv().GetVersion(), next)
				}
				next++
				bytes += len(ev.GetKv().GetValue())
			}
			if bytes > maxBatchBytes+size {
				t.Fatalf("response of %d bytes", bytes)
			}
			c, err := keyspace.DecodeCursor(r.GetCursor(), 1)
			if err != nil || c[0] != next-1 {
				t.Fatalf("cursor %v (%v) after revision %d", c, err, next-1)
			}
		case err := <-done:
			t.Fatalf("watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("timed out at revision %d", next)
		}
	}
	cancel()
	<-done
}

// A watch of a prefix on one shard (read by the stream's goroutine
// itself) whose shard is busy with changes outside the prefix still moves
// its client's cursor with progress responses, to the shard's revision.
func TestWatchOneShardProgressPastOtherChanges(t *testing.T) {
	s := newTestServer(t, 1, func(c *Config) { c.ProgressInterval = time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 2*maxRevisionsPerBatch + 10
	for i := range n {
		k := fmt.Sprintf("/runs/m2/t%03d", i)
		if _, err := s.Commit(ctx, &storev1.CommitRequest{TxnId: k, Groups: []*storev1.Group{{Ops: []*storev1.Op{put(k, "v")}}}}); err != nil {
			t.Fatal(err)
		}
	}
	stream := &watchStream{ctx: ctx, out: make(chan *storev1.WatchResponse)}
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(&storev1.WatchRequest{Prefix: "/runs/m1/", Cursor: keyspace.Cursor{0}.Encode()}, stream)
	}()
	var last uint64
	for last < n {
		select {
		case r := <-stream.out:
			if len(r.GetEvents()) != 0 || !r.GetProgress() {
				t.Fatalf("response %v: want progress only", r)
			}
			c, err := keyspace.DecodeCursor(r.GetCursor(), 1)
			if err != nil || c[0] < last || c[0] > n {
				t.Fatalf("cursor %v (%v) after %d, shard at %d", c, err, last, n)
			}
			last = c[0]
		case err := <-done:
			t.Fatalf("watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("timed out at cursor %d", last)
		}
	}
	cancel()
	<-done
}
