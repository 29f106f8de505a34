package server

import (
	"context"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
)

// inflight bounds the proposals in flight on a node (Config.MaxInflight),
// and each identity's share of them (Config.MaxInflightPerIdentity), so
// that one client flooding the node is refused while others keep
// committing. Callers without an identity (a store without TLS) have no
// share of their own: only the node's bound holds them.
type inflight struct {
	all      *semaphore.Weighted
	perID    int
	mu       sync.Mutex
	held     map[pki.Identity]int
	throttle func(pki.Identity)
}

func newInflight(total, perIdentity int, throttle func(pki.Identity)) *inflight {
	return &inflight{all: semaphore.NewWeighted(int64(total)), perID: perIdentity, held: map[pki.Identity]int{}, throttle: throttle}
}

// acquire takes n slots for ctx's caller, all at once or none; release
// gives them back.
func (f *inflight) acquire(ctx context.Context, n int) (release func(), err error) {
	id := identity(ctx)
	if id.Role != "" {
		f.mu.Lock()
		if f.held[id]+n > f.perID {
			f.mu.Unlock()
			f.throttle(id)
			return nil, storeerr.Throttled.With("%s holds its share of this store node's proposals in flight (%d); retry with backoff", id, f.perID)
		}
		f.held[id] += n
		f.mu.Unlock()
	}
	if !f.all.TryAcquire(int64(n)) {
		f.give(id, n)
		return nil, storeerr.Overloaded
	}
	return func() {
		f.all.Release(int64(n))
		f.give(id, n)
	}, nil
}

func (f *inflight) give(id pki.Identity, n int) {
	if id.Role == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[id] -= n; f.held[id] == 0 {
		delete(f.held, id)
	}
}
