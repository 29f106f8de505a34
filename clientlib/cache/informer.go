package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Stream is a watch: the next batch of events, until an error.
type Stream interface {
	Next() (*storev1.WatchResponse, error)
	Close()
}

// InformerConfig says what an Informer follows and how.
type InformerConfig[T Object] struct {
	// Prefix is the part of the keyspace followed.
	Prefix string
	List   func(ctx context.Context, prefix string) (kvs []*storev1.KeyValue, cursor []byte, err error)
	Watch  func(ctx context.Context, prefix string, cursor []byte) Stream
	// IsCompacted reports a watch error that needs a relist.
	IsCompacted func(error) bool
	// Decode turns a stored key and value into an object (version filled
	// in).
	Decode  func(key string, value []byte, version uint64) (T, error)
	Indexes map[string]IndexFunc[T]
	// RetryDelay is the pause before listing again after a failed list or
	// a broken watch.
	RetryDelay time.Duration
	Logger     *zap.Logger
}

// Handler is called for changes of the cache, in order, from the
// Informer's goroutine. Handlers should only enqueue keys (see WorkQueue)
// or keep what they read: the objects they get are the cache's own,
// shared and read-only (clone one to change it).
// Objects passed are copies.
type Handler[T Object] struct {
	OnAdd    func(key string, obj T)
	OnUpdate func(key string, old, cur T)
	OnDelete func(key string, old T)
}

// Informer lists a prefix, then watches it into an Indexer, relisting when
// its cursor is compacted. Run drives it.
type Informer[T Object] struct {
	cfg      InformerConfig[T]
	indexer  *Indexer[T]
	handlers []Handler[T]

	synced   atomic.Bool
	syncOnce sync.Once
	syncedCh chan struct{}
	events   atomic.Uint64 // watch events applied
	relists  atomic.Uint64
	lastResp atomic.Int64 // unix nanos of the last watch response
}

// NewInformer returns an Informer; add handlers, then Run it.
func NewInformer[T Object](cfg InformerConfig[T]) *Informer[T] {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 100 * time.Millisecond
	}
	return &Informer[T]{cfg: cfg, indexer: NewIndexer(cfg.Indexes), syncedCh: make(chan struct{})}
}

// AddHandler registers h; call it before Run.
func (in *Informer[T]) AddHandler(h Handler[T]) { in.handlers = append(in.handlers, h) }

// Indexer is the cache's store.
func (in *Informer[T]) Indexer() *Indexer[T] { return in.indexer }

// HasSynced reports whether the first list has been applied.
func (in *Informer[T]) HasSynced() bool { return in.synced.Load() }

// WaitForSync blocks until the first list has been applied or ctx ends.
func (in *Informer[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-in.syncedCh:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cache %s not synced: %w", in.cfg.Prefix, ctx.Err())
	}
}

// EventsApplied counts the watch events applied to the cache.
func (in *Informer[T]) EventsApplied() uint64 { return in.events.Load() }

// Relists counts the lists after the first (compactions, broken watches).
func (in *Informer[T]) Relists() uint64 { return in.relists.Load() }

// WatchLag is the time since the watch last delivered a response (events
// or progress, which the store sends every second or so): well above
// that, the cache is falling behind or cut off.
func (in *Informer[T]) WatchLag() time.Duration {
	last := in.lastResp.Load()
	if last == 0 {
		return 0
	}
	return time.Since(time.Unix(0, last))
}

