package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/agents/runtime/runtimetest"
	"github.com/troupe-cluster/troupe/cellstore/localstore"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
)

// TestUpApplyGet runs `troupe up` as a process, applies a job of real
// shell commands with `troupe apply`, and follows it with `troupe get`
// until it succeeds.
func TestUpApplyGet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	bin := buildTroupe(t)
	ports, err := localstore.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("127.0.0.1:%d", ports[0])
	dir := runtimetest.Dir(t) // the exec agent's tasks, as nobody under root, reach tasks/
	// troupe up writes the CLI's configuration, naming the admin's
	// certificate it made; the CLI below finds it there, as after make run.
	t.Setenv("TROUPE_CONFIG", filepath.Join(t.TempDir(), "config.yaml"))
	up := exec.Command(bin, "up", "--data-dir", dir, "--grpc-addr", endpoint, "--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { up.Process.Signal(syscall.SIGTERM); up.Wait() }()
	manifest := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: troupe/v1
kind: Job
metadata: {name: greet, namespace: default}
spec:
  count: 3
  template:
    command: /bin/sh
    args: ["-c", "echo hi from $TROUPE_TASK"]
    requests: {cpu: 10, memory: 1048576}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	run := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}
	wait.Until(ctx, t, "apply to create job greet", func() error {
		out, err := run("apply", "-f", manifest)
		if err == nil && !strings.Contains(out, "job/default/greet created") {
			return fmt.Errorf("apply said %q", out)
		}
		return err
	})
	if out, err := run("apply", "-f", manifest); err != nil || !strings.Contains(out, "unchanged") {
		t.Fatalf("second apply: %q %v", out, err)
	}
	wait.Until(ctx, t, "job greet to succeed", func() error {
		out, err := run("get", "jobs")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[1] == "greet" && f[4] == "SUCCEEDED" {
				return nil
			}
		}
		return fmt.Errorf("job not done yet:\n%s", out)
	})
	out, err := run("get", "tasks")
	if err != nil || strings.Count(out, "SUCCEEDED") != 3 {
		t.Fatalf("tasks:\n%s %v", out, err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "tasks", "default", "greet", "2", "stdout.log"))
	if err != nil || !strings.Contains(string(log), "hi from default/greet/2") {
		t.Fatalf("task log: %q %v", log, err)
	}
	if out, err := run("logs", "greet-2"); err != nil || strings.TrimSpace(out) != "hi from default/greet/2" {
		t.Fatalf("logs: %q %v", out, err)
	}
	// The cell's /metrics has the store's and the schedulers' figures.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`troupe_scheduler_placements_total{scheduler="batch-0"} 3`, "troupe_store_commits_total", `troupe_events_total{result="written",source="job-controller"}`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("no %s in /metrics", want)
		}
	}
	if out, err := run("job", "stop", "greet"); err != nil || !strings.Contains(out, "job/default/greet stopped") {
		t.Fatalf("job stop: %q %v", out, err)
	}
	if out, err := run("delete", "-f", manifest); err != nil || !strings.Contains(out, "job/default/greet deleted") {
		t.Fatalf("delete: %q %v", out, err)
	}
	// The job controller removes a deleted job's tasks.
	wait.Until(ctx, t, "the tasks of deleted job greet to go", func() error {
		out, err := run("get", "tasks")
		if err == nil && strings.Contains(out, "greet-") {
			err = fmt.Errorf("tasks left:\n%s", out)
		}
		return err
	})
}
