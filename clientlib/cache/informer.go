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
	// in). A value it refuses is skipped (see Handler.OnUnreadable).
	Decode DecodeFunc[T]
	// Reread decodes a value Decode accepted, again, for the cache's
	// readers (Get, List, ByIndex, a handler's old object). It may leave
	// out the checks Decode made, which the value passed and which give
	// the same answer for the same bytes (clientlib's Decode beside its
	// DecodeAt): each object is read back several times, and the checks
	// cost as much as the decoding. Nil: Decode.
	Reread  DecodeFunc[T]
	Indexes map[string]IndexFunc[T]
	// RetryDelay is the pause before listing again after a failed list or
	// a broken watch.
	RetryDelay time.Duration
	Logger     *zap.Logger
}

// Handler is called for changes of the cache, in order, from the
// Informer's goroutine. Handlers should only enqueue keys (see WorkQueue)
// or keep what they read. The objects they get are theirs (decoded for
// them; the cache holds encodings), but shared by every handler of the
// informer: clone one to change it.
type Handler[T Object] struct {
	OnAdd    func(key string, obj T)
	OnUpdate func(key string, old, cur T)
	// UpdateIgnoresOld says that OnUpdate does not read old, which may
	// then be the zero T: when no handler reads it, an update does not
	// decode the object it replaces.
	UpdateIgnoresOld bool
	OnDelete         func(key string, old T)
	// OnUnreadable is called when the value at key becomes one that
	// Decode refuses, err saying why. The cache skips it: it holds no
	// object at key (OnDelete came first if it held one) until the key is
	// deleted or holds a value it can read again. The informer logs one
	// error and calls OnUnreadable once for each such spell, however often
	// the value is rewritten or relisted meanwhile.
	OnUnreadable func(key string, err error)
}

// Informer lists a prefix, then watches it into an Indexer, relisting when
// its cursor is compacted. Run drives it.
type Informer[T Object] struct {
	cfg      InformerConfig[T]
	indexer  *Indexer[T]
	handlers []Handler[T]
	// A handler reads the old object of an update, of a deletion.
	oldOnUpdate, oldOnDelete bool

	mu sync.Mutex // guards unreadable, which only Run's goroutine writes (and so reads unlocked)
	// unreadable are the values skipped, by key.
	unreadable map[string]skipped

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
	reread := cfg.Reread
	if reread == nil {
		reread = cfg.Decode
	}
	return &Informer[T]{cfg: cfg, indexer: NewIndexer(reread, cfg.Indexes), unreadable: map[string]skipped{}, syncedCh: make(chan struct{})}
}

// skipped is a value Decode refused: its version and why.
type skipped struct {
	version uint64
	err     error
}

// AddHandler registers h; call it before Run.
func (in *Informer[T]) AddHandler(h Handler[T]) {
	in.handlers = append(in.handlers, h)
	in.oldOnUpdate = in.oldOnUpdate || h.OnUpdate != nil && !h.UpdateIgnoresOld
	in.oldOnDelete = in.oldOnDelete || h.OnDelete != nil
}

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

// Unreadable returns why the cache skipped the value at key (Decode's
// error), or nil if it did not. A reader that takes a key's absence from
// the cache to mean its absence from the store (to create the key, or to
// delete what depends on it) checks here first.
func (in *Informer[T]) Unreadable(key string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.unreadable[key].err
}

// unreadableCount counts the values the cache skips.
func (in *Informer[T]) unreadableCount() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.unreadable)
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
	held := make(map[string]*storev1.KeyValue, len(kvs))
	bad := map[string]skipped{}
	for _, kv := range kvs {
		obj, err := in.cfg.Decode(kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if err != nil {
			bad[kv.GetKey()] = skipped{kv.GetVersion(), err}
			continue
		}
		objs[kv.GetKey()], held[kv.GetKey()] = obj, kv
	}
	// Before the handlers run, so that they see the skipped keys.
	in.mu.Lock()
	prev := in.unreadable
	in.unreadable = bad
	in.mu.Unlock()
	for _, key := range in.indexer.Keys() {
		if _, ok := objs[key]; !ok {
			prev, _ := in.indexer.held(key)
			old := in.old(key, prev, true)
			in.indexer.delete(key)
			in.notifyDelete(key, old)
		}
	}
	for key, obj := range objs {
		prev, existed := in.indexer.held(key)
		if existed && prev.version == version(obj) {
			continue
		}
		var old T
		if existed {
			old = in.old(key, prev, false)
		}
		in.indexer.set(key, obj, held[key].GetValue(), held[key].GetVersion(), prev, existed)
		if existed {
			in.notifyUpdate(key, old, obj)
		} else {
			in.notifyAdd(key, obj)
		}
	}
	for key, s := range bad {
		if _, ok := prev[key]; !ok {
			in.notifyUnreadable(key, s)
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
// or skips (a relist may have read past them).
func (in *Informer[T]) apply(ev *storev1.Event) {
	key, ver := ev.GetKv().GetKey(), ev.GetKv().GetVersion()
	prev, existed := in.indexer.held(key)
	// Only this goroutine writes unreadable, so it reads it unlocked.
	bad, wasBad := in.unreadable[key]
	if existed && prev.version >= ver || wasBad && bad.version >= ver {
		return
	}
	in.events.Add(1)
	deleted := ev.GetType() == storev1.EventType_EVENT_TYPE_DELETE
	var obj T
	var err error
	if !deleted {
		obj, err = in.cfg.Decode(key, ev.GetKv().GetValue(), ver)
	}
	// Only this goroutine writes unreadable: a key it does not hold
	// needs no deleting.
	if err != nil || wasBad {
		in.mu.Lock()
		if err != nil {
			in.unreadable[key] = skipped{ver, err}
		} else {
			delete(in.unreadable, key)
		}
		in.mu.Unlock()
	}
	switch {
	case deleted || err != nil:
		if existed {
			old := in.old(key, prev, true)
			in.indexer.delete(key)
			in.notifyDelete(key, old)
		}
		if err != nil && !wasBad {
			in.notifyUnreadable(key, skipped{ver, err})
		}
	case existed:
		old := in.old(key, prev, false)
		in.indexer.set(key, obj, ev.GetKv().GetValue(), ver, prev, true)
		in.notifyUpdate(key, old, obj)
	default:
		in.indexer.set(key, obj, ev.GetKv().GetValue(), ver, entry{}, false)
		in.notifyAdd(key, obj)
	}
}

// old returns the object held at key, as held, for the handlers told of
// its deletion (deleted) or update: decoded only if one of them reads it
// (the zero T otherwise).
func (in *Informer[T]) old(key string, held entry, deleted bool) T {
	var obj T
	if deleted && in.oldOnDelete || !deleted && in.oldOnUpdate {
		obj = in.indexer.object(key, held)
	}
	return obj
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

// notifyUnreadable logs that the value at key is skipped and tells the
// handlers, once for each spell of the key's unreadability.
func (in *Informer[T]) notifyUnreadable(key string, s skipped) {
	in.cfg.Logger.Error("cache: unreadable value skipped", zap.String("prefix", in.cfg.Prefix), zap.String("key", key),
		zap.Uint64("version", s.version), zap.Error(s.err))
	for _, h := range in.handlers {
		if h.OnUnreadable != nil {
			h.OnUnreadable(key, s.err)
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
