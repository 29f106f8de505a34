package cache_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// replay is a watch that hands out its responses, then waits for the end.
type replay struct {
	ctx   context.Context
	resps []*storev1.WatchResponse
}

func (r *replay) Next() (*storev1.WatchResponse, error) {
	if len(r.resps) == 0 {
		<-r.ctx.Done()
		return nil, r.ctx.Err()
	}
	resp := r.resps[0]
	r.resps = r.resps[1:]
	return resp, nil
}

func (r *replay) Close() {}

// BenchmarkInformerTaskEvents is a scheduler's task cache at work: each
// op is a task's two events, its submission and its binding, applied to
// a cache with the task indexes and a handler that, as the scheduler's,
// reads the new object only; "checked" checks again each value read back
// (no Reread) and decodes old objects (no UpdateIgnoresOld).
func BenchmarkInformerTaskEvents(b *testing.B) {
	b.Run("reread", func(b *testing.B) { benchmarkTaskEvents(b, true) })
	b.Run("checked", func(b *testing.B) { benchmarkTaskEvents(b, false) })
}

func benchmarkTaskEvents(b *testing.B, reread bool) {
	const perResp = 100
	add := make([]*storev1.Event, b.N)
	bind := make([]*storev1.Event, b.N)
	for i := range b.N {
		job := fmt.Sprintf("job%06d", i/perResp)
		t := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, int32(i%perResp)), Namespace: "bench"},
			Spec: &troupev1.TaskSpec{Job: job, Index: int32(i % perResp), Scheduler: "batch",
				Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 500, "memory": 1 << 30}}},
			Status: &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING}}
		key, err := clientlib.Tasks.Key(t)
		if err != nil {
			b.Fatal(err)
		}
		v, err := clientlib.Encode(t)
		if err != nil {
			b.Fatal(err)
		}
		add[i] = &storev1.Event{Type: storev1.EventType_EVENT_TYPE_PUT, Kv: &storev1.KeyValue{Key: key, Value: v, Version: uint64(2*i + 1)}}
		t.Binding = &troupev1.TaskBinding{Machine: fmt.Sprintf("m%05d", i%10000)}
		if v, err = clientlib.Encode(t); err != nil {
			b.Fatal(err)
		}
		bind[i] = &storev1.Event{Type: storev1.EventType_EVENT_TYPE_PUT, Kv: &storev1.KeyValue{Key: key, Value: v, Version: uint64(2*i + 2)}}
	}
	// Readable values, and the validator built before the clock starts.
	if _, err := clientlib.DecodeAt(clientlib.Tasks, bind[0].GetKv().GetKey(), bind[0].GetKv().GetValue(), 1); err != nil {
		b.Fatal(err)
	}
	var resps []*storev1.WatchResponse
	for i := 0; i < b.N; i += perResp {
		end := min(i+perResp, b.N)
		resps = append(resps, &storev1.WatchResponse{Events: add[i:end]}, &storev1.WatchResponse{Events: bind[i:end]})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := cache.InformerConfig[*troupev1.Task]{
		Prefix: clientlib.Tasks.Prefix,
		List: func(context.Context, string) ([]*storev1.KeyValue, []byte, error) {
			return nil, nil, nil
		},
		Watch:       func(ctx context.Context, _ string, _ []byte) cache.Stream { return &replay{ctx: ctx, resps: resps} },
		IsCompacted: func(error) bool { return false },
		Decode: func(key string, value []byte, version uint64) (*troupev1.Task, error) {
			return clientlib.DecodeAt(clientlib.Tasks, key, value, version)
		},
		Indexes: clientlib.TaskIndexes(),
	}
	if reread {
		cfg.Reread = func(_ string, value []byte, version uint64) (*troupev1.Task, error) {
			return clientlib.Decode(clientlib.Tasks, value, version)
		}
	}
	in := cache.NewInformer(cfg)
	last := bind[b.N-1].GetKv().GetKey()
	done := make(chan struct{})
	in.AddHandler(cache.Handler[*troupev1.Task]{
		OnAdd: func(string, *troupev1.Task) {},
		OnUpdate: func(key string, _, _ *troupev1.Task) {
			if key == last {
				close(done)
			}
		},
		UpdateIgnoresOld: reread,
		OnDelete:         func(string, *troupev1.Task) {},
	})
	b.ReportAllocs()
	b.ResetTimer()
	go in.Run(ctx)
	<-done
}
