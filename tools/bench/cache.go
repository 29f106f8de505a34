package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// CacheResult is what `troupe bench cache` measured.
type CacheResult struct {
	Machines, Tasks int
	// HeapBytes is the live heap the two caches add once synced; per
	// object, it is what one cached object costs.
	HeapBytes      uint64
	BytesPerObject float64
	// EventsPerSec is how fast the task cache applies watch events
	// (decode, index, handler) fed from memory, so the store's commit rate
	// does not bound it.
	EventsPerSec float64
	SyncSeconds  float64
}

// benchMachine and benchTask are objects of realistic size.
func benchMachine(i int) *troupev1.Machine {
	return &troupev1.Machine{
		Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%05d", i), Uid: fmt.Sprintf("%032x", i), Version: 0,
			Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%4), "rack": fmt.Sprintf("r%03d", i%250), "arch": "amd64"}},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 32000, "memory": 128 << 30},
			AgentAddress: fmt.Sprintf("10.0.%d.%d:7300", i/250, i%250)},
		Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY},
	}
}

func benchTask(i, machines int) *troupev1.Task {
	job := fmt.Sprintf("job%04d", i/100)
	return &troupev1.Task{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, int32(i%100)), Namespace: "bench", Uid: fmt.Sprintf("%032x", i),
			Labels: map[string]string{"app": job}},
		Spec: &troupev1.TaskSpec{Job: job, Index: int32(i % 100), Type: troupev1.JobType_JOB_TYPE_BATCH, Priority: 100, Scheduler: "batch",
			Template: &troupev1.TaskTemplate{Command: "/usr/bin/worker", Args: []string{"--shard", fmt.Sprint(i)},
				Requests: map[string]int64{"cpu": 1000, "memory": 2 << 30}}},
		Binding: &troupev1.TaskBinding{Machine: fmt.Sprintf("m%05d", i%machines), Scheduler: "batch-0"},
	}
}

// RunCacheBench fills an in-memory store with machines and tasks, syncs a
// machine cache and a task cache (with the scheduler's indexes) from it,
// and measures their heap, then feeds the task cache one update event per
// task.
func RunCacheBench(ctx context.Context, machines, tasks int) (CacheResult, error) {
	res := CacheResult{Machines: machines, Tasks: tasks}
	store := memstore.New(time.Now, time.Minute)
	if err := fill(ctx, store, machines, tasks); err != nil {
		return res, err
	}
	before := liveHeap()
	start := time.Now()
	mc := cache.NewInformer(cache.InformerConfig[*troupev1.Machine]{
		Prefix: clientlib.Machines.Prefix, List: store.List, Watch: idleWatch, IsCompacted: clientlib.IsCompacted,
		Decode: func(key string, v []byte, ver uint64) (*troupev1.Machine, error) {
			return clientlib.DecodeAt(clientlib.Machines, key, v, ver)
		},
	})
	feed := make(chan *storev1.WatchResponse, 64)
	tc := cache.NewInformer(cache.InformerConfig[*troupev1.Task]{
		Prefix: clientlib.Tasks.Prefix, List: store.List, IsCompacted: clientlib.IsCompacted,
		Watch: func(ctx context.Context, _ string, _ []byte) cache.Stream { return &chanStream{ctx: ctx, ch: feed} },
		Decode: func(key string, v []byte, ver uint64) (*troupev1.Task, error) {
			return clientlib.DecodeAt(clientlib.Tasks, key, v, ver)
		},
		Indexes: clientlib.TaskIndexes(),
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go mc.Run(runCtx)
	go tc.Run(runCtx)
	if err := mc.WaitForSync(ctx); err != nil {
		return res, err
	}
	if err := tc.WaitForSync(ctx); err != nil {
		return res, err
	}
	res.SyncSeconds = time.Since(start).Seconds()
	res.HeapBytes = liveHeap() - before
	res.BytesPerObject = float64(res.HeapBytes) / float64(machines+tasks)

	// One update per task, a response of 100 events at a time, as a watch
	// under load delivers them.
	const batch = 100
	base := uint64(1 << 40)
	var events []*storev1.WatchResponse
	for i := 0; i < tasks; i += batch {
		resp := &storev1.WatchResponse{}
		for j := i; j < min(i+batch, tasks); j++ {
			t := benchTask(j, machines)
			t.Binding.Machine = fmt.Sprintf("m%05d", (j+1)%machines)
			key, _ := clientlib.Tasks.Key(t)
			value, err := clientlib.Encode(t)
			if err != nil {
				return res, err
			}
			resp.Events = append(resp.Events, &storev1.Event{Type: storev1.EventType_EVENT_TYPE_PUT,
				Kv: &storev1.KeyValue{Key: key, Value: value, Version: base + uint64(j)}})
		}
		events = append(events, resp)
	}
	applied := tc.EventsApplied()
	start = time.Now()
	go func() {
		for _, r := range events {
			select {
			case feed <- r:
			case <-runCtx.Done():
				return
			}
		}
	}()
	for tc.EventsApplied()-applied < uint64(tasks) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		runtime.Gosched()
	}
	res.EventsPerSec = float64(tasks) / time.Since(start).Seconds()
	return res, nil
}

func fill(ctx context.Context, s *memstore.Store, machines, tasks int) error {
	if err := putAll(ctx, s, machines, func(g *clientlib.Group, i int) { clientlib.PutObject(g, clientlib.Machines, benchMachine(i)) }); err != nil {
		return err
	}
	return putAll(ctx, s, tasks, func(g *clientlib.Group, i int) { clientlib.PutObject(g, clientlib.Tasks, benchTask(i, machines)) })
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// idleWatch is a stream with no events.
func idleWatch(ctx context.Context, _ string, _ []byte) cache.Stream {
	return &chanStream{ctx: ctx}
}

type chanStream struct {
	ctx context.Context
	ch  chan *storev1.WatchResponse
}

func (s *chanStream) Next() (*storev1.WatchResponse, error) {
	select {
	case r := <-s.ch:
		return r, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *chanStream) Close() {}
