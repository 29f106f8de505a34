package clientlib_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// benchTask is a task as troupe bench schedule submits it, bound as a
// scheduler binds it.
func benchTask() *troupev1.Task {
	now := timestamppb.New(time.Unix(1700000000, 0))
	return &troupev1.Task{
		Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName("job000042", 17), Namespace: "bench", Version: 1234},
		Spec: &troupev1.TaskSpec{Job: "job000042", Index: 17, Type: troupev1.JobType_JOB_TYPE_BATCH, Scheduler: "batch",
			Submitted: now, Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 500, "memory": 1 << 30}}},
		Binding: &troupev1.TaskBinding{Machine: "m00042", Scheduler: "batch-0", BoundAt: now},
		Status:  &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_BOUND},
	}
}

// BenchmarkTaskPath is what a placement's task costs the client library
// at each step: a scheduler readying its write, a cache reading it.
func BenchmarkTaskPath(b *testing.B) {
	t := benchTask()
	value, err := clientlib.Encode(t)
	if err != nil {
		b.Fatal(err)
	}
	key, err := clientlib.Tasks.Key(t)
	if err != nil {
		b.Fatal(err)
	}
	if err := clientlib.Validate(clientlib.Tasks, t); err != nil {
		b.Fatal(err)
	}
	b.Run("EncodeObject", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			clientlib.EncodeObject(nil, clientlib.Tasks, t)
		}
	})
	b.Run("Validate", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = clientlib.Validate(clientlib.Tasks, t)
		}
	})
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = clientlib.Encode(t)
		}
	})
	b.Run("DecodeAt", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = clientlib.DecodeAt(clientlib.Tasks, key, value, 1234)
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = clientlib.Decode(clientlib.Tasks, value, 1234)
		}
	})
}

func BenchmarkDecodeCounter(b *testing.B) {
	key, value := clientlib.AllocKey("m00042", "cpu"), []byte("123500")
	b.ReportAllocs()
	for range b.N {
		if _, err := clientlib.DecodeCounter(key, value, 99); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlacementTxn builds a scheduler's commit of a job of 100
// tasks, fine-grained: per placement, the job's stop key, the task and
// its Binding, and two counters (per op: one placement).
func BenchmarkPlacementTxn(b *testing.B) {
	value := []byte("an encoded task, or binding")
	b.ReportAllocs()
	for i := 0; i < b.N; i += 100 {
		tx := clientlib.NewTxn(nil)
		for j := range min(100, b.N-i) {
			g := tx.Group()
			clientlib.RequireJobRunning(g, "bench", "job000042")
			g.Require("/tasks/bench/job000042/7", uint64(j)).Put("/tasks/bench/job000042/7", value)
			g.Require("/bindings/m1/bench/job000042/7", 0).Put("/bindings/m1/bench/job000042/7", value)
			g.Add("/alloc/m1/cpu", 500, 0, 32000).Add("/alloc/m1/memory", 1<<30, 0, 128<<30)
		}
	}
}
