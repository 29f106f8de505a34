package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func badKV(name string, version uint64) *storev1.KeyValue {
	return &storev1.KeyValue{Key: "/machines/" + name, Value: []byte("bad"), Version: version}
}

// Values Decode refuses are skipped: the cache holds no object for them
// (a held one is deleted), Unreadable says why, and each spell of a key's
// unreadability is logged and told to OnUnreadable once, whatever the
// rewrites and relists meanwhile; a key deleted or readable again ends
// its spell. Stale events do not undo a skip.
func TestInformerSkipsUnreadableValues(t *testing.T) {
	src := &scriptedSource{states: []map[string]*storev1.KeyValue{{
		"/machines/a": machineKV("a", 1, false),
		"/machines/b": badKV("b", 2),
	}, {
		"/machines/a": badKV("a", 4),
		"/machines/c": machineKV("c", 5, false),
		"/machines/d": badKV("d", 7),
		"/machines/e": badKV("e", 9),
	}}}
	src.streams = [][]*storev1.WatchResponse{
		{{Events: []*storev1.Event{
			put(badKV("b", 3)),            // b stays unreadable
			put(badKV("a", 4)),            // a becomes unreadable
			put(machineKV("a", 1, false)), // stale
			put(machineKV("c", 5, false)), //
			del("/machines/b", 6),         // b's spell ends
			put(badKV("e", 8)),            // e: unreadable,
			put(machineKV("e", 8, false)), // stale,
			put(machineKV("e", 9, false)), // then readable
		}}},
		nil,
	}
	src.ends = []error{errCompacted, nil}
	var mu sync.Mutex
	var calls []string
	record := func(s string) { mu.Lock(); calls = append(calls, s); mu.Unlock() }
	core, logs := observer.New(zap.InfoLevel)
	var in *Informer[*troupev1.Machine]
	in = NewInformer(InformerConfig[*troupev1.Machine]{
		Prefix: "/machines/", List: src.list, Watch: src.watch,
		IsCompacted: func(err error) bool { return errors.Is(err, errCompacted) },
		Decode: func(key string, v []byte, ver uint64) (*troupev1.Machine, error) {
			m := &troupev1.Machine{}
			if err := proto.Unmarshal(v, m); err != nil || m.GetMetadata() == nil {
				return nil, fmt.Errorf("%s@%d is no machine", key, ver)
			}
			m.Metadata.Version = ver
			return m, nil
		},
		RetryDelay: time.Millisecond, Logger: zap.New(core),
	})
	in.AddHandler(Handler[*troupev1.Machine]{
		OnAdd: func(k string, _ *troupev1.Machine) { record("add " + k) },
		OnDelete: func(k string, _ *troupev1.Machine) {
			record(fmt.Sprintf("delete %s (unreadable: %v)", k, in.Unreadable(k) != nil))
		},
		OnUnreadable: func(k string, err error) { record(fmt.Sprintf("unreadable %s: %v", k, err)) },
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go in.Run(ctx)
	want := []string{
		"add /machines/a",
		"unreadable /machines/b: /machines/b@2 is no machine",
		"delete /machines/a (unreadable: true)",
		"unreadable /machines/a: /machines/a@4 is no machine",
		"add /machines/c",
		"unreadable /machines/e: /machines/e@8 is no machine",
		"add /machines/e",
		// The relist: e is unreadable again, a still is, d is new.
		"delete /machines/e (unreadable: true)",
	}
	wait.Until(ctx, t, fmt.Sprintf("%d handler calls", len(want)+2), func() (bool, string) { // and d's and e's reports
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == len(want)+2, fmt.Sprintf("handler calls: %v", calls)
	})
	cancel()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(calls[:len(want)], "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("handler calls:\n%s\nwant first:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	if rest := fmt.Sprint(calls[len(want):]); rest != "[unreadable /machines/d: /machines/d@7 is no machine unreadable /machines/e: /machines/e@9 is no machine]" &&
		rest != "[unreadable /machines/e: /machines/e@9 is no machine unreadable /machines/d: /machines/d@7 is no machine]" {
		t.Fatalf("after the relist: %s", rest)
	}
	for key, n := range map[string]int{"/machines/a": 1, "/machines/b": 1, "/machines/d": 1, "/machines/e": 2} {
		if got := logs.FilterLevelExact(zap.ErrorLevel).FilterField(zap.String("key", key)).Len(); got != n {
			t.Errorf("%s logged %d times, want %d", key, got, n)
		}
	}
	if in.Unreadable("/machines/b") != nil || in.Unreadable("/machines/c") != nil || fmt.Sprint(in.Indexer().Keys()) != "[/machines/c]" {
		t.Errorf("cache holds %v; b unreadable: %v", in.Indexer().Keys(), in.Unreadable("/machines/b"))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(in.Collector())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP troupe_cache_unreadable Values a client cache skips because it cannot read them (each logged once).
# TYPE troupe_cache_unreadable gauge
troupe_cache_unreadable{prefix="/machines/"} 3
`), "troupe_cache_unreadable"); err != nil {
		t.Error(err)
	}
}
