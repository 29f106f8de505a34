package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// startsRecorder is a simulated runtime that remembers the user each task
// was started as, and refuses the users in refuse as a runtime may (an
// exec runtime refuses root, and any other user when the agent is not
// root).
type startsRecorder struct {
	runtime.Sim
	refuse []string
	mu     sync.Mutex
	starts map[string][]string // task ref → users, one per start
}

func (r *startsRecorder) Start(ctx context.Context, b *troupev1.Binding, user string) (runtime.Process, error) {
	r.mu.Lock()
	r.starts[b.GetMetadata().GetName()] = append(r.starts[b.GetMetadata().GetName()], user)
	r.mu.Unlock()
	if slices.Contains(r.refuse, user) {
		return nil, fmt.Errorf("%w: the runtime will not run tasks as %q", runtime.ErrRefused, user)
	}
	return r.Sim.Start(ctx, b, user)
}

func (r *startsRecorder) startsOf(ref string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts[ref]
}

// A task runs as its template's user or the agent's default one. The agent
// refuses a user its namespace's RunAsPolicy does not list, any user but
// the default in a namespace without a policy or with an invalid one (it
// lists root: written raw, as a client bypassing validation could), and a
// user the runtime refuses: the process is never started, the Run fails at
// once (no restart, whatever the restart policy) with the reason, and the
// machine has a RunAsRefused event for each. A binding of root, also
// written raw, is not even read: it is never started, and the machine has
// an event saying why.
func TestRunAsPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c := clienttest.Start(ctx, t).Client()
	events, err := clientlib.NewEventRecorder(c, clientlib.DefaultEventRecorderConfig("agent"))
	if err != nil {
		t.Fatal(err)
	}
	go events.Run(ctx)
	rt := &startsRecorder{refuse: []string{"carol"}, starts: map[string][]string{}}
	a, err := agent.New(c, agent.Config{Machine: "m", Capacity: map[string]int64{"cpu": 1000, "memory": 1 << 30}, Runtime: rt,
		TaskUser: "nobody", Events: events, LeaseDuration: 10 * time.Second, RenewInterval: time.Second, StopGrace: time.Second,
		Now: time.Now, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := a.Run(ctx); ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
	}()

	if _, err := clientlib.Create(ctx, c, clientlib.RunAsPolicies, &troupev1.RunAsPolicy{Metadata: &troupev1.ObjectMeta{Name: "team"},
		Spec: &troupev1.RunAsPolicySpec{Users: []string{"alice", "carol"}}}); err != nil {
		t.Fatal(err)
	}
	clienttest.PutRaw(ctx, t, c, "/runas/sneaky", clienttest.Encoded(t, &troupev1.RunAsPolicy{Metadata: &troupev1.ObjectMeta{Name: "sneaky"},
		Spec: &troupev1.RunAsPolicySpec{Users: []string{"alice", "root"}}}))
	// The root binding goes first: once the others have run, the agent has
	// seen it.
	for _, task := range []struct{ ns, job, user string }{
		{"team", "root", "root"}, {"team", "default", ""}, {"team", "nobody", "nobody"}, {"team", "alice", "alice"},
		{"team", "mallory", "mallory"}, {"team", "carol", "carol"}, {"other", "alice", "alice"}, {"sneaky", "alice", "alice"},
	} {
		ref := clientlib.TaskRef(task.ns, task.job, 0)
		clienttest.PutRaw(ctx, t, c, "/bindings/m/"+ref, clienttest.Encoded(t, &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: ref}, Machine: "m",
			Task: &troupev1.TaskSpec{Job: task.job, Type: troupev1.JobType_JOB_TYPE_BATCH, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE,
				MaxRetries: 3, Template: &troupev1.TaskTemplate{Command: "x", User: task.user, SimDuration: durationpb.New(time.Millisecond)}}}))
	}

	for ref, user := range map[string]string{"team/default/0": "nobody", "team/nobody/0": "nobody", "team/alice/0": "alice"} {
		if r := waitFinished(ctx, t, c, ref); r.GetPhase() != troupev1.RunPhase_RUN_PHASE_SUCCEEDED {
			t.Errorf("%s: run %v, want SUCCEEDED", ref, r)
		}
		if got := rt.startsOf(ref); len(got) != 1 || got[0] != user {
			t.Errorf("%s started as %v, want once as %s", ref, got, user)
		}
	}
	refused := map[string]string{
		"team/mallory/0": `the RunAsPolicy of namespace "team" does not list user "mallory" (it lists alice, carol)`,
		"team/carol/0":   `the runtime will not run tasks as "carol"`,
		"other/alice/0":  `namespace "other" has no RunAsPolicy, so its tasks run only as "nobody", not as "alice"`,
		"sneaky/alice/0": `the RunAsPolicy of namespace "sneaky" is not valid, so its tasks run only as "nobody", not as "alice"`,
	}
	for ref, why := range refused {
		r := waitFinished(ctx, t, c, ref)
		if r.GetPhase() != troupev1.RunPhase_RUN_PHASE_FAILED || r.GetRestarts() != 0 || r.GetExitCode() != -1 ||
			!strings.HasPrefix(r.GetReason(), "refused: ") || !strings.Contains(r.GetReason(), why) {
			t.Errorf("%s: run %v, want FAILED without restarts, reason %q", ref, r, why)
		}
		// The runtime was asked once for carol's task, and refused it; the
		// agent kept the others from it.
		want := 0
		if ref == "team/carol/0" {
			want = 1
		}
		if got := len(rt.startsOf(ref)); got != want {
			t.Errorf("%s: %d start(s) asked of the runtime, want %d", ref, got, want)
		}
	}
	if got := rt.startsOf("team/root/0"); len(got) != 0 {
		t.Errorf("team/root/0 started as %v", got)
	}
	// One event per refusal, and one for the root binding, on the machine.
	clienttest.Until(ctx, t, func() error {
		evs, _, err := clientlib.List(ctx, c, clientlib.MachineEvents, "m/")
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		var saw []string
		for _, e := range evs {
			saw = append(saw, e.GetReason()+": "+e.GetMessage())
			if e.GetType() != clientlib.EventWarning || e.GetInvolvedName() != "m" {
				continue
			}
			for ref, why := range refused {
				if e.GetReason() == "RunAsRefused" && strings.HasPrefix(e.GetMessage(), "Task "+ref+" (attempt 0) not started: refused: ") &&
					strings.Contains(e.GetMessage(), why) {
					seen[ref] = true
				}
			}
			if e.GetReason() == clientlib.ReasonUnreadable && strings.Contains(e.GetMessage(), "/bindings/m/team/root/0") &&
				strings.Contains(e.GetMessage(), "tasks never run as root") {
				seen["team/root/0"] = true
			}
		}
		if len(seen) != len(refused)+1 {
			return fmt.Errorf("want a RunAsRefused event per refused task and an Unreadable one for team/root/0, have %q", saw)
		}
		return nil
	})
}

// waitFinished waits for the Run of task ref on machine m to reach a
// final phase.
func waitFinished(ctx context.Context, t *testing.T, c *clientlib.Client, ref string) *troupev1.Run {
	t.Helper()
	var run *troupev1.Run
	clienttest.Until(ctx, t, func() error {
		r, err := clientlib.Get(ctx, c, clientlib.Runs, clientlib.Runs.Prefix+"m/"+ref)
		if err == nil && r.GetFinished() == nil {
			err = fmt.Errorf("run of %s not finished: %v", ref, r)
		}
		run = r
		return err
	})
	return run
}
