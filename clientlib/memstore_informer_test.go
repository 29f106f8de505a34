package clientlib_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// memTimeout bounds a test that would otherwise hang on a bug; nothing
// waits for it to pass.
const memTimeout = 30 * time.Second

// runInformer runs inf until the test ends, and returns once it has
// listed and opened its watch on s (with the watches already open,
// others).
func runInformer[T clientlib.Object](ctx context.Context, t *testing.T, s *memstore.Store, inf *cache.Informer[T], others int) {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitForWatches(ctx, others+1); err != nil {
		t.Fatal(err)
	}
}

// cached checks that the cache holds exactly the tasks the store does, at
// their versions.
func cached(ctx context.Context, t *testing.T, s clientlib.Store, inf *cache.Informer[*troupev1.Task]) {
	t.Helper()
	want, _, err := clientlib.List(ctx, s, clientlib.Tasks, "")
	if err != nil {
		t.Fatal(err)
	}
	got := inf.Indexer().List()
	if len(got) != len(want) {
		t.Fatalf("cache has %d tasks, store %d", len(got), len(want))
	}
	for i := range want {
		if g, w := got[i].GetMetadata(), want[i].GetMetadata(); g.GetName() != w.GetName() || g.GetVersion() != w.GetVersion() {
			t.Fatalf("task %d: cache %s@%d, store %s@%d", i, g.GetName(), g.GetVersion(), w.GetName(), w.GetVersion())
		}
	}
}

// A typed informer runs on the in-memory store as on a cell: it lists,
// follows creates, updates and deletes, keeps its indexes, and skips an
// unreadable value. Each step waits for it with Quiesce, without sleeping.
func TestInformerOverMemstore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), memTimeout)
	defer cancel()
	s := newMem()
	for i := range 3 {
		if _, err := clientlib.Create(ctx, s, clientlib.Tasks, testTask("web", int32(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	inf := clientlib.NewInformer(s, clientlib.Tasks, "", clientlib.TaskIndexes())
	vlog := &versionLog{seen: map[string][]uint64{}}
	inf.AddHandler(vlog.handler())
	var deleted []string
	inf.AddHandler(cache.Handler[*troupev1.Task]{OnDelete: func(key string, _ *troupev1.Task) { deleted = append(deleted, key) }})
	runInformer(ctx, t, s, inf, 0)
	cached(ctx, t, s, inf)

	var made []*troupev1.Task
	for i := 3; i < 6; i++ {
		task, err := clientlib.Create(ctx, s, clientlib.Tasks, testTask("web", int32(i), ""))
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, task)
	}
	bound := made[0]
	bound.Binding = &troupev1.TaskBinding{Machine: "m1"}
	if _, err := clientlib.Update(ctx, s, clientlib.Tasks, bound); err != nil {
		t.Fatal(err)
	}
	if err := clientlib.Delete(ctx, s, clientlib.Tasks, made[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	cached(ctx, t, s, inf)
	if keys := inf.Indexer().IndexKeys(clientlib.IndexMachine, "m1"); fmt.Sprint(keys) != "[/tasks/ns/web/3]" {
		t.Errorf("index machine=m1: %v", keys)
	}
	if n := len(inf.Indexer().IndexKeys(clientlib.IndexScheduler, "batch")); n != 4 {
		t.Errorf("index scheduler=batch holds %d pending tasks, want 4", n)
	}
	if fmt.Sprint(deleted) != "[/tasks/ns/web/4]" {
		t.Errorf("OnDelete for %v", deleted)
	}

	bad := "/tasks/ns/web/9"
	clienttest.PutRaw(ctx, t, s, bad, clienttest.Garbage)
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if inf.Unreadable(bad) == nil {
		t.Errorf("%s: not reported unreadable", bad)
	}
	if got := inf.EventsApplied(); got != 6 {
		t.Errorf("%d watch events applied, want 6 (3 creates, an update, a delete, the unreadable put)", got)
	}
	vlog.check(t)
}

// An informer whose watch falls further behind than the store keeps gets
// the compacted error, relists, and follows on.
func TestInformerOverMemstoreRelistsAfterCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), memTimeout)
	defer cancel()
	cfg := memstore.DefaultConfig()
	cfg.Retention = 3
	s, err := memstore.NewWithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inf := clientlib.NewInformer(s, clientlib.Tasks, "", nil)
	// A handler holds the informer on the first task until the store has
	// moved past what it keeps; then it tells when the last task arrives.
	held, release, last := make(chan struct{}), make(chan struct{}), make(chan struct{})
	lastKey := "/tasks/ns/web/5"
	inf.AddHandler(cache.Handler[*troupev1.Task]{OnAdd: func(key string, _ *troupev1.Task) {
		switch key {
		case "/tasks/ns/web/0":
			close(held)
			<-release
		case lastKey:
			close(last)
		}
	}})
	runInformer(ctx, t, s, inf, 0)
	for i := range 6 {
		if _, err := clientlib.Create(ctx, s, clientlib.Tasks, testTask("web", int32(i), "")); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-held
		}
	}
	close(release)
	select {
	case <-last: // from the relist: the watch could not have delivered it
	case <-ctx.Done():
		t.Fatal("the informer never got the last task")
	}
	if err := s.WaitForWatches(ctx, 1); err != nil { // watching again
		t.Fatal(err)
	}
	if inf.Relists() != 1 {
		t.Fatalf("%d relists, want 1", inf.Relists())
	}
	if _, err := clientlib.Create(ctx, s, clientlib.Tasks, testTask("web", 6, "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	cached(ctx, t, s, inf)
}

// loggedStore is a Store with a logger, as a Client is.
type loggedStore struct {
	*memstore.Store
	log *zap.Logger
}

func (s loggedStore) Logger() *zap.Logger { return s.log }

// NewInformer logs to its store's logger when the store has one, also
// through WithValidator.
func TestInformerLogsToStoreLogger(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), memTimeout)
	defer cancel()
	mem := newMem()
	core, logs := observer.New(zapcore.InfoLevel)
	v, err := clientlib.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	s := clientlib.WithValidator(loggedStore{mem, zap.New(core)}, v)
	clienttest.PutRaw(ctx, t, s, "/tasks/ns/web/0", clienttest.Garbage)
	inf := clientlib.NewInformer(s, clientlib.Tasks, "", nil)
	runInformer(ctx, t, mem, inf, 0)
	if n := logs.FilterMessage("cache: unreadable value skipped").Len(); n != 1 {
		t.Fatalf("%d unreadable values logged to the store's logger, want 1", n)
	}
}
