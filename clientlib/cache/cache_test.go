package cache

import (
	"fmt"
	"google.golang.org/protobuf/proto"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// get takes a key from q within a deadline.
func get(t *testing.T, q *WorkQueue) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		k, _ := q.Get()
		ch <- k
	}()
	select {
	case k := <-ch:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no key within 10s")
		return ""
	}
}

func TestWorkQueueDedupAndProcessing(t *testing.T) {
	q := NewWorkQueue(DefaultQueueConfig())
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	if q.Len() != 2 {
		t.Fatalf("len %d after adding a, b, a", q.Len())
	}
	k := get(t, q)
	if k != "a" {
		t.Fatalf("first key %q", k)
	}
	q.Add("a") // while processing: queued again at Done, not handed out twice
	if k := get(t, q); k != "b" {
		t.Fatalf("second key %q, want b (a is being processed)", k)
	}
	if q.Len() != 0 {
		t.Fatal("a was queued while being processed")
	}
	q.Done("a")
	if k := get(t, q); k != "a" {
		t.Fatalf("after Done: %q, want a again", k)
	}
	q.Done("a")
	q.Done("b")
	q.ShutDown()
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get after shutdown of an empty queue")
	}
}

func TestWorkQueueRateLimit(t *testing.T) {
	clock := cachetest.NewClock(time.Unix(1000, 0))
	q := NewWorkQueue(QueueConfig{BaseDelay: 10 * time.Millisecond, MaxDelay: 40 * time.Millisecond, Clock: clock})
	defer q.ShutDown()
	for i, want := range []time.Duration{10, 20, 40, 40} {
		q.AddRateLimited("k")
		if q.Failures("k") != i+1 {
			t.Fatalf("failures %d, want %d", q.Failures("k"), i+1)
		}
		wait.Until(t.Context(), t, "the queue to wait on the clock", func() bool { return clock.Timers() > 0 })
		clock.Advance(want*time.Millisecond - time.Millisecond)
		if q.Len() != 0 {
			t.Fatalf("attempt %d: queued before its %v backoff", i, want)
		}
		clock.Advance(time.Millisecond)
		wait.Until(t.Context(), t, fmt.Sprintf("attempt %d queued after its backoff", i), func() bool { return q.Len() == 1 })
		q.Done(get(t, q))
	}
	q.Forget("k")
	if q.Failures("k") != 0 {
		t.Fatal("Forget kept the failures")
	}
}

func TestIndexer(t *testing.T) {
	decode := func(_ string, v []byte, version uint64) (*troupev1.Task, error) {
		t := &troupev1.Task{}
		if err := proto.Unmarshal(v, t); err != nil {
			return nil, err
		}
		t.Metadata.Version = version
		return t, nil
	}
	x := NewIndexer(decode, map[string]IndexFunc[*troupev1.Task]{
		"job": func(t *troupev1.Task) []string {
			return []string{t.GetMetadata().GetNamespace() + "/" + t.GetSpec().GetJob()}
		},
		"machine": func(t *troupev1.Task) []string { return nonEmpty(t.GetBinding().GetMachine()) },
	})
	task := func(job string, i int32, machine string) *troupev1.Task {
		tk := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("%s-%d", job, i), Namespace: "ns"}, Spec: &troupev1.TaskSpec{Job: job, Index: i}}
		if machine != "" {
			tk.Binding = &troupev1.TaskBinding{Machine: machine}
		}
		return tk
	}
	size := map[string]int{}
	set := func(key string, tk *troupev1.Task, version uint64) {
		b, err := proto.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		size[key] = len(b)
		prev, existed := x.held(key)
		x.set(key, tk, b, version, prev, existed)
	}
	set("/tasks/ns/a/0", task("a", 0, ""), 1)
	set("/tasks/ns/a/1", task("a", 1, "m1"), 2)
	set("/tasks/ns/b/0", task("b", 0, "m1"), 3)
	if got := x.IndexKeys("job", "ns/a"); fmt.Sprint(got) != "[/tasks/ns/a/0 /tasks/ns/a/1]" {
		t.Fatalf("tasks of a: %v", got)
	}
	if got := x.IndexKeys("machine", "m1"); len(got) != 2 {
		t.Fatalf("tasks on m1: %v", got)
	}
	// Rebinding moves the task between index values.
	set("/tasks/ns/b/0", task("b", 0, "m2"), 4)
	if got := x.IndexKeys("machine", "m1"); fmt.Sprint(got) != "[/tasks/ns/a/1]" {
		t.Fatalf("m1 after rebinding: %v", got)
	}
	// Copies: changing what Get returned changes nothing in the cache.
	got, _ := x.Get("/tasks/ns/a/1")
	got.Binding.Machine = "elsewhere"
	if again, _ := x.Get("/tasks/ns/a/1"); again.GetBinding().GetMachine() != "m1" {
		t.Fatal("the cache handed out its own object")
	}
	x.delete("/tasks/ns/a/1")
	if x.Len() != 2 || len(x.IndexKeys("machine", "m1")) != 0 || len(x.ByIndex("job", "ns/a")) != 1 {
		t.Fatalf("after delete: len %d", x.Len())
	}
	if want := size["/tasks/ns/a/0"] + size["/tasks/ns/b/0"]; x.Bytes() != want {
		t.Fatalf("%d bytes held, want %d", x.Bytes(), want)
	}
	if got, ok := x.Get("/tasks/ns/b/0"); !ok || got.GetMetadata().GetVersion() != 4 || got.GetBinding().GetMachine() != "m2" {
		t.Fatalf("Get: %v, %v; want the task at version 4 on m2", got, ok)
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