// Run follows the prefix until ctx ends, and returns ctx's error.
func (in *Informer[T]) Run(ctx context.Context) error {
	for first := true; ; first = false {
		if !first {
			in.relists.Add(1)
		}
		cursor, err := in.list(ctx)
		if err == nil {
			err = in.watch(ctx, cursor)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		in.cfg.Logger.Info("cache relisting", zap.String("prefix", in.cfg.Prefix), zap.Error(err))
		select {
		case <-time.After(in.cfg.RetryDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// list reads the prefix, brings the Indexer to it (calling handlers for
// the differences) and returns the cursor to watch from.
func (in *Informer[T]) list(ctx context.Context) ([]byte, error) {
	kvs, cursor, err := in.cfg.List(ctx, in.cfg.Prefix)
	if err != nil {
		return nil, err
	}
	objs := make(map[string]T, len(kvs))
	sizes := make(map[string]int, len(kvs))
	for _, kv := range kvs {
		obj, err := in.cfg.Decode(kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if err != nil {
			in.cfg.Logger.Warn("cache: undecodable object skipped", zap.String("key", kv.GetKey()), zap.Error(err))
			continue
		}
		objs[kv.GetKey()] = obj
		sizes[kv.GetKey()] = len(kv.GetValue())
	}
	for _, key := range in.indexer.Keys() {
		if _, ok := objs[key]; !ok {
			old, _ := in.indexer.peek(key)
			in.indexer.delete(key)
			in.notifyDelete(key, old)
		}
	}
	for key, obj := range objs {
		old, existed := in.indexer.peek(key)
		if existed && version(old) == version(obj) {
			continue
		}
		in.indexer.set(key, obj, sizes[key])
		if existed {
			in.notifyUpdate(key, old, obj)
		} else {
			in.notifyAdd(key, obj)
		}
	}
	in.synced.Store(true)
	in.syncOnce.Do(func() { close(in.syncedCh) })
	return cursor, nil
}

// watch applies events from cursor on until the stream fails.
func (in *Informer[T]) watch(ctx context.Context, cursor []byte) error {
	s := in.cfg.Watch(ctx, in.cfg.Prefix, cursor)
	defer s.Close()
	for {
		resp, err := s.Next()
		in.lastResp.Store(time.Now().UnixNano())
		if err != nil {
			if in.cfg.IsCompacted(err) {
				return fmt.Errorf("cursor compacted: %w", err)
			}
			return err
		}
		for _, ev := range resp.GetEvents() {
			in.apply(ev)
		}
	}
}

// apply applies one event, skipping those older than what the cache holds
// (a relist may have read past them).
func (in *Informer[T]) apply(ev *storev1.Event) {
	key, ver := ev.GetKv().GetKey(), ev.GetKv().GetVersion()
	old, existed := in.indexer.peek(key)
	if existed && version(old) >= ver {
		return
	}
	in.events.Add(1)
	switch ev.GetType() {
	case storev1.EventType_EVENT_TYPE_DELETE:
		if existed {
			in.indexer.delete(key)
			in.notifyDelete(key, old)
		}
	default:
		obj, err := in.cfg.Decode(key, ev.GetKv().GetValue(), ver)
		if err != nil {
			in.cfg.Logger.Warn("cache: undecodable object skipped", zap.String("key", key), zap.Error(err))
			return
		}
		in.indexer.set(key, obj, len(ev.GetKv().GetValue()))
		if existed {
			in.notifyUpdate(key, old, obj)
		} else {
			in.notifyAdd(key, obj)
		}
	}
}

func (in *Informer[T]) notifyAdd(key string, obj T) {
	for _, h := range in.handlers {
		if h.OnAdd != nil {
			h.OnAdd(key, obj)
		}
	}
}

func (in *Informer[T]) notifyUpdate(key string, old, cur T) {
	for _, h := range in.handlers {
		if h.OnUpdate != nil {
			h.OnUpdate(key, old, cur)
		}
	}
}

func (in *Informer[T]) notifyDelete(key string, old T) {
	for _, h := range in.handlers {
		if h.OnDelete != nil {
			h.OnDelete(key, old)
		}
	}
}

// Object is what a cache holds: a protobuf message with metadata.
type Object interface {
	proto.Message
	GetMetadata() *troupev1.ObjectMeta
}

func version[T Object](obj T) uint64 { return obj.GetMetadata().GetVersion() }

// Syncer is an informer as Start sees it.
type Syncer interface {
	Run(ctx context.Context) error
	WaitForSync(ctx context.Context) error
}

// Start runs each informer until ctx ends and waits until all have
// synced (or ctx ends).
func Start(ctx context.Context, informers ...Syncer) error {
	for _, inf := range informers {
		go inf.Run(ctx)
	}
	for _, inf := range informers {
		if err := inf.WaitForSync(ctx); err != nil {
			return err
		}
	}
	return nil
}
