// Package watch turns each shard's change log into change streams.
//
// The state machine reports every applied revision to the Hub (it is the
// statemachine.Observer). For each shard the Hub keeps a bounded in-memory
// ring of recent revisions and a broadcast channel closed whenever the shard
// advances. A reader asks for the revisions after its position: it gets
// them from the ring when they are still there, from the replica's durable
// change log (Pebble) otherwise, and a CompactedError when they are gone
// from both. Readers never block the state machine: the ring is bounded and
// a slow reader simply falls back to the durable log.
package watch

import (
	"fmt"
	"sync"

	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Source is a shard replica's durable change log.
type Source interface {
	ReadLog(from uint64, max int) (*statemachine.LogResult, error)
	Revision() uint64
}

// CompactedError says that revisions after a position are no longer kept.
type CompactedError struct {
	Shard     uint32
	Requested uint64 // the first revision the reader needed
	Oldest    uint64 // the oldest revision still kept
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("shard %d: revision %d is compacted; oldest kept is %d", e.Shard, e.Requested, e.Oldest)
}

// Config bounds the in-memory rings.
type Config struct {
	// RingRevisions and RingBytes bound each shard's ring.
	RingRevisions int
	RingBytes     int
	// Retention is the change log retention of the shards (in revisions).
	// The ring never serves a revision the durable log would already have
	// dropped, so whether a cursor is compacted does not depend on which
	// node serves it or how long it has been up.
	Retention uint64
}

// DefaultConfig returns the defaults: 4096 revisions or 32 MiB per shard,
// and the server's default log retention.
func DefaultConfig() Config {
	return Config{RingRevisions: 4096, RingBytes: 32 << 20, Retention: 100000}
}

// Hub fans out the changes of every shard of one store node.
type Hub struct {
	cfg   Config
	feeds []*feed
}

var _ statemachine.Observer = (*Hub)(nil)

// NewHub returns a hub for shards shards.
func NewHub(cfg Config, shards uint32) *Hub {
	h := &Hub{cfg: cfg, feeds: make([]*feed, shards)}
	for i := range h.feeds {
		h.feeds[i] = &feed{shard: uint32(i), notify: make(chan struct{})}
	}
	return h
}

// Attach gives shard's feed its durable source. It must be called before
// the shard's replica starts applying.
func (h *Hub) Attach(shard uint32, src Source) {
	f := h.feeds[shard]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.src = src
	f.ring = nil
	f.ringBytes = 0
}

// Applied implements statemachine.Observer.
func (h *Hub) Applied(shard uint32, rev uint64, cs *storev1.ChangeSet) {
	f := h.feeds[shard]
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.ring); n > 0 && f.ring[n-1].Revision+1 != rev {
		f.ring, f.ringBytes = nil, 0 // a gap: start over from here
	}
	f.ring = append(f.ring, statemachine.LogEntry{Revision: rev, Changes: cs})
	f.ringBytes += changeBytes(cs)
	for len(f.ring) > 1 && (len(f.ring) > h.cfg.RingRevisions || f.ringBytes > h.cfg.RingBytes || f.ring[0].Revision+h.cfg.Retention <= rev) {
		f.ringBytes -= changeBytes(f.ring[0].Changes)
		f.ring[0] = statemachine.LogEntry{}
		f.ring = f.ring[1:]
	}
	f.last = rev
	f.wake()
}

// Reset implements statemachine.Observer: the shard's state was replaced by
// a snapshot, so the ring no longer follows on from it.
func (h *Hub) Reset(shard uint32) {
	f := h.feeds[shard]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring, f.ringBytes = nil, 0
	f.last = 0
	f.wake()
}

// Revision returns shard's current revision on this replica.
func (h *Hub) Revision(shard uint32) uint64 {
	f := h.feeds[shard]
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.revision()
}

// Next returns up to max revisions of shard after revision after. When
// there are none yet it returns a channel that is closed when the shard
// advances.
func (h *Hub) Next(shard uint32, after uint64, max int) ([]statemachine.LogEntry, <-chan struct{}, error) {
	f := h.feeds[shard]
	f.mu.Lock()
	cur := f.revision()
	if after >= cur {
		ch := f.notify
		f.waited = true
		f.mu.Unlock()
		return nil, ch, nil
	}
	if n := len(f.ring); n > 0 && f.ring[0].Revision <= after+1 && f.ring[n-1].Revision > after {
		i := int(after + 1 - f.ring[0].Revision)
		j := min(n, i+max)
		out := append([]statemachine.LogEntry(nil), f.ring[i:j]...)
		f.mu.Unlock()
		return out, nil, nil
	}
	src := f.src
	f.mu.Unlock()
	if src == nil {
		return nil, nil, fmt.Errorf("shard %d: replica not open", shard)
	}
	res, err := src.ReadLog(after+1, max)
	if err != nil {
		return nil, nil, err
	}
	if len(res.Entries) == 0 || res.Entries[0].Revision != after+1 {
		return nil, nil, &CompactedError{Shard: shard, Requested: after + 1, Oldest: res.Oldest}
	}
	return res.Entries, nil, nil
}

type feed struct {
	shard     uint32
	mu        sync.Mutex
	src       Source
	ring      []statemachine.LogEntry // consecutive revisions
	ringBytes int
	last      uint64        // newest revision seen through Applied
	notify    chan struct{} // closed and replaced on an advance once Next handed it out
	waited    bool          // Next handed out notify
}

// revision is the newest revision this replica has applied. The state
// machine stores its revision before it reports it, so the source can be
// ahead of the ring by a little.
func (f *feed) revision() uint64 {
	if f.src != nil {
		return max(f.last, f.src.Revision())
	}
	return f.last
}

// wake wakes those waiting for the shard to advance. With nobody waiting
// (no watch on the node, or every watch busy sending) there is nothing to
// close, and no new channel to make for each revision.
func (f *feed) wake() {
	if !f.waited {
		return
	}
	close(f.notify)
	f.notify = make(chan struct{})
	f.waited = false
}

func changeBytes(cs *storev1.ChangeSet) int {
	n := 0
	for _, e := range cs.GetEvents() {
		n += len(e.GetKv().GetKey()) + len(e.GetKv().GetValue()) + 32
	}
	return n
}
