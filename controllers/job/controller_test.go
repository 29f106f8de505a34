package job_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// cell runs a one-node store, a batch and a service scheduler, the job
// controller, and two machines.
type cell struct {
	t   testing.TB
	ctx context.Context
	c   *clientlib.Client
	lc  *clienttest.Store
}

func startCell(t *testing.T) *cell {
	t.Helper()
	c := startStore(t)
	c.addMachinesAndSchedulers()
	c.runController(1)
	return c
}

// startStore starts a one-node store.
func startStore(t testing.TB) *cell {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	lc := clienttest.Start(ctx, t)
	return &cell{t: t, ctx: ctx, c: lc.Client(), lc: lc}
}

// addMachinesAndSchedulers adds two machines and runs a batch and a
// service scheduler.
func (c *cell) addMachinesAndSchedulers() {
	t := c.t
	t.Helper()
	for i := range 2 {
		if _, err := clientlib.Create(c.ctx, c.c, clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%d", i)},
			Spec: &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{profiles.Batch, profiles.Service} {
		prof, modes, err := profiles.New(kind, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := scheduler.New(c.lc.Client(), scheduler.Config{Name: kind + "-0", Kind: kind, Profile: prof, Modes: modes,
			Policy: scheduler.Policy{MaxAttempts: 3, Backoff: 50 * time.Millisecond, RetryBase: 5 * time.Millisecond, RetryMax: 30 * time.Second}, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		go s.Run(c.ctx)
	}
}

// runController runs the job controller with workers workers.
func (c *cell) runController(workers int) { c.runControllerLogging(workers, zap.NewNop()) }

// runControllerLogging runs the job controller, and its client, logging
// to log.
func (c *cell) runControllerLogging(workers int, log *zap.Logger) {
	t := c.t
	t.Helper()
	cl := c.lc.ClientLogging(log)
	events, err := clientlib.NewEventRecorder(cl, clientlib.DefaultEventRecorderConfig("job-controller"))
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(c.ctx)
	ctl, err := job.New(cl, job.Config{Now: time.Now, Logger: log, Events: events, Workers: workers,
		Queue: cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go ctl.Run(c.ctx)
}

// until polls cond until it holds, failing the test when the cell's
// context ends first.
func (c *cell) until(what string, cond func() (bool, string)) {
	c.t.Helper()
	wait.Until(c.ctx, c.t, what, cond)
}

func (c *cell) tasks(job string) []*troupev1.Task {
	ts, _, err := clientlib.List(c.ctx, c.c, clientlib.Tasks, "ns/"+job+"/")
	if err != nil {
		c.t.Fatal(err)
	}
	return ts
}

// agent plays the machines' agents: it reports a run of phase for every
// bound task of job whose attempt satisfies exit.
func (c *cell) agent(job string, phase func(t *troupev1.Task) troupev1.RunPhase) {
	for _, t := range c.tasks(job) {
		m := t.GetBinding().GetMachine()
		if m == "" {
			continue
		}
		run := &troupev1.Run{Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskRef("ns", job, t.GetSpec().GetIndex())}, Machine: m,
			Phase: phase(t), Attempt: t.GetSpec().GetAttempt(), Finished: timestamppb.Now()}
		old, err := clientlib.Get(c.ctx, c.c, clientlib.Runs, clientlib.Runs.Prefix+m+"/"+run.GetMetadata().GetName())
		if err == nil {
			run.Metadata = old.GetMetadata()
			_, err = clientlib.Update(c.ctx, c.c, clientlib.Runs, run)
		} else {
			_, err = clientlib.Create(c.ctx, c.c, clientlib.Runs, run)
		}
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *cell) job(name string) *troupev1.Job {
	j, err := clientlib.Get(c.ctx, c.c, clientlib.Jobs, "/jobs/ns/"+name)
	if err != nil {
		c.t.Fatal(err)
	}
	return j
}

// event waits for an event of job (or of one of its tasks) with reason
// whose message contains text.
func (c *cell) event(job, involved, reason, text string) {
	c.t.Helper()
	c.until(fmt.Sprintf("event %s %q of %s", reason, text, involved), func() (bool, string) {
		es, _, err := clientlib.List(c.ctx, c.c, clientlib.Events, "ns/"+job+"/")
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range es {
			if e.GetInvolvedName() == involved && e.GetReason() == reason && strings.Contains(e.GetMessage(), text) {
				return true, ""
			}
			seen = append(seen, e.GetInvolvedName()+" "+e.GetReason()+": "+e.GetMessage())
		}
		return false, strings.Join(seen, "; ")
	})
}

func (c *cell) counter(m string) string {
	kv, _ := c.c.Get(c.ctx, clientlib.AllocKey(m, "cpu"))
	return string(kv.GetValue())
}

func newJob(name string, typ troupev1.JobType, count, retries int32) *troupev1.Job {
	return &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: &troupev1.JobSpec{
		Type: typ, Count: count, MaxRetries: retries, RetryBackoff: durationpb.New(0),
		Template: &troupev1.TaskTemplate{Command: "/bin/true", Requests: map[string]int64{"cpu": 1000}}}}
}

func bound(ts []*troupev1.Task) int {
	n := 0
	for _, t := range ts {
		if t.GetBinding().GetMachine() != "" {
			n++
		}
	}
	return n
}

// A batch job's tasks are created, placed, run, and release their
// machines; the job succeeds.
func TestBatchJobRunsToCompletion(t *testing.T) {
	c := startCell(t)
	if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, newJob("b", troupev1.JobType_JOB_TYPE_BATCH, 3, 0)); err != nil {
		t.Fatal(err)
	}
	c.until("3 tasks bound", func() (bool, string) { ts := c.tasks("b"); return bound(ts) == 3, fmt.Sprint(len(ts), " tasks") })
	c.agent("b", func(*troupev1.Task) troupev1.RunPhase { return troupev1.RunPhase_RUN_PHASE_SUCCEEDED })
	c.until("job succeeded", func() (bool, string) {
		st := c.job("b").GetStatus()
		return st.GetPhase() == troupev1.JobPhase_JOB_PHASE_SUCCEEDED && st.GetSucceeded() == 3, st.String()
	})
	if bound(c.tasks("b")) != 0 || c.counter("m0") != "0" && c.counter("m0") != "" || c.counter("m1") != "0" && c.counter("m1") != "" {
		t.Fatalf("finished tasks still hold machines: counters %q %q", c.counter("m0"), c.counter("m1"))
	}
	c.event("b", "b", "TasksCreated", "Created 3 task(s) of 3")
	c.event("b", "b", "Succeeded", "All 3 task(s) succeeded")
}

// A failing batch task that its agent does not restart (NEVER) is
// replaced up to max_retries, then the job fails.
func TestBatchJobRetriesThenFails(t *testing.T) {
	c := startCell(t)
	j := newJob("f", troupev1.JobType_JOB_TYPE_BATCH, 1, 1)
	j.Spec.RestartPolicy = troupev1.RestartPolicy_RESTART_POLICY_NEVER
	if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, j); err != nil {
		t.Fatal(err)
	}
	for attempt := int32(0); attempt <= 1; attempt++ {
		c.until(fmt.Sprintf("attempt %d bound", attempt), func() (bool, string) {
			ts := c.tasks("f")
			return len(ts) == 1 && bound(ts) == 1 && ts[0].GetSpec().GetAttempt() == attempt, fmt.Sprint(ts)
		})
		c.agent("f", func(*troupev1.Task) troupev1.RunPhase { return troupev1.RunPhase_RUN_PHASE_FAILED })
	}
	c.until("job failed", func() (bool, string) {
		st := c.job("f").GetStatus()
		return st.GetPhase() == troupev1.JobPhase_JOB_PHASE_FAILED && st.GetRetries() == 1, st.String()
	})
	c.event("f", "f-0", "Failed", "Attempt 0 failed on m")
	c.event("f", "f-0", "Retrying", "Retry 1 of 1 after 0s backoff; attempt 0 failed with exit code 0")
	c.event("f", "f", "Failed", "Job failed: task f-0 failed with no retries left (max_retries 1)")
}

// A batch task restarted in place (ON_FAILURE, ALWAYS) carries its job's
// restart settings for its agent; a failed run means the agent used its
// retries, so it is not replaced and the job fails.
func TestBatchJobRestartedInPlaceIsNotReplaced(t *testing.T) {
	c := startCell(t)
	j := newJob("p", troupev1.JobType_JOB_TYPE_BATCH, 1, 2)
	j.Spec.RestartPolicy, j.Spec.RetryBackoff = troupev1.RestartPolicy_RESTART_POLICY_ALWAYS, durationpb.New(time.Second)
	if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, j); err != nil {
		t.Fatal(err)
	}
	c.until("bound", func() (bool, string) { ts := c.tasks("p"); return bound(ts) == 1, fmt.Sprint(ts) })
	spec := c.tasks("p")[0].GetSpec()
	if spec.GetRestartPolicy() != troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE || spec.GetMaxRetries() != 2 ||
		spec.GetRetryBackoff().AsDuration() != time.Second {
		t.Fatalf("task spec %v: want ON_FAILURE (ALWAYS for a batch job), max_retries 2, retry_backoff 1s", spec)
	}
	c.agent("p", func(*troupev1.Task) troupev1.RunPhase { return troupev1.RunPhase_RUN_PHASE_FAILED })
	c.until("job failed", func() (bool, string) {
		st := c.job("p").GetStatus()
		return st.GetPhase() == troupev1.JobPhase_JOB_PHASE_FAILED, st.String()
	})
	if ts := c.tasks("p"); len(ts) != 1 || ts[0].GetSpec().GetAttempt() != 0 || ts[0].GetStatus().GetPhase() != troupev1.TaskPhase_TASK_PHASE_FAILED ||
		c.job("p").GetStatus().GetRetries() != 0 {
		t.Fatalf("task replaced: %v, job %v", ts, c.job("p").GetStatus())
	}
}

// A service keeps its replicas: a failed replica is replaced, and
// scaling down stops the extra one.
func TestServiceKeepsReplicas(t *testing.T) {
	c := startCell(t)
	_, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, newJob("web", troupev1.JobType_JOB_TYPE_SERVICE, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	c.until("2 replicas bound", func() (bool, string) { return bound(c.tasks("web")) == 2, "" })
	c.agent("web", func(t *troupev1.Task) troupev1.RunPhase {
		if t.GetSpec().GetIndex() == 0 {
			return troupev1.RunPhase_RUN_PHASE_FAILED
		}
		return troupev1.RunPhase_RUN_PHASE_RUNNING
	})
	c.until("replica 0 replaced and bound again", func() (bool, string) {
		ts := c.tasks("web")
		return len(ts) == 2 && ts[0].GetSpec().GetAttempt() == 1 && bound(ts) == 2, fmt.Sprint(ts)
	})
	// Scale down, retrying the read-modify-write if the controller
	// updated the job's status meanwhile.
	c.until("job scaled down", func() (bool, string) {
		job := c.job("web")
		job.Spec.Count = 1
		_, err := clientlib.Update(c.ctx, c.c, clientlib.Jobs, job)
		return err == nil, fmt.Sprint(err)
	})
	c.until("replica 1 stopped", func() (bool, string) {
		ts := c.tasks("web")
		return ts[1].GetStatus().GetPhase() == troupev1.TaskPhase_TASK_PHASE_STOPPED && ts[1].GetBinding() == nil, ts[1].String()
	})
	c.event("web", "web-0", "Replaced", "Replica replaced by attempt 1 after 0s backoff; attempt 0 failed")
	c.event("web", "web", "ScaledDown", "Stopped 1 task(s) above count 1")
}

// A deleted job's tasks go, and release their machines.
func TestDeletedJobsTasksGo(t *testing.T) {
	c := startCell(t)
	if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, newJob("d", troupev1.JobType_JOB_TYPE_BATCH, 2, 0)); err != nil {
		t.Fatal(err)
	}
	c.until("2 tasks bound", func() (bool, string) { ts := c.tasks("d"); return bound(ts) == 2, fmt.Sprint(len(ts), " tasks") })
	// The controller writes the job's status meanwhile: retry on conflict.
	c.until("job deleted", func() (bool, string) {
		err := clientlib.Delete(c.ctx, c.c, clientlib.Jobs, c.job("d"))
		return err == nil, fmt.Sprint(err)
	})
	c.until("tasks deleted", func() (bool, string) { ts := c.tasks("d"); return len(ts) == 0, fmt.Sprint(len(ts), " tasks") })
	for _, m := range []string{"m0", "m1"} {
		if v := c.counter(m); v != "0" && v != "" {
			t.Fatalf("%s's counter is %q after the job's tasks went", m, v)
		}
	}
}

// A large job's tasks are created a few hundred to a request (each task
// its own group, on the condition that it is absent), not one request
// each; tasks written by one request share its revision. Two such jobs
// are synced by two of the controller's workers at once.
func TestLargeJobsTasksAreCreatedInFewRequests(t *testing.T) {
	c := startStore(t)
	c.runController(4)
	const count = 600 // 3 requests of at most 256
	for _, name := range []string{"big0", "big1"} {
		if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, newJob(name, troupev1.JobType_JOB_TYPE_BATCH, count, 0)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"big0", "big1"} {
		c.until(name+"'s tasks created", func() (bool, string) { ts := c.tasks(name); return len(ts) == count, fmt.Sprint(len(ts), " tasks") })
		versions := map[uint64]int{}
		for _, tk := range c.tasks(name) {
			versions[tk.GetMetadata().GetVersion()]++
		}
		if len(versions) != 3 {
			t.Errorf("%s: %d tasks written at %d revisions %v, want 3 requests", name, count, len(versions), versions)
		}
		c.event(name, name, "TasksCreated", fmt.Sprintf("Created %d task(s) of %d", count, count))
	}
}

// BenchmarkJobTaskCreation measures how fast the job controller creates
// the tasks of 2,000-task jobs on a one-node store, in tasks/s, from the
// job's creation until its status counts them all pending.
func BenchmarkJobTaskCreation(b *testing.B) {
	c := startStore(b)
	c.runController(1)
	const count = 2000
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		name := fmt.Sprintf("bench%d", i)
		if _, err := clientlib.Create(c.ctx, c.c, clientlib.Jobs, newJob(name, troupev1.JobType_JOB_TYPE_BATCH, count, 0)); err != nil {
			b.Fatal(err)
		}
		c.until(name+"'s tasks pending", func() (bool, string) {
			st := c.job(name).GetStatus()
			return st.GetPending() == count, fmt.Sprint(st.GetPending(), " pending")
		})
	}
	b.ReportMetric(float64(b.N*count)/time.Since(start).Seconds(), "tasks/s")
}
