// Package memstoretest helps tests that run controllers, schedulers or
// agents over the in-memory store (cellstore/memstore) wait without
// sleeping.
package memstoretest

import (
	"context"
	"sync"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Commits wakes a test at every commit to a memstore, so that it waits
// for a condition on the store's contents without sleeping or polling:
// they change only by commits. It takes the store's one Observe
// callback.
type Commits struct {
	mu   sync.Mutex
	next chan struct{} // closed by the next commit
}

// WatchCommits starts following s's commits.
func WatchCommits(s *memstore.Store) *Commits {
	c := &Commits{next: make(chan struct{})}
	s.Observe(func(*storev1.ChangeSet) {
		c.mu.Lock()
		defer c.mu.Unlock()
		close(c.next)
		c.next = make(chan struct{})
	})
	return c
}

// Until returns once cond holds, looking at it now and after each
// commit; it fails the test with what cond saw last if ctx ends first.
// cond must depend only on the store's contents.
func (c *Commits) Until(ctx context.Context, t testing.TB, what string, cond func() error) {
	t.Helper()
	for {
		c.mu.Lock()
		next := c.next
		c.mu.Unlock()
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-next:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (%v)", what, err, ctx.Err())
		}
	}
}
