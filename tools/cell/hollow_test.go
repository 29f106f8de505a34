package cell_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// With an exec agent and hollow machines, as `troupe up --hollow 3`: a
// job without the hollow toleration runs for real on the exec machine
// alone (and one that fits only a hollow machine is not placed, for the
// taint), while a job with it lands on hollow machines.
func TestHollowMachinesNeedToleration(t *testing.T) {
	e := start(t, cell.Config{ExecMachine: "local", ExecCapacity: map[string]int64{"cpu": 4000, "memory": 1 << 30},
		Hollow: 3, HollowCapacity: map[string]int64{"cpu": 16000, "memory": 4 << 30}})
	wait.Until(e.ctx, e.t, "4 machines registered", func() (bool, string) {
		ms, _, err := clientlib.List(e.ctx, e.c.Client, clientlib.Machines, "")
		if err != nil {
			return false, err.Error()
		}
		return len(ms) == 4, fmt.Sprintf("%d machines", len(ms))
	})
	ms, _, err := clientlib.List(e.ctx, e.c.Client, clientlib.Machines, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		name, labels, taints := m.GetMetadata().GetName(), m.GetMetadata().GetLabels(), m.GetSpec().GetTaints()
		_, labelled := labels[agent.HollowLabel]
		switch {
		case !strings.HasPrefix(name, "hollow-"):
			if labelled || len(taints) != 0 {
				t.Fatalf("exec machine %s: labels %v, taints %v", name, labels, taints)
			}
		case labels[agent.HollowLabel] != agent.HollowValue || len(taints) != 1 || !proto.Equal(taints[0], agent.HollowTaint()):
			t.Fatalf("hollow machine %s: labels %v, taints %v", name, labels, taints)
		}
	}

	// No toleration: real processes on the exec machine, every one, in
	// two rounds, for it takes four at once (the hollow machines would
	// take the others at once if they could).
	e.submit("real", &troupev1.JobSpec{Count: 8, Template: &troupev1.TaskTemplate{Command: "/bin/sh",
		Args: []string{"-c", `echo "real $TROUPE_TASK"; sleep 0.2`}, Requests: map[string]int64{"cpu": 1000}}})
	wait.Until(e.ctx, e.t, "the 8 tasks of real succeeded", func() (bool, string) {
		p := phases(e.tasks("real"))
		return p["TASK_PHASE_SUCCEEDED"] == 8, fmt.Sprint(p)
	})
	for _, tk := range e.tasks("real") {
		ref := clientlib.TaskRef("e2e", "real", tk.GetSpec().GetIndex())
		out, err := os.ReadFile(filepath.Join(e.c.Exec.TaskDir(ref), "stdout.log"))
		if m := tk.GetStatus().GetMachine(); m != "local" || strings.TrimSpace(string(out)) != "real "+ref {
			t.Fatalf("task %s ran on %q with output %q (%v), want on local", ref, m, out, err)
		}
	}

	// Too big for the exec machine and untolerating: no machine fits.
	big := func() *troupev1.JobSpec {
		return &troupev1.JobSpec{Count: 1, Template: &troupev1.TaskTemplate{Command: "/bin/false", SimDuration: durationpb.New(time.Hour),
			Requests: map[string]int64{"cpu": 8000}}}
	}
	e.submit("big", big())
	untolerated := "untolerated taint " + agent.HollowLabel + "=" + agent.HollowValue + ":NO_SCHEDULE"
	wait.Until(e.ctx, e.t, "big refused by the taint", func() (bool, string) {
		evs, _, err := clientlib.List(e.ctx, e.c.Client, clientlib.Events, "e2e/big/")
		if err != nil {
			return false, err.Error()
		}
		var saw []string
		for _, ev := range evs {
			if ev.GetReason() == "FailedScheduling" && strings.Contains(ev.GetMessage(), untolerated) {
				return true, ""
			}
			saw = append(saw, ev.GetReason()+": "+ev.GetMessage())
		}
		return false, strings.Join(saw, "; ")
	})

	// With the toleration: the same job lands on a hollow machine, and
	// one that also selects the label lands only on hollow ones.
	e.submit("big-hollow", tolerating(big()))
	onlyHollow := tolerating(&troupev1.JobSpec{Count: 6, Constraints: &troupev1.Constraints{MatchLabels: map[string]string{agent.HollowLabel: agent.HollowValue}},
		Template: &troupev1.TaskTemplate{Command: "/bin/false", SimDuration: durationpb.New(10 * time.Millisecond), Requests: map[string]int64{"cpu": 100}}})
	e.submit("only-hollow", onlyHollow)
	wait.Until(e.ctx, e.t, "big-hollow running, only-hollow succeeded", func() (bool, string) {
		b, o := phases(e.tasks("big-hollow")), phases(e.tasks("only-hollow"))
		return b["TASK_PHASE_RUNNING"] == 1 && o["TASK_PHASE_SUCCEEDED"] == 6, fmt.Sprint(b, o)
	})
	if m := e.tasks("big-hollow")[0].GetBinding().GetMachine(); !strings.HasPrefix(m, "hollow-") {
		t.Fatalf("big-hollow runs on %q, want a hollow machine", m)
	}
	for _, tk := range e.tasks("only-hollow") {
		if m := tk.GetStatus().GetMachine(); !strings.HasPrefix(m, "hollow-") {
			t.Fatalf("task %s ran on %q, want a hollow machine", tk.GetMetadata().GetName(), m)
		}
	}
	for _, tk := range e.tasks("big") {
		if tk.GetBinding() != nil {
			t.Fatalf("big was placed on %s", tk.GetBinding().GetMachine())
		}
	}
}
