package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// seedLarge fills s with machines machines and jobs jobs of perJob tasks
// each, every task bound, their CPU on the machines' counters: in big
// commits, as no component would, for speed.
func seedLarge(ctx context.Context, tb testing.TB, s *memstore.Store, machines, jobs, perJob int) {
	tb.Helper()
	const batch = 500
	txn := clientlib.NewTxn(s)
	g := txn.Group()
	n := 0
	flush := func(force bool) {
		if n < batch && !(force && n > 0) {
			return
		}
		if out, err := txn.Commit(ctx); err != nil || !out.Committed() {
			tb.Fatalf("seeding: %v %v", err, out)
		}
		txn, n = clientlib.NewTxn(s), 0
		g = txn.Group()
	}
	for i := range machines {
		clientlib.PutObject(g, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("hollow-%05d", i)},
			Spec:   &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 16000, "memory": 64 << 30}},
			Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}})
		n++
		flush(false)
	}
	for j := range jobs {
		name := fmt.Sprintf("job-%04d", j)
		clientlib.PutObject(g, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:   &troupev1.JobSpec{Scheduler: "batch", Count: int32(perJob), Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 1000}}},
			Status: &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_RUNNING, Running: int32(perJob)}})
		n++
		for i := range perJob {
			machine := fmt.Sprintf("hollow-%05d", (j*perJob+i)%machines)
			clientlib.PutObject(g, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(name, int32(i)), Namespace: "default"},
				Spec: &troupev1.TaskSpec{Job: name, Index: int32(i), Scheduler: "batch", Submitted: timestamppb.New(epoch),
					Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 1000}}},
				Binding: &troupev1.TaskBinding{Machine: machine, Scheduler: "batch-0", BoundAt: timestamppb.New(epoch.Add(time.Second))},
				Status:  &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_RUNNING}})
			g.Add(clientlib.AllocKey(machine, "cpu"), 1000, 0, 16000)
			n++
			flush(false)
		}
	}
	flush(true)
}

// The pages of a cell of 10,000 machines and 100,000 tasks: how long the
// view takes to read the cell, what a page costs to build and render,
// and how much a viewer receives. go test -run '^$' -bench Large
// ./tools/ui; figures in DESIGN.md (The web view).
func BenchmarkLargeCell(b *testing.B) {
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	s := memstore.New(func() time.Time { return epoch }, time.Hour)
	seedLarge(ctx, b, s, 10000, 100, 1000)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cfg := DefaultConfig()
	cfg.Now = func() time.Time { return epoch }
	agg, err := NewAggregator(s, cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(agg, cfg)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	go agg.Run(ctx)
	if err := agg.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	synced := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	f := agg.grid()
	full, _ := json.Marshal(gridMessage{Gen: f.gen, Names: f.names, Full: f.cells})
	cells, _ := json.Marshal(gridMessage{Gen: f.gen, Full: f.cells})
	b.Logf("read the cell in %v, holding %d MiB; grid %d machines: %d KiB with names, %d KiB without",
		synced.Round(time.Millisecond), (after.HeapAlloc-before.HeapAlloc)>>20, len(f.names), len(full)>>10, len(cells)>>10)
	for _, path := range []string{"", "job/default/job-0042", "machine/hollow-00042", "scheduler/batch-0"} {
		b.Run("page="+path, func(b *testing.B) {
			var size int
			for b.Loop() {
				p, _, err := srv.build(path, url.Values{})
				if err != nil {
					b.Fatal(err)
				}
				size = 0
				for _, s := range p.Sections {
					size += len(s.HTML)
				}
			}
			b.ReportMetric(float64(size)/1024, "KiB/page")
		})
	}
	b.Run("grid", func(b *testing.B) {
		for b.Loop() {
			agg.grid()
		}
	})
}
