package clientlib_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func testTask(job string, i int32, machine string) *troupev1.Task {
	t := &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, i), Namespace: "ns"}, Spec: &troupev1.TaskSpec{
		Job: job, Index: i, Scheduler: "batch", Template: &troupev1.TaskTemplate{Command: "/bin/true"}}}
	if machine != "" {
		t.Binding = &troupev1.TaskBinding{Machine: machine}
	}
	return t
}

// versionLog records the versions handlers saw per key, to check that a
// cache never goes back in time.
type versionLog struct {
	mu   sync.Mutex
	seen map[string][]uint64
}

func (l *versionLog) handler() cache.Handler[*troupev1.Task] {
	rec := func(k string, v uint64) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.seen[k] = append(l.seen[k], v)
	}
	return cache.Handler[*troupev1.Task]{
		OnAdd:    func(k string, t *troupev1.Task) { rec(k, t.GetMetadata().GetVersion()) },
		OnUpdate: func(k string, _, t *troupev1.Task) { rec(k, t.GetMetadata().GetVersion()) },
	}
}

func (l *versionLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, vs := range l.seen {
		if !slices.IsSorted(vs) || len(slices.Compact(slices.Clone(vs))) != len(vs) {
			t.Errorf("%s: versions seen out of order or twice: %v", k, vs)
		}
	}
}

// converged waits until the cache holds exactly what the store does.
func converged(ctx context.Context, t *testing.T, c *clientlib.Client, inf *cache.Informer[*troupev1.Task]) {
	t.Helper()
	wait.Until(ctx, t, "cache to converge", func() (bool, string) {
		want, _, err := clientlib.List(ctx, c, clientlib.Tasks, "")
		if err != nil {
			return false, err.Error()
		}
		got := inf.Indexer().List()
		if len(got) != len(want) {
			return false, fmt.Sprintf("cache has %d tasks, store %d", len(got), len(want))
		}
		for i := range want {
			if got[i].GetMetadata().GetName() != want[i].GetMetadata().GetName() || got[i].GetMetadata().GetVersion() != want[i].GetMetadata().GetVersion() {
				return false, fmt.Sprintf("task %d: cache %s@%d, store %s@%d", i, got[i].GetMetadata().GetName(), got[i].GetMetadata().GetVersion(),
					want[i].GetMetadata().GetName(), want[i].GetMetadata().GetVersion())
			}
		}
		return true, ""
	})
}

