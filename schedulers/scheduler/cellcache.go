package scheduler

import (
	"context"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Reader is what a cell cache needs of a store: lists and watches. Every
// clientlib.Store is one; a Shadow is given nothing more, so that it
// holds no way to write to the store.
type Reader interface {
	// List reads every key under prefix, with the cursor to watch from.
	List(ctx context.Context, prefix string) (kvs []*storev1.KeyValue, cursor []byte, err error)
	// WatchStream follows the changes under prefix after cursor.
	WatchStream(ctx context.Context, prefix string, cursor []byte) clientlib.Stream
}

// CellCache is the cell as a scheduler process sees it: caches of the
// machines, tasks and machine counters, kept current by watch, and the
// view of the machines that decisions copy. The instances of one process
// share it, as kube-scheduler's profiles share informers, so N instances
// cost one cache, not N; each still decides on its own snapshot and
// commits alone, so they conflict as separate processes would.
//
// Create the instances (New) before running the cache: they add their
// handlers to it.
type CellCache struct {
	machines *cache.Informer[*troupev1.Machine]
	tasks    *cache.Informer[*troupev1.Task]
	counters *cache.Informer[*troupev1.Counter]
	view     *MachineView
}

// NewCellCache returns the caches of a scheduler process over store c,
// which they only read.
func NewCellCache(c Reader, logger *zap.Logger) *CellCache {
	cc := &CellCache{view: NewMachineView()}
	cc.machines = newInformer(c, clientlib.Machines, nil)
	cc.tasks = newInformer(c, clientlib.Tasks, clientlib.TaskIndexes())
	cc.counters = cache.NewInformer(cache.InformerConfig[*troupev1.Counter]{
		Prefix: clientlib.AllocPrefix, List: c.List, Watch: c.WatchStream, IsCompacted: clientlib.IsCompacted,
		Decode: clientlib.DecodeCounter, Logger: logger,
	})
	cc.machines.AddHandler(cache.Handler[*troupev1.Machine]{
		OnAdd:            func(_ string, m *troupev1.Machine) { cc.view.SetMachine(m) },
		OnUpdate:         func(_ string, _, m *troupev1.Machine) { cc.view.SetMachine(m) },
		UpdateIgnoresOld: true,
		OnDelete:         func(_ string, m *troupev1.Machine) { cc.view.DeleteMachine(m.GetMetadata().GetName()) },
	})
	cc.counters.AddHandler(cache.Handler[*troupev1.Counter]{
		OnAdd: func(key string, c *troupev1.Counter) {
			cc.view.SetCounter(key, c.GetValue(), c.GetMetadata().GetVersion())
		},
		OnUpdate: func(key string, _, c *troupev1.Counter) {
			cc.view.SetCounter(key, c.GetValue(), c.GetMetadata().GetVersion())
		},
		OnDelete: func(key string, _ *troupev1.Counter) { cc.view.DeleteCounter(key) },
	})
	return cc
}

// Run starts the caches, which stay current until ctx ends, and waits
// until they are filled.
func (cc *CellCache) Run(ctx context.Context) error {
	return cache.Start(ctx, cc.machines, cc.tasks, cc.counters)
}

// WaitForSync waits until the caches are filled, or ctx ends.
func (cc *CellCache) WaitForSync(ctx context.Context) error {
	for _, inf := range []cache.Syncer{cc.machines, cc.tasks, cc.counters} {
		if err := inf.WaitForSync(ctx); err != nil {
			return err
		}
	}
	return nil
}

// newInformer is clientlib.NewInformer over a Reader: a cache of the
// objects of kind k, logging to c's logger if it has one.
func newInformer[T clientlib.Object](c Reader, k clientlib.Kind[T], indexes map[string]cache.IndexFunc[T]) *cache.Informer[T] {
	log := zap.NewNop()
	if l, ok := c.(interface{ Logger() *zap.Logger }); ok && l.Logger() != nil {
		log = l.Logger()
	}
	return cache.NewInformer(cache.InformerConfig[T]{
		Prefix: k.Prefix, List: c.List, Watch: c.WatchStream, IsCompacted: clientlib.IsCompacted,
		Decode: func(key string, value []byte, version uint64) (T, error) {
			return clientlib.DecodeAt(k, key, value, version)
		},
		Reread: func(_ string, value []byte, version uint64) (T, error) {
			return clientlib.Decode(k, value, version)
		},
		Indexes: indexes, Logger: log,
	})
}
