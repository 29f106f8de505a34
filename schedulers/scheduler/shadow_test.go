package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// tickClock moves on by tick at every reading: a decision, which reads
// the clock before and after, takes exactly one tick.
type tickClock struct {
	mu   sync.Mutex
	now  time.Time
	tick time.Duration
}

func (c *tickClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.tick)
	return c.now
}

func (c *tickClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.Now()
	}
	return ch
}

// shadowLog keeps a shadow's decisions as Observe reports them.
type shadowLog struct {
	mu sync.Mutex
	ds []scheduler.ShadowDecision
}

func (l *shadowLog) observe(d scheduler.ShadowDecision) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

func (l *shadowLog) decisions() []scheduler.ShadowDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ds)
}

// perJob counts the decisions by job.
func (l *shadowLog) perJob() map[string]int {
	out := map[string]int{}
	for _, d := range l.decisions() {
		out[d.Job]++
	}
	return out
}

// gate holds each commit of a real scheduler until the test lets one
// through (an error once ctx ends).
type gate struct {
	clientlib.Store
	ctx  context.Context
	pass chan struct{}
}

func (g *gate) Commit(ctx context.Context, req *storev1.CommitRequest) (*storev1.CommitResponse, error) {
	select {
	case <-g.pass:
	case <-g.ctx.Done():
		return nil, g.ctx.Err()
	}
	return g.Store.Commit(ctx, req)
}

func shadowProfile(t *testing.T, kind string, seed uint64) (framework.Profile, framework.Modes) {
	t.Helper()
	prof, modes, err := profiles.New(kind, rand.New(rand.NewPCG(seed, seed)))
	if err != nil {
		t.Fatal(err)
	}
	return prof, modes
}

