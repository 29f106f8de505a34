package watch

import (
	"errors"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// fakeLog is a Source holding revisions [oldest, current].
type fakeLog struct{ oldest, current uint64 }

func (l *fakeLog) Revision() uint64 { return l.current }

func (l *fakeLog) ReadLog(from uint64, limit int) (*statemachine.LogResult, error) {
	res := &statemachine.LogResult{Oldest: l.oldest, Current: l.current}
	for r := max(from, l.oldest); r <= l.current && len(res.Entries) < limit; r++ {
		res.Entries = append(res.Entries, statemachine.LogEntry{Revision: r, Changes: changes(r)})
	}
	return res, nil
}

func changes(r uint64) *storev1.ChangeSet {
	return &storev1.ChangeSet{Events: []*storev1.Event{{Kv: &storev1.KeyValue{Key: "/k", Version: r}}}}
}

// apply advances the log and tells the hub, as the state machine does.
func apply(h *Hub, l *fakeLog, n int) {
	for range n {
		l.current++
		h.Applied(0, l.current, changes(l.current))
	}
}

func TestNextFromRingAndLog(t *testing.T) {
	h := NewHub(Config{RingRevisions: 4, RingBytes: 1 << 20, Retention: 100}, 1)
	l := &fakeLog{oldest: 1}
	h.Attach(0, l)
	if _, wait, err := h.Next(0, 0, 10); err != nil || wait == nil {
		t.Fatalf("empty shard: wait %v err %v", wait, err)
	}
	_, wait, _ := h.Next(0, 0, 10)
	apply(h, l, 10)
	select {
	case <-wait:
	default:
		t.Fatal("waiter not woken by Applied")
	}
	// Revisions 7..10 are in the ring, 1..6 only in the durable log.
	for _, after := range []uint64{0, 3, 6, 8} {
		got, _, err := h.Next(0, after, 3)
		if err != nil || len(got) == 0 || got[0].Revision != after+1 {
			t.Fatalf("Next after %d: %v %v", after, got, err)
		}
		for i, e := range got {
			if e.Revision != after+1+uint64(i) {
				t.Fatalf("Next after %d: gap at %d: %v", after, i, e.Revision)
			}
		}
	}
}

func TestCompactedAndRetention(t *testing.T) {
	h := NewHub(Config{RingRevisions: 1000, RingBytes: 1 << 20, Retention: 5}, 1)
	l := &fakeLog{oldest: 1}
	h.Attach(0, l)
	apply(h, l, 20)
	l.oldest = 16 // the durable log keeps 5 revisions
	// The ring holds more than 5 revisions' worth of room, but must not
	// serve what the log has dropped.
	var ce *CompactedError
	if _, _, err := h.Next(0, 3, 10); !errors.As(err, &ce) || ce.Oldest != 16 || ce.Requested != 4 {
		t.Fatalf("cursor at 3: %v, want compacted with oldest 16", err)
	}
	if got, _, err := h.Next(0, 15, 10); err != nil || len(got) != 5 {
		t.Fatalf("cursor at 15: %v %v", got, err)
	}
	// After a snapshot replaced the state, the ring is dropped and reads
	// go to the new log.
	l.oldest, l.current = 50, 60
	h.Reset(0)
	if _, _, err := h.Next(0, 20, 10); !errors.As(err, &ce) || ce.Oldest != 50 {
		t.Fatalf("after reset: %v, want compacted with oldest 50", err)
	}
	if h.Revision(0) != 60 {
		t.Fatalf("revision after reset %d, want 60", h.Revision(0))
	}
}
