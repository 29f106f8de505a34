package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

var errCompacted = errors.New("compacted")

// scriptedSource serves the i-th list from states[i] (the last one once
// they run out) and streams of scripted responses, each ending with the
// given error.
type scriptedSource struct {
	mu      sync.Mutex
	states  []map[string]*storev1.KeyValue
	streams [][]*storev1.WatchResponse
	ends    []error
	lists   int
}

type scriptedStream struct {
	resps []*storev1.WatchResponse
	end   error
	ctx   context.Context
}

func (s *scriptedStream) Next() (*storev1.WatchResponse, error) {
	if len(s.resps) > 0 {
		r := s.resps[0]
		s.resps = s.resps[1:]
		return r, nil
	}
	if s.end != nil {
		return nil, s.end
	}
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

func (s *scriptedStream) Close() {}

func (src *scriptedSource) list(context.Context, string) ([]*storev1.KeyValue, []byte, error) {
	src.mu.Lock()
	defer src.mu.Unlock()
	state := src.states[min(src.lists, len(src.states)-1)]
	src.lists++
	var out []*storev1.KeyValue
	for _, kv := range state {
		out = append(out, kv)
	}
	return out, []byte("cursor"), nil
}

func (src *scriptedSource) watch(ctx context.Context, _ string, _ []byte) Stream {
	src.mu.Lock()
	defer src.mu.Unlock()
	st := &scriptedStream{ctx: ctx}
	if len(src.streams) > 0 {
		st.resps, st.end = src.streams[0], src.ends[0]
		src.streams, src.ends = src.streams[1:], src.ends[1:]
	}
	return st
}

func machineKV(name string, version uint64, unschedulable bool) *storev1.KeyValue {
	b, _ := proto.Marshal(&troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: name}, Spec: &troupev1.MachineSpec{Unschedulable: unschedulable}})
	return &storev1.KeyValue{Key: "/machines/" + name, Value: b, Version: version}
}

func put(kv *storev1.KeyValue) *storev1.Event {
	return &storev1.Event{Type: storev1.EventType_EVENT_TYPE_PUT, Kv: kv}
}

func del(key string, version uint64) *storev1.Event {
	return &storev1.Event{Type: storev1.EventType_EVENT_TYPE_DELETE, Kv: &storev1.KeyValue{Key: key, Version: version}}
}

