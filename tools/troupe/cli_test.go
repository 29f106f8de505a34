package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// cli runs the troupe command in this process as a user types it: env is
// its whole environment (nothing of the test process's: no ~/.troupe
// unless env has HOME), and dialTimeout bounds its first contact with a
// cell (0: the command's).
type cli struct {
	env         map[string]string
	dialTimeout time.Duration
}

// runTo runs troupe args, printing to out and errOut, and returns its
// exit status.
func (c cli) runTo(ctx context.Context, out, errOut io.Writer, args ...string) int {
	a := &app{in: strings.NewReader(""), out: out, errOut: errOut, dialTimeout: cmp.Or(c.dialTimeout, dialTimeout),
		lookupEnv: func(k string) (string, bool) { v, ok := c.env[k]; return v, ok },
		home: func() (string, error) {
			if h, ok := c.env["HOME"]; ok {
				return h, nil
			}
			return "", errors.New("no home directory in the test's environment")
		}}
	return a.execute(ctx, args)
}

// run runs troupe args and returns what it printed and its exit status.
func (c cli) run(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = c.runTo(ctx, &out, &errOut, args...)
	return out.String(), errOut.String(), code
}

// with returns c with the variables of kv ("NAME=value") added.
func (c cli) with(kv ...string) cli {
	env := maps.Clone(c.env)
	if env == nil {
		env = map[string]string{}
	}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		env[k] = v
	}
	return cli{env: env, dialTimeout: c.dialTimeout}
}

// syncBuffer is a buffer written by one goroutine and read by another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// contains is a condition for waitFor: out() contains every one of want,
// blanks between words aside (alignment depends on the other lines).
func contains(out func() (string, error), want ...string) func() error {
	return func() error {
		s, err := out()
		if err != nil {
			return err
		}
		for _, w := range want {
			if !strings.Contains(squeeze(s), squeeze(w)) {
				return fmt.Errorf("no %q in:\n%s", w, s)
			}
		}
		return nil
	}
}

var spaces = regexp.MustCompile(` +`)

// squeeze turns each run of spaces into one.
func squeeze(s string) string { return spaces.ReplaceAllString(s, " ") }

// TestGetDescribeWatch runs a cell in this process (tools/cell, hollow
// machines on loopback) and the CLI's get, describe and watch against it.
func TestGetDescribeWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole cell")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	c, err := cell.Start(ctx, cell.Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Hollow: 2,
		HollowCapacity: map[string]int64{"cpu": 4000, "memory": 1 << 30}, LeaseDuration: 3 * time.Second, SchedulerBackoff: 100 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); c.Stop() })
	admin := pki.DirFiles(c.PKIDir(), pki.LocalAdmin)
	endpoint := []string{"-endpoint", c.Node.GRPCAddr(), "--ca", admin.CA, "--cert", admin.Cert, "--key", admin.Key}
	troupe := func(args ...string) func() (string, error) {
		return func() (string, error) {
			out, errOut, code := cli{}.run(ctx, append(args, endpoint...)...)
			if code != 0 {
				return out, fmt.Errorf("troupe %s: exit status %d: %s", strings.Join(args, " "), code, errOut)
			}
			return out, nil
		}
	}

	var watchOut, watchErr syncBuffer
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan int, 1)
	go func() {
		watched <- cli{}.runTo(watchCtx, &watchOut, &watchErr, append([]string{"watch", "tasks", "-l", "app=greet"}, endpoint...)...)
	}()
	wait.Until(ctx, t, "the watch to start", contains(func() (string, error) { return watchErr.String(), nil }, "Watching tasks"))

	for _, j := range []struct {
		name string
		sim  time.Duration
	}{{"greet", 100 * time.Millisecond}, {"other", time.Hour}} {
		if _, err := clientlib.Create(ctx, c.Client, clientlib.Jobs, &troupev1.Job{
			Metadata: &troupev1.ObjectMeta{Name: j.name, Namespace: "default", Labels: map[string]string{"app": j.name}},
			Spec: &troupev1.JobSpec{Count: 2, Tolerations: []*troupev1.Toleration{agent.HollowToleration()},
				Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(j.sim),
					Requests: map[string]int64{"cpu": 100, "memory": 1 << 20}}}}); err != nil {
			t.Fatal(err)
		}
	}
	var job *troupev1.Job
	wait.Until(ctx, t, "job greet to succeed", func() error {
		job, err = clientlib.Get(ctx, c.Client, clientlib.Jobs, "/jobs/default/greet")
		if err == nil && job.GetStatus().GetPhase() != troupev1.JobPhase_JOB_PHASE_SUCCEEDED {
			err = fmt.Errorf("job greet: %v", job.GetStatus())
		}
		return err
	})

	out, err := troupe("get", "tasks", "-l", "app=greet")()
	if err != nil || !strings.Contains(out, "greet-0") || !strings.Contains(out, "greet-1") || strings.Contains(out, "other") {
		t.Fatalf("get tasks -l app=greet: %v\n%s", err, out)
	}
	out, err = troupe("get", "jobs", "-l", "app notin (greet)", "-o", "wide")()
	if err != nil || strings.Contains(out, "greet") || !strings.Contains(out, "other") || !strings.Contains(out, "cpu=100m,memory=1Mi") {
		t.Fatalf("get jobs -l 'app notin (greet)' -o wide: %v\n%s", err, out)
	}
	out, err = troupe("get", "jobs", "-l", "app=greet", "-o", "yaml")()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := clientlib.DecodeManifests([]byte(out))
	if err != nil || len(ms) != 1 || !proto.Equal(ms[0].Object, job) {
		t.Fatalf("get -o yaml does not decode back to the job (%v):\n%s", err, out)
	}
	if _, err := troupe("get", "jobs", "-l", "app in (greet")(); err == nil || !strings.Contains(err.Error(), "at the end") {
		t.Fatalf("a malformed selector: %v", err)
	}

	// The job controller's events, written in the background.
	wait.Until(ctx, t, "describe job greet", contains(troupe("describe", "job", "greet"), "Name: greet", "Status: SUCCEEDED", "Tasks: 2 SUCCEEDED",
		"Schedulers:", "batch-0", "Events:", "TasksCreated", "Created 2 task(s) of 2", "Succeeded", "All 2 task(s) succeeded"))
	wait.Until(ctx, t, "describe task default/greet-1", contains(troupe("describe", "task", "default/greet-1"), "Job: greet", "Status: SUCCEEDED", "SUCCEEDED",
		"Run:", "/runs/hollow-", "Attempts:", "completed"))
	wait.Until(ctx, t, "describe machine "+cell.HollowName(0), contains(troupe("describe", "machine", cell.HollowName(0)), "Resources:", "cpu 4000m", "memory 1Gi", "Lease:", "held by"))
	if _, err := troupe("describe", "task", "greet")(); err == nil || !strings.Contains(err.Error(), "not <job>-<index>") {
		t.Fatalf("describe task greet: %v", err)
	}

	wait.Until(ctx, t, "the watch to show the tasks", contains(func() (string, error) { return watchOut.String(), nil },
		"ADDED task default/greet-0", "MODIFIED task default/greet-1 SUCCEEDED on hollow-"))
	stopWatch()
	if code := <-watched; code != 0 {
		t.Fatalf("watch ended with exit status %d: %s", code, watchErr.String())
	}
	if s := watchOut.String(); strings.Contains(s, "other-") {
		t.Fatalf("watch -l app=greet printed another job's tasks:\n%s", s)
	}
}
