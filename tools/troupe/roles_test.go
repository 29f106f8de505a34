package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// A cell of separate processes: `troupe controller`, `troupe scheduler`
// with two competing batch instances, and `troupe agent --hollow 4`
// against a store. A batch job of 20 simulated tasks succeeds, and the
// scheduler process serves its instances' metrics.
func TestRoleProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	bin := buildTroupe(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	lc := clienttest.Start(ctx, t)
	c := lc.Client()
	store := lc.EndpointList()
	start := func(env []string, args ...string) io.Reader {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
		return out
	}
	as := func(role, name string) []string { return lc.Flags(pki.Identity{Role: role, Name: name}) }
	// The store's address as each role may be given it: --endpoint,
	// -endpoint (one dash, as Go's flag package took it), TROUPE_STORE
	// (the deprecated name's variable).
	start(nil, append([]string{"controller", "--endpoint", store, "--node-interval", "200ms"}, as(pki.RoleController, "c1")...)...)
	sched := start(nil, append([]string{"scheduler", "-endpoint", store, "-kinds", "batch", "--instances", "2", "--partitions", "1", "--backoff", "100ms"}, as(pki.RoleScheduler, "s1")...)...)
	start([]string{"TROUPE_STORE=" + store}, append([]string{"agent", "--machine", "r1", "--hollow", "4", "--capacity", "cpu=4000m,memory=8Gi"}, as(pki.RoleAgent, "r1-hollow-*")...)...)
	banner, err := bufio.NewReader(sched).ReadString('\n')
	if err != nil {
		t.Fatalf("scheduler banner: %v", err)
	}
	metricsURL := regexp.MustCompile(`http://\S+/metrics`).FindString(banner)
	if metricsURL == "" {
		t.Fatalf("no metrics address in %q", banner)
	}
	go io.Copy(io.Discard, sched)

	if _, err := clientlib.Create(ctx, c, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "sims", Namespace: "default"},
		Spec: &troupev1.JobSpec{Scheduler: "batch", Count: 20, Tolerations: []*troupev1.Toleration{agent.HollowToleration()}, Template: &troupev1.TaskTemplate{Command: "x",
			SimDuration: durationpb.New(10 * time.Millisecond), Requests: map[string]int64{"cpu": 500}}}}); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "job sims to succeed", func() error {
		j, err := clientlib.Get(ctx, c, clientlib.Jobs, clientlib.Jobs.Prefix+"default/sims")
		if err == nil && j.GetStatus().GetPhase() != troupev1.JobPhase_JOB_PHASE_SUCCEEDED {
			err = fmt.Errorf("job status %v", j.GetStatus())
		}
		return err
	})
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var placed int
	for _, name := range []string{"batch-0", "batch-1"} {
		m := regexp.MustCompile(`troupe_scheduler_placements_total\{scheduler="` + name + `"\} (\d+)`).FindStringSubmatch(string(body))
		if m == nil {
			t.Fatalf("no placements of %s in the metrics:\n%s", name, body)
		}
		var n int
		fmt.Sscan(m[1], &n)
		placed += n
	}
	if placed < 20 {
		t.Fatalf("the schedulers report %d placements, want at least 20", placed)
	}
}
