package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	agentpkg "github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// TestAgentHollow runs `troupe agent --hollow 3` as a process against a
// store: three machines register with their leases, one runs a task bound
// to it, and SIGTERM stops the agent cleanly.
func TestAgentHollow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the troupe binary")
	}
	bin := buildTroupe(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	lc := clienttest.Start(ctx, t)
	c := lc.Client()
	// --store: the deprecated name of --endpoint still works.
	agent := exec.Command(bin, append([]string{"agent", "--store", lc.EndpointList(), "--machine", "rack1",
		"--hollow", "3", "--capacity", "cpu=8000,memory=16Gi", "--labels", "zone=z1"},
		lc.Flags(pki.Identity{Role: pki.RoleAgent, Name: "rack1-hollow-*"})...)...)
	agent.Stdout, agent.Stderr = os.Stderr, os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Process.Kill()
	names := []string{"rack1-hollow-0000", "rack1-hollow-0001", "rack1-hollow-0002"}
	wait.Until(ctx, t, "the hollow machines and their leases", func() error {
		for _, n := range names {
			m, err := clientlib.Get(ctx, c, clientlib.Machines, clientlib.Machines.Prefix+n)
			if err != nil {
				return fmt.Errorf("machine %s: %w", n, err)
			}
			if m.GetSpec().GetCapacity()["memory"] != 16<<30 || m.GetMetadata().GetLabels()["zone"] != "z1" || m.GetMetadata().GetLabels()[agentpkg.HollowLabel] != "true" ||
				len(m.GetSpec().GetTaints()) != 1 || !proto.Equal(m.GetSpec().GetTaints()[0], agentpkg.HollowTaint()) {
				t.Fatalf("machine %v", m)
			}
			if _, err := clientlib.Get(ctx, c, clientlib.Leases, clientlib.Leases.Prefix+n); err != nil {
				return fmt.Errorf("lease of %s: %w", n, err)
			}
		}
		return nil
	})
	if ms, _, err := clientlib.List(ctx, c, clientlib.Machines, ""); err != nil || len(ms) != 3 {
		t.Fatalf("%d machines (%v), want 3", len(ms), err)
	}
	if _, err := clientlib.Create(ctx, c, clientlib.Bindings, &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "ns/sim/0"}, Machine: names[1],
		Task: &troupev1.TaskSpec{Job: "sim", Template: &troupev1.TaskTemplate{Command: "x", SimDuration: durationpb.New(time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "the run of ns/sim/0 to succeed", func() error {
		r, err := clientlib.Get(ctx, c, clientlib.Runs, clientlib.Runs.Prefix+names[1]+"/ns/sim/0")
		if err == nil && r.GetPhase() != troupev1.RunPhase_RUN_PHASE_SUCCEEDED {
			err = fmt.Errorf("run %v", r)
		}
		return err
	})
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent did not stop cleanly on SIGTERM: %v", err)
	}
}

func TestParseResources(t *testing.T) {
	want := map[string]int64{"cpu": 4000, "memory": 8 << 30, "gpu": 2, "disk": 10e9}
	for _, in := range []string{"cpu=4000,memory=8Gi,gpu=2,disk=10G", "cpu=4000m,memory=8Gi,gpu=2,disk=10G"} {
		got, err := parseResources(in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: got %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"cpu", "cpu=4 cores", "memory=-1Gi", "=3", "memory=1m"} {
		if _, err := parseResources(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