// write creates, rebinds and deletes tasks of job from several writers.
func write(ctx context.Context, t *testing.T, c *clientlib.Client, job string, writers, each int) {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				idx := int32(w*each + i)
				created, err := clientlib.Create(ctx, c, clientlib.Tasks, testTask(job, idx, ""))
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				created.Binding = &troupev1.TaskBinding{Machine: fmt.Sprintf("m%d", idx%3)}
				updated, err := clientlib.Update(ctx, c, clientlib.Tasks, created)
				if err != nil {
					t.Errorf("bind: %v", err)
					return
				}
				if i%4 == 0 {
					if err := clientlib.Delete(ctx, c, clientlib.Tasks, updated); err != nil {
						t.Errorf("delete: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
}

// The cache converges to the store's state under concurrent writes, its
// indexes follow, and it keeps going when the node its watch uses stops.
func TestInformerConvergesAndFailsOver(t *testing.T) {
	cc := startClientCluster(t, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	reader, writer := cc.client(nil, nil), cc.client(nil, nil)
	write(ctx, t, writer, "before", 2, 5)
	inf := clientlib.NewInformer(reader, clientlib.Tasks, "", clientlib.TaskIndexes())
	vlog := &versionLog{seen: map[string][]uint64{}}
	inf.AddHandler(vlog.handler())
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	write(ctx, t, writer, "during", 4, 8)
	converged(ctx, t, reader, inf)

	// Stop the node the reader is talking to (its watch is there), keep
	// writing, and the cache follows through another node.
	st, err := reader.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cc.StopNode(int(st.GetReplicaId()) - 1)
	write(ctx, t, writer, "after", 2, 8)
	converged(ctx, t, reader, inf)

	if n := len(inf.Indexer().IndexKeys(clientlib.IndexJob, "ns/during")); n != 4*8-8 {
		t.Errorf("index job=ns/during holds %d tasks, want %d", n, 4*8-8)
	}
	if n := len(inf.Indexer().IndexKeys(clientlib.IndexScheduler, "batch")); n != 0 {
		t.Errorf("%d unbound tasks indexed as pending", n)
	}
	vlog.check(t)
	stop()
	<-done
}

// A cache whose watch cursor was compacted relists and converges.
func TestInformerRecoversFromCompaction(t *testing.T) {
	cc := startClientCluster(t, 1, func(nc *node.Config) {
		nc.Server.LogRetention = 5
		nc.Watch.RingRevisions = 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	c := cc.client(nil, nil)
	write(ctx, t, c, "a", 1, 3)
	// The first watch is held back until the store has moved far past the
	// list's cursor.
	release := make(chan struct{})
	var once sync.Once
	inf := cache.NewInformer(cache.InformerConfig[*troupev1.Task]{
		Prefix: clientlib.Tasks.Prefix,
		List:   c.List,
		Watch: func(ctx context.Context, prefix string, cursor []byte) cache.Stream {
			once.Do(func() { <-release })
			return c.Watch(ctx, prefix, cursor)
		},
		IsCompacted: func(err error) bool { return clientlib.IsCompacted(err) },
		Decode: func(_ string, v []byte, ver uint64) (*troupev1.Task, error) {
			return clientlib.Decode(clientlib.Tasks, v, ver)
		},
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go inf.Run(runCtx)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	write(ctx, t, c, "b", 1, 12)
	close(release)
	converged(ctx, t, c, inf)
	if inf.Relists() == 0 {
		t.Fatal("the cache converged without relisting: the cursor was not compacted")
	}
}

// A policy stored through one client is enforced by another client that
// follows the cell's policies, including a policy added after it started;
// before the cell stores any, the default job limits hold.
func TestStartPoliciesAcrossClients(t *testing.T) {
	cc := startClientCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(t.Context(), clientTestTimeout)
	defer cancel()
	admin, user := cc.client(nil, nil), cc.client(nil, nil)
	if err := user.StartPolicies(ctx); err != nil {
		t.Fatal(err)
	}
	huge := &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "huge", Namespace: "x"}, Spec: &troupev1.JobSpec{
		Count: clientlib.DefaultMaxTasks + 1, Template: &troupev1.TaskTemplate{Command: "/bin/true"}}}
	_, err := clientlib.Create(ctx, user, clientlib.Jobs, huge)
	wantInvalid(t, "job over the default limits", err, "spec.count", "policy/"+clientlib.JobLimitsPolicy)
	if _, err := clientlib.Create(ctx, admin, clientlib.ValidationPolicies, &troupev1.ValidationPolicy{
		Metadata: &troupev1.ObjectMeta{Name: "no-root"},
		Spec: &troupev1.ValidationPolicySpec{Kinds: []string{"Task"}, Rules: []*troupev1.ValidationRule{{
			Expression: "object.spec.template.command != '/bin/rm'", Message: "no rm", FieldPath: "spec.template.command"}}},
	}); err != nil {
		t.Fatal(err)
	}
	bad := testTask("x", 0, "")
	bad.Spec.Template.Command = "/bin/rm"
	wait.Until(ctx, t, "the policy to reach the second client", func() (bool, string) {
		loaded := user.Validator().Loaded()
		return loaded["no-root"] != 0, fmt.Sprint(loaded)
	})
	_, err = clientlib.Create(ctx, user, clientlib.Tasks, bad)
	wantInvalid(t, "task against the stored policy", err, "spec.template.command", "policy/no-root")
	if _, err := clientlib.Create(ctx, user, clientlib.Tasks, testTask("x", 1, "")); err != nil {
		t.Fatalf("task within the policy: %v", err)
	}
}