func TestInformerListWatchRelist(t *testing.T) {
	// After the compaction the store has moved on: the relist must bring
	// the cache to it, with handlers for the differences only.
	src := &scriptedSource{states: []map[string]*storev1.KeyValue{{
		"/machines/a": machineKV("a", 1, false),
		"/machines/b": machineKV("b", 2, false),
	}, {
		"/machines/a": machineKV("a", 4, true),
		"/machines/c": machineKV("c", 7, false),
		"/machines/d": machineKV("d", 6, false),
	}}}
	src.streams = [][]*storev1.WatchResponse{
		{{Events: []*storev1.Event{put(machineKV("c", 3, false)), put(machineKV("a", 4, true)), put(machineKV("a", 1, false))}},
			{Events: []*storev1.Event{del("/machines/b", 5)}}},
		nil,
	}
	src.ends = []error{errCompacted, nil}
	var mu sync.Mutex
	var log []string
	record := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	in := NewInformer(InformerConfig[*troupev1.Machine]{
		Prefix: "/machines/", List: src.list, Watch: src.watch,
		IsCompacted: func(err error) bool { return errors.Is(err, errCompacted) },
		Decode: func(_ string, v []byte, ver uint64) (*troupev1.Machine, error) {
			m := &troupev1.Machine{}
			if err := proto.Unmarshal(v, m); err != nil {
				return nil, err
			}
			m.Metadata.Version = ver
			return m, nil
		},
		Indexes: map[string]IndexFunc[*troupev1.Machine]{
			"schedulable": func(m *troupev1.Machine) []string { return []string{fmt.Sprint(!m.GetSpec().GetUnschedulable())} },
		},
		RetryDelay: time.Millisecond,
	})
	in.AddHandler(Handler[*troupev1.Machine]{
		OnAdd: func(k string, m *troupev1.Machine) { record("add " + k) },
		OnUpdate: func(k string, old, cur *troupev1.Machine) {
			record(fmt.Sprintf("update %s %d->%d", k, old.GetMetadata().GetVersion(), cur.GetMetadata().GetVersion()))
		},
		OnDelete: func(k string, old *troupev1.Machine) { record("delete " + k) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	if err := in.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "the cache to relist and converge", func() (bool, string) {
		return in.Relists() > 0 && in.Indexer().Len() == 3 && len(in.Indexer().IndexKeys("schedulable", "true")) == 2,
			fmt.Sprintf("%d relists, keys %v", in.Relists(), in.Indexer().Keys())
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	got := fmt.Sprint(log)
	for _, want := range []string{"update /machines/a 1->4", "add /machines/c", "delete /machines/b", "update /machines/c 3->7", "add /machines/d"} {
		if !contains(log, want) {
			t.Errorf("handler calls %s lack %q", got, want)
		}
	}
	if contains(log, "update /machines/a 4->1") {
		t.Errorf("a stale event was applied: %s", got)
	}
	if m, _ := in.Indexer().Get("/machines/a"); !m.GetSpec().GetUnschedulable() || m.GetMetadata().GetVersion() != 4 {
		t.Errorf("machine a: %v", m)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(in.Collector())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP troupe_cache_objects Objects held by a client cache.
# TYPE troupe_cache_objects gauge
troupe_cache_objects{prefix="/machines/"} 3
# HELP troupe_cache_relists_total Relists of a client cache (compacted cursor, broken watch).
# TYPE troupe_cache_relists_total counter
troupe_cache_relists_total{prefix="/machines/"} 1
# HELP troupe_cache_synced 1 once a client cache has applied its first list.
# TYPE troupe_cache_synced gauge
troupe_cache_synced{prefix="/machines/"} 1
`), "troupe_cache_objects", "troupe_cache_relists_total", "troupe_cache_synced"); err != nil {
		t.Error(err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestInformerDecodesOnlyWhatIsRead: Decode checks each value once, as it
// arrives; the old objects handlers are told of, and Get, go through
// Reread, and an update's old object is decoded only for a handler that
// reads it.
func TestInformerDecodesOnlyWhatIsRead(t *testing.T) {
	for _, tc := range []struct {
		name          string
		othersReadOld bool  // a second handler reads the old object of updates
		wantRereads   int64 // by the updates and the deletion
	}{
		{"no handler reads an update's old", false, 1},
		{"a handler reads an update's old", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &scriptedSource{states: []map[string]*storev1.KeyValue{{"/machines/a": machineKV("a", 1, false)}}}
			src.streams = [][]*storev1.WatchResponse{{{Events: []*storev1.Event{
				put(machineKV("a", 2, true)), put(machineKV("a", 3, false)), del("/machines/a", 4), put(machineKV("b", 5, false)),
			}}}}
			src.ends = []error{nil}
			var decodes, rereads atomic.Int64
			unmarshal := func(calls *atomic.Int64) DecodeFunc[*troupev1.Machine] {
				return func(_ string, v []byte, ver uint64) (*troupev1.Machine, error) {
					calls.Add(1)
					m := &troupev1.Machine{}
					if err := proto.Unmarshal(v, m); err != nil {
						return nil, err
					}
					m.Metadata.Version = ver
					return m, nil
				}
			}
			in := NewInformer(InformerConfig[*troupev1.Machine]{
				Prefix: "/machines/", List: src.list, Watch: src.watch, IsCompacted: func(error) bool { return false },
				Decode: unmarshal(&decodes), Reread: unmarshal(&rereads),
			})
			var mu sync.Mutex
			var log []string
			record := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
			in.AddHandler(Handler[*troupev1.Machine]{
				OnUpdate:         func(k string, old, cur *troupev1.Machine) { record(fmt.Sprintf("update %s %v", k, old != nil)) },
				UpdateIgnoresOld: true,
				OnDelete: func(k string, old *troupev1.Machine) {
					record(fmt.Sprintf("delete %s %d", k, old.GetMetadata().GetVersion()))
				},
			})
			if tc.othersReadOld {
				in.AddHandler(Handler[*troupev1.Machine]{OnUpdate: func(string, *troupev1.Machine, *troupev1.Machine) {}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- in.Run(ctx) }()
			wait.Until(ctx, t, "the events to be applied", func() (bool, string) {
				return in.EventsApplied() == 4, fmt.Sprintf("%d events applied", in.EventsApplied())
			})
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			oldGiven := tc.othersReadOld
			want := fmt.Sprint([]string{fmt.Sprintf("update /machines/a %v", oldGiven), fmt.Sprintf("update /machines/a %v", oldGiven), "delete /machines/a 3"})
			if got := fmt.Sprint(log); got != want {
				t.Errorf("handler calls %s, want %s", got, want)
			}
			if decodes.Load() != 4 || rereads.Load() != tc.wantRereads {
				t.Errorf("%d decodes, %d rereads; want 4 (the list's and each put's) and %d", decodes.Load(), rereads.Load(), tc.wantRereads)
			}
			if m, ok := in.Indexer().Get("/machines/b"); !ok || m.GetMetadata().GetVersion() != 5 || rereads.Load() != tc.wantRereads+1 {
				t.Errorf("Get: %v, %v after %d rereads; want b at version 5, read back by Reread", m, ok, rereads.Load())
			}
		})
	}
}