func commitTxn(ctx context.Context, t *testing.T, c clientlib.Store, what string, build func(tx *clientlib.Txn)) {
	t.Helper()
	tx := clientlib.NewTxn(c)
	build(tx)
	out, err := tx.Commit(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func shadowMachine(name string, cpu int64) *troupev1.Machine {
	return &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: name},
		Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": cpu, "memory": 8 << 30}}}
}

// submitTasks creates n pending tasks of job for kind, asking cpu each,
// in one commit.
func submitTasks(ctx context.Context, t *testing.T, c clientlib.Store, kind, job string, n int, cpu int64) {
	t.Helper()
	commitTxn(ctx, t, c, "submit "+job, func(tx *clientlib.Txn) {
		for i := range n {
			clientlib.PutObject(tx.Group(), clientlib.Tasks, &troupev1.Task{
				Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(job, int32(i)), Namespace: "ns"},
				Spec: &troupev1.TaskSpec{Job: job, Index: int32(i), Scheduler: kind,
					Template: &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": cpu, "memory": 64 << 20}}},
			})
		}
	})
}

// jobTasks returns the job's tasks as the store holds them.
func jobTasks(ctx context.Context, t *testing.T, c clientlib.Store, job string) []*troupev1.Task {
	t.Helper()
	tasks, _, err := clientlib.List(ctx, c, clientlib.Tasks, "ns/"+job+"/")
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// deleteTasks deletes the job's tasks.
func deleteTasks(ctx context.Context, t *testing.T, c clientlib.Store, job string) {
	t.Helper()
	for _, tk := range jobTasks(ctx, t, c, job) {
		if err := clientlib.Delete(ctx, c, clientlib.Tasks, tk); err != nil {
			t.Fatal(err)
		}
	}
}

// A real batch scheduler and a shadow of it, with the same profile and
// seed, side by side over the in-memory store, each with its own cache:
// the shadow decides about each job once per pending episode (a job's
// tasks created; pending again after a machine was lost; changed while
// pending), places every
// task where the real one does (the test has the shadow decide before
// the real one, each once every cache shows the cell), finds the same
// task too large, counts no conflict, and never writes: deciding about a
// job alone, it leaves the store's revision where it was. Its metrics and
// report say so, with every decision in the decision-time bucket of one
// tick.
func TestShadowBesideRealScheduler(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	store := memstore.New(time.Now, time.Minute)
	realCache, shadowCache := scheduler.NewCellCache(store, zap.NewNop()), scheduler.NewCellCache(store, zap.NewNop())
	rprof, rmodes := shadowProfile(t, profiles.Batch, 7)
	real, err := scheduler.New(store, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: rprof, Modes: rmodes,
		Policy: scheduler.DefaultPolicy(time.Hour), Cache: realCache, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	sprof, smodes := shadowProfile(t, profiles.Batch, 7)
	var log shadowLog
	clock := &tickClock{now: time.Unix(1_700_000_000, 0), tick: 3 * time.Millisecond}
	shadow, err := scheduler.NewShadow(store, scheduler.ShadowConfig{Name: "shadow-batch-0", Kind: profiles.Batch, Profile: sprof,
		Modes: smodes, Policy: scheduler.DefaultPolicy(time.Hour), Cache: shadowCache, Clock: clock, Observe: log.observe,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, cc := range []*scheduler.CellCache{realCache, shadowCache} {
		if err := cc.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.WaitForWatches(ctx, 6); err != nil { // three informers each
		t.Fatal(err)
	}
	settle := func() {
		if err := store.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The machines arrive by watch, in one order in both caches.
	commitTxn(ctx, t, store, "machines", func(tx *clientlib.Txn) {
		for i := range 3 {
			clientlib.PutObject(tx.Group(), clientlib.Machines, shadowMachine(fmt.Sprintf("m%d", i), 4000))
		}
	})
	settle()

	// step has the shadow decide about what is queued, then the real
	// scheduler, each once every cache shows the cell.
	step := func() {
		settle()
		shadow.Drain(ctx)
		real.Drain(ctx, settle)
		settle()
	}
	submitTasks(ctx, t, store, profiles.Batch, "j0", 2, 500)
	step()
	submitTasks(ctx, t, store, profiles.Batch, "j1", 3, 700)
	step()
	submitTasks(ctx, t, store, profiles.Batch, "j2", 1, 1500)
	step()
	// j0 again: its tasks taken off their machines and pending anew (a
	// machine lost, say), a new pending episode.
	commitTxn(ctx, t, store, "requeue j0", func(tx *clientlib.Txn) {
		for _, tk := range jobTasks(ctx, t, store, "j0") {
			g := tx.Group()
			u := clientlib.Unbind(g, tk)
			u.Status = &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING, Reason: "machine lost"}
			clientlib.PutObject(g, clientlib.Tasks, u)
		}
	})
	step()
	submitTasks(ctx, t, store, profiles.Batch, "huge", 1, 9000)
	step()
	all, _, err := clientlib.List(ctx, store, clientlib.Tasks, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range all {
		if bound := tk.GetBinding().GetMachine() != ""; bound == (tk.GetSpec().GetJob() == "huge") {
			t.Fatalf("task %s: binding %v", tk.GetMetadata().GetName(), tk.GetBinding())
		}
	}
	if got := shadow.Outstanding(); got != 1 {
		t.Fatalf("%d tasks await the real outcome, want 1 (huge)", got)
	}
	for _, d := range log.decisions() {
		if d.Job == "ns/huge" {
			continue
		}
		for _, p := range d.Placements {
			if p.Conflict != "" || p.Machine == "" {
				t.Errorf("decision on %s: placement %+v", d.Job, p)
			}
		}
	}
	r := shadow.Report()
	if want := (scheduler.ShadowAgreement{SameMachine: 8, Outstanding: 1, Rate: 1}); r.Agreement != want {
		t.Fatalf("agreement %+v, want %+v (decisions %+v)", r.Agreement, want, r.Recent)
	}
	for _, d := range r.Recent {
		for _, p := range d.Placements {
			if p.Real != p.Machine || p.Outcome != "same_machine" {
				t.Errorf("report of %s: placement %+v, want it compared and the same", d.Job, p)
			}
		}
	}

	// A pending task changed is decided about again; deleted, it is
	// placed by neither.
	huge := proto.CloneOf(jobTasks(ctx, t, store, "huge")[0])
	huge.Metadata.Labels = map[string]string{"retry": "1"}
	if _, err := clientlib.Update(ctx, store, clientlib.Tasks, huge); err != nil {
		t.Fatal(err)
	}
	step()
	deleteTasks(ctx, t, store, "huge")
	step()
	if got, want := log.perJob(), map[string]int{"ns/j0": 2, "ns/j1": 1, "ns/j2": 1, "ns/huge": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decisions per job %v, want %v", got, want)
	}

	// The shadow decides alone: the store's revision stays where the
	// job's submission left it.
	submitTasks(ctx, t, store, profiles.Batch, "late", 2, 100)
	settle()
	rev := store.Revision()
	shadow.Drain(ctx)
	settle()
	if got := store.Revision(); got != rev || len(log.decisions()) != 7 {
		t.Fatalf("the store went from revision %d to %d while only the shadow decided (%d decisions)", rev, got, len(log.decisions()))
	}
	deleteTasks(ctx, t, store, "late")
	settle()
	if jobs, tasks := scheduler.ShadowTracking(shadow); jobs != 0 || tasks != 0 {
		t.Fatalf("the shadow keeps records of %d jobs and %d tasks, want none", jobs, tasks)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(shadow.Collector())
	expected := `
# HELP troupe_shadow_agreement_total Tasks a shadow scheduler decided about, by how its choice compares with the real schedulers': same_machine, elsewhere, only_shadow, only_real, neither.
# TYPE troupe_shadow_agreement_total counter
troupe_shadow_agreement_total{outcome="elsewhere",scheduler="shadow-batch-0"} 0
troupe_shadow_agreement_total{outcome="neither",scheduler="shadow-batch-0"} 1
troupe_shadow_agreement_total{outcome="only_real",scheduler="shadow-batch-0"} 0
troupe_shadow_agreement_total{outcome="only_shadow",scheduler="shadow-batch-0"} 2
troupe_shadow_agreement_total{outcome="same_machine",scheduler="shadow-batch-0"} 8
# HELP troupe_shadow_conflicts_total Placements of a shadow scheduler that would have conflicted with the cell when committed.
# TYPE troupe_shadow_conflicts_total counter
troupe_shadow_conflicts_total{scheduler="shadow-batch-0"} 0
# HELP troupe_shadow_decisions_total Decisions a shadow scheduler made: one per pending episode of a job.
# TYPE troupe_shadow_decisions_total counter
troupe_shadow_decisions_total{scheduler="shadow-batch-0"} 7
# HELP troupe_shadow_placements_total Placements in a shadow scheduler's plans.
# TYPE troupe_shadow_placements_total counter
troupe_shadow_placements_total{scheduler="shadow-batch-0"} 10
# HELP troupe_shadow_unschedulable_total Tasks a shadow scheduler found no machine for.
# TYPE troupe_shadow_unschedulable_total counter
troupe_shadow_unschedulable_total{scheduler="shadow-batch-0"} 2
# HELP troupe_shadow_tracked_jobs Jobs a shadow scheduler keeps records of: with tasks pending or awaiting the real outcome.
# TYPE troupe_shadow_tracked_jobs gauge
troupe_shadow_tracked_jobs{scheduler="shadow-batch-0"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "troupe_shadow_agreement_total", "troupe_shadow_conflicts_total",
		"troupe_shadow_decisions_total", "troupe_shadow_placements_total", "troupe_shadow_unschedulable_total", "troupe_shadow_tracked_jobs"); err != nil {
		t.Fatal(err)
	}
	// Every decision took one tick of the clock: 3 ms, in the bucket up
	// to 3.2 ms.
	r = shadow.Report()
	times := r.DecisionSeconds
	if times.Count != 7 || times.Mean != 0.003 || times.Max != 0.003 || times.P99 != 0.003 {
		t.Fatalf("decision times %+v, want 7 of 3 ms", times)
	}
	for _, b := range times.Buckets {
		if want := map[bool]uint64{true: 7, false: 0}[b.LE >= 0.0032]; b.Count != want {
			t.Fatalf("bucket le %v holds %d decisions, want %d", b.LE, b.Count, want)
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", r.Summary())
}

// A one-machine cell where a real scheduler fills the machine between a
// shadow's decision and the moment its plan would have committed: the
// shadow's placement conflicts in fine mode when no room is left, in
// coarse mode whenever the machine's counter changed; the real
// scheduler's placement of the very task the shadow placed is no
// conflict at all (in charge, the shadow would have placed it itself),
// and the two agree. A task the shadow placed and no real scheduler did
// counts as the shadow's only, once it is gone.
func TestShadowConflictsWithWhatTheRealSchedulersCommitted(t *testing.T) {
	for _, tc := range []struct {
		name          string
		capacity, cpu int64 // the machine's, the shadow's task's
		rival         int64 // a service task placed meanwhile; 0: the real batch scheduler places the shadow's task
		fine, coarse  int   // conflicts
		agreement     scheduler.Agreement
	}{
		{name: "machine filled", capacity: 1000, cpu: 1000, rival: 1000, fine: 1, coarse: 1, agreement: scheduler.OnlyShadow},
		{name: "room left", capacity: 2000, cpu: 1000, rival: 500, fine: 0, coarse: 1, agreement: scheduler.OnlyShadow},
		{name: "same task placed by the real scheduler", capacity: 1000, cpu: 1000, fine: 0, coarse: 0, agreement: scheduler.SameMachine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			store := memstore.New(time.Now, time.Minute)
			commitTxn(ctx, t, store, "machine", func(tx *clientlib.Txn) {
				clientlib.PutObject(tx.Group(), clientlib.Machines, shadowMachine("m", tc.capacity))
			})
			// The real schedulers: service, and batch, whose commits wait
			// for the test.
			sprof, smodes := shadowProfile(t, profiles.Service, 1)
			service, err := scheduler.New(store, scheduler.Config{Name: "service-0", Kind: profiles.Service, Profile: sprof, Modes: smodes,
				Policy: scheduler.DefaultPolicy(time.Hour), Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			bprof, bmodes := shadowProfile(t, profiles.Batch, 1)
			g := &gate{Store: store, ctx: ctx, pass: make(chan struct{}, 1)}
			batch, err := scheduler.New(store, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: bprof, Modes: bmodes,
				Policy: scheduler.DefaultPolicy(time.Hour), Commits: g, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			// Two shadows of batch, fine and coarse, each stopping between
			// its decision and its evaluation until the rival committed.
			inHook, proceed := make(chan string, 2), make(chan struct{})
			shadows := map[framework.ConflictMode]*scheduler.Shadow{}
			logs := map[framework.ConflictMode]*shadowLog{}
			for _, mode := range []framework.ConflictMode{framework.Fine, framework.Coarse} {
				prof, modes := shadowProfile(t, profiles.Batch, 2)
				modes.Conflict = mode
				logs[mode] = &shadowLog{}
				s, err := scheduler.NewShadow(store, scheduler.ShadowConfig{Name: "shadow-" + mode.String(), Kind: profiles.Batch,
					Profile: prof, Modes: modes, Policy: scheduler.DefaultPolicy(time.Hour),
					Clock: &tickClock{now: time.Unix(1_700_000_000, 0), tick: time.Millisecond}, Observe: logs[mode].observe, Logger: zap.NewNop()})
				if err != nil {
					t.Fatal(err)
				}
				scheduler.SetShadowBeforeCommit(s, func(string) {
					inHook <- mode.String()
					<-proceed
				})
				shadows[mode] = s
				go s.Run(ctx)
			}
			go service.Run(ctx)
			go batch.Run(ctx)
			if err := store.WaitForWatches(ctx, 12); err != nil {
				t.Fatal(err)
			}
			if err := store.Quiesce(ctx); err != nil {
				t.Fatal(err)
			}

			submitTasks(ctx, t, store, profiles.Batch, "a", 1, tc.cpu)
			for range 2 {
				<-inHook
			}
			// Both shadows decided, on an empty machine; now the rival.
			if tc.rival > 0 {
				submitTasks(ctx, t, store, profiles.Service, "svc", 1, tc.rival)
			} else {
				g.pass <- struct{}{}
			}
			wait.Until(ctx, t, "the rival's placement", func() (bool, string) {
				tasks := jobTasks(ctx, t, store, map[bool]string{true: "svc", false: "a"}[tc.rival > 0])
				return len(tasks) == 1 && tasks[0].GetBinding().GetMachine() == "m", fmt.Sprint(tasks)
			})
			if err := store.Quiesce(ctx); err != nil {
				t.Fatal(err)
			}
			taken := tc.rival // what the cache shows taken on m now
			if taken == 0 {
				taken = tc.cpu
			}
			for mode, s := range shadows {
				if m := scheduler.ShadowMachine(s, "m"); m.Allocated["cpu"] != taken {
					t.Fatalf("%v shadow's cache: machine %+v", mode, m)
				}
			}
			close(proceed)
			// Both evaluations done before the first mode's checks delete
			// the job's task: one evaluated after would find it gone
			// (Stopped).
			for mode := range shadows {
				wait.Until(ctx, t, mode.String()+" shadow's decision", func() bool { return len(logs[mode].decisions()) == 1 })
			}

			for mode, want := range map[framework.ConflictMode]int{framework.Fine: tc.fine, framework.Coarse: tc.coarse} {
				s := shadows[mode]
				d := logs[mode].decisions()[0]
				if len(d.Placements) != 1 || d.Placements[0].Machine != "m" || d.Conflicts != want || (d.Placements[0].Conflict != "") != (want > 0) {
					t.Fatalf("%v shadow's decision %+v, want a placement on m with %d conflicts", mode, d, want)
				}
				t.Logf("%v: %+v", mode, d.Placements[0])
				if tc.rival > 0 {
					if want := map[bool]string{true: "retry", false: "done"}[want > 0]; d.Action != want {
						t.Errorf("%v shadow: the policy says %s, want %s", mode, d.Action, want)
					}
					deleteTasks(ctx, t, store, "a") // never placed: the shadow's only
				}
				wait.Until(ctx, t, "the outcome", func() bool { return s.Outstanding() == 0 })
				r := s.Report()
				counts := map[scheduler.Agreement]uint64{scheduler.SameMachine: r.Agreement.SameMachine, scheduler.Elsewhere: r.Agreement.Elsewhere,
					scheduler.OnlyShadow: r.Agreement.OnlyShadow, scheduler.OnlyReal: r.Agreement.OnlyReal, scheduler.Neither: r.Agreement.Neither}
				for a, n := range counts {
					if want := map[bool]uint64{true: 1, false: 0}[a == tc.agreement]; n != want {
						t.Errorf("%v shadow: %d tasks %v, want %d", mode, n, a, want)
					}
				}
				if r.Conflicts != uint64(want) || r.ConflictedDecisions != uint64(want) || r.Decisions != 1 || r.Placements != 1 {
					t.Errorf("%v shadow's report: %+v", mode, r)
				}
				reg := prometheus.NewPedanticRegistry()
				reg.MustRegister(s.Collector())
				expected := fmt.Sprintf(`
# HELP troupe_shadow_conflicts_total Placements of a shadow scheduler that would have conflicted with the cell when committed.
# TYPE troupe_shadow_conflicts_total counter
troupe_shadow_conflicts_total{scheduler="shadow-%s"} %d
`, mode, want)
				if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "troupe_shadow_conflicts_total"); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A shadow runs as a viewer: the viewer may list and watch all that a
// shadow reads (its cache fills, it decides), and a write through the
// very client it reads with is refused.
func TestShadowRunsAsViewer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	admin := cell.Client()
	viewer := cell.ClientAs(pki.Identity{Role: pki.RoleViewer, Name: "shadow"})
	if _, err := clientlib.Create(ctx, admin, clientlib.Machines, shadowMachine("m", 4000)); err != nil {
		t.Fatal(err)
	}
	submitTasks(ctx, t, admin, profiles.Batch, "a", 2, 500)
	prof, modes := shadowProfile(t, profiles.Batch, 3)
	var log shadowLog
	s, err := scheduler.NewShadow(viewer, scheduler.ShadowConfig{Name: "shadow-batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		Policy: scheduler.DefaultPolicy(time.Second), Observe: log.observe, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	wait.Until(ctx, t, "the shadow's decision", func() bool { return len(log.decisions()) == 1 })
	if d := log.decisions()[0]; len(d.Placements) != 2 || d.Placements[0].Machine != "m" || d.Conflicts != 0 {
		t.Fatalf("decision %+v", d)
	}
	tasks := jobTasks(ctx, t, admin, "a")
	if tasks[0].GetBinding() != nil {
		t.Fatalf("task bound: %v", tasks[0])
	}
	bound := proto.CloneOf(tasks[0])
	bound.Binding = &troupev1.TaskBinding{Machine: "m", Scheduler: "shadow-batch-0"}
	if _, err := clientlib.Update(ctx, viewer, clientlib.Tasks, bound); !storeerr.Is(err, storeerr.PermissionDenied) {
		t.Fatalf("a viewer binding a task: %v, want permission denied", err)
	}
}

// A real scheduler fills a one-machine cell with a job before a shadow
// gets to it: the shadow still decides about the job once, as if it were
// in charge, on the machine without the job's own placements, and puts
// its tasks where the real one did, without conflict, in fine and in
// coarse mode.
func TestShadowDecidesAsIfInCharge(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store := memstore.New(time.Now, time.Minute)
	realCache := scheduler.NewCellCache(store, zap.NewNop())
	prof, modes := shadowProfile(t, profiles.Batch, 5)
	real, err := scheduler.New(store, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		Policy: scheduler.DefaultPolicy(time.Hour), Cache: realCache, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	caches := []*scheduler.CellCache{realCache}
	var shadows []*scheduler.Shadow
	for _, mode := range []framework.ConflictMode{framework.Fine, framework.Coarse} {
		prof, modes := shadowProfile(t, profiles.Batch, 6)
		modes.Conflict = mode
		cc := scheduler.NewCellCache(store, zap.NewNop())
		s, err := scheduler.NewShadow(store, scheduler.ShadowConfig{Name: "shadow-" + mode.String(), Kind: profiles.Batch, Profile: prof,
			Modes: modes, Policy: scheduler.DefaultPolicy(time.Hour), Cache: cc, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		caches, shadows = append(caches, cc), append(shadows, s)
	}
	for _, cc := range caches {
		if err := cc.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.WaitForWatches(ctx, 3*len(caches)); err != nil { // three informers each: Quiesce waits for open watches only
		t.Fatal(err)
	}
	settle := func() {
		if err := store.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commitTxn(ctx, t, store, "machine", func(tx *clientlib.Txn) {
		clientlib.PutObject(tx.Group(), clientlib.Machines, shadowMachine("m", 1000))
	})
	submitTasks(ctx, t, store, profiles.Batch, "a", 2, 500)
	settle()
	real.Drain(ctx, settle)
	settle()
	for _, tk := range jobTasks(ctx, t, store, "a") {
		if tk.GetBinding().GetMachine() != "m" {
			t.Fatalf("the real scheduler did not place %v", tk)
		}
	}
	for _, s := range shadows {
		s.Drain(ctx)
		r := s.Report()
		if r.Decisions != 1 || r.Placements != 2 || r.Conflicts != 0 || r.Unschedulable != 0 ||
			r.Agreement != (scheduler.ShadowAgreement{SameMachine: 2, Rate: 1}) {
			t.Errorf("%s: %+v", r.Scheduler, r)
		}
		if jobs, tasks := scheduler.ShadowTracking(s); jobs != 0 || tasks != 0 {
			t.Errorf("%s keeps records of %d jobs and %d tasks, want none", r.Scheduler, jobs, tasks)
		}
	}
}
