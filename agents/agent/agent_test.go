package agent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/localcell"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// A cell in one process: store, batch scheduler, job controller, and two
// exec agents running real processes.
func TestBatchJobOfRealProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	lc, err := localcell.Start(ctx, localcell.Config{Dir: t.TempDir(), Replicas: 1, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	client := func() *clientlib.Client {
		c, err := clientlib.New(clientlib.DefaultConfig(lc.Endpoints()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	runtimes := map[string]*runtime.Exec{}
	for i := range 2 {
		m := fmt.Sprintf("a%d", i)
		rt := &runtime.Exec{Dir: t.TempDir()}
		runtimes[m] = rt
		a, err := agent.New(client(), agent.Config{Machine: m, Capacity: map[string]int64{"cpu": 2000, "memory": 1 << 30},
			Runtime: rt, LeaseDuration: 10 * time.Second, RenewInterval: time.Second, StopGrace: time.Second, Now: time.Now, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		go a.Run(ctx)
	}
	prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(client(), scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
		MaxAttempts: 3, Backoff: 50 * time.Millisecond, Now: time.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	ctl, err := job.New(client(), job.Config{Now: time.Now, Logger: zap.NewNop(), Queue: cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go ctl.Run(ctx)

	c := client()
	submit := func(name, script string, count, retries int32) {
		if _, err := clientlib.Create(ctx, c, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: &troupev1.JobSpec{Count: count, MaxRetries: retries, RetryBackoff: durationpb.New(0),
				Template: &troupev1.TaskTemplate{Command: "/bin/sh", Args: []string{"-c", script}, Env: map[string]string{"GREETING": "hello"},
					Requests: map[string]int64{"cpu": 500}}}}); err != nil {
			t.Fatal(err)
		}
	}
	submit("ok", `echo "$GREETING from $TROUPE_TASK"; echo warn >&2`, 6, 0)
	submit("bad", `exit 3`, 1, 1)
	waitPhase := func(name string, want troupev1.JobPhase) *troupev1.Job {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			j, err := clientlib.Get(ctx, c, clientlib.Jobs, "/jobs/ns/"+name)
			if err == nil && j.GetStatus().GetPhase() == want {
				return j
			}
			select {
			case <-ctx.Done():
				t.Fatalf("job %s: %v (%v), want %v", name, j.GetStatus(), err, want)
			case <-tick.C:
			}
		}
	}
	if j := waitPhase("ok", troupev1.JobPhase_JOB_PHASE_SUCCEEDED); j.GetStatus().GetSucceeded() != 6 {
		t.Fatalf("ok: %v", j.GetStatus())
	}
	// Every task's output is in its log on the machine that ran it.
	tasks, _, err := clientlib.List(ctx, c, clientlib.Tasks, "ns/ok/")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, tk := range tasks {
		ref := clientlib.TaskRef("ns", "ok", tk.GetSpec().GetIndex())
		for _, rt := range runtimes {
			if b, err := os.ReadFile(filepath.Join(rt.TaskDir(ref), "stdout.log")); err == nil {
				if !strings.Contains(string(b), "hello from "+ref) {
					t.Fatalf("stdout of %s: %q", ref, b)
				}
				found++
			}
		}
	}
	if found != 6 {
		t.Fatalf("found the logs of %d tasks, want 6", found)
	}
	bad := waitPhase("bad", troupev1.JobPhase_JOB_PHASE_FAILED)
	if bad.GetStatus().GetRetries() != 1 {
		t.Fatalf("bad: %v", bad.GetStatus())
	}
	tk, err := clientlib.Get(ctx, c, clientlib.Tasks, "/tasks/ns/bad/0")
	if err != nil || tk.GetStatus().GetExitCode() != 3 || tk.GetSpec().GetAttempt() != 1 {
		t.Fatalf("failed task: %v %v", tk, err)
	}
	// Machines are free again.
	for m := range runtimes {
		if kv, _ := c.Get(ctx, clientlib.AllocKey(m, "cpu")); kv != nil && string(kv.GetValue()) != "0" {
			t.Fatalf("%s still has %s cpu allocated", m, kv.GetValue())
		}
	}
}

// A task whose binding goes away is stopped: SIGTERM, then SIGKILL.
func TestExecStop(t *testing.T) {
	rt := &runtime.Exec{Dir: t.TempDir()}
	ready := filepath.Join(t.TempDir(), "ready")
	b := &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/j/0"}, Machine: "m",
		Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: "/bin/sh",
			Args: []string{"-c", "trap '' TERM; touch " + ready + "; while :; do sleep 1; done"}}}}
	p, err := rt.Start(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	// Stop once the task ignores SIGTERM.
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(ready); err != nil; _, err = os.Stat(ready) {
		if time.Now().After(deadline) {
			t.Fatal("task did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Stop(100 * time.Millisecond)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("process survived SIGKILL")
	}
	if e := p.Exit(); !e.Killed || e.Code != 128+9 {
		t.Fatalf("exit %+v, want killed by SIGKILL", e)
	}
}
