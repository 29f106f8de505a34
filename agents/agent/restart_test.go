package agent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/runtime"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func TestRestarter(t *testing.T) {
	const (
		short = time.Second      // a run that crashed soon
		long  = 10 * time.Minute // a run that lasted the reset
		never = time.Duration(-1)
	)
	var (
		fail    = runtime.Exit{Code: 1}
		ok      = runtime.Exit{Code: 0}
		stopped = runtime.Exit{Code: 143, Killed: true}
	)
	type step struct {
		exit runtime.Exit
		ran  time.Duration
		want time.Duration // never: not restarted
	}
	batch, service := troupev1.JobType_JOB_TYPE_BATCH, troupev1.JobType_JOB_TYPE_SERVICE
	for _, tc := range []struct {
		name  string
		spec  *troupev1.TaskSpec
		steps []step
	}{
		{"on failure: failures only, max_retries - attempt times, doubling from the default",
			&troupev1.TaskSpec{Type: batch, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE, MaxRetries: 3, Attempt: 1},
			[]step{{fail, short, time.Second}, {fail, short, 2 * time.Second}, {fail, short, never}}},
		{"on failure: a success is final",
			&troupev1.TaskSpec{Type: batch, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE, MaxRetries: 3},
			[]step{{ok, short, never}}},
		{"always: without bound for a service, from retry_backoff to the cap, reset by a long run",
			&troupev1.TaskSpec{Type: service, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ALWAYS, RetryBackoff: durationpb.New(time.Minute)},
			[]step{{ok, short, time.Minute}, {fail, short, 2 * time.Minute}, {ok, short, 4 * time.Minute}, {ok, short, 5 * time.Minute},
				{ok, short, 5 * time.Minute}, {ok, long, time.Minute}, {ok, short, 2 * time.Minute}}},
		{"always: not what the agent stopped",
			&troupev1.TaskSpec{Type: service, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ALWAYS},
			[]step{{stopped, short, never}}},
		{"never", &troupev1.TaskSpec{Type: batch, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_NEVER, MaxRetries: 5},
			[]step{{fail, short, never}}},
		{"unspecified is never", &troupev1.TaskSpec{Type: service}, []step{{fail, short, never}}},
		{"no retries left for this attempt",
			&troupev1.TaskSpec{Type: batch, RestartPolicy: troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE, MaxRetries: 1, Attempt: 1},
			[]step{{fail, short, never}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestarter(tc.spec, Config{}.withDefaults())
			restarts := int32(0)
			for i, s := range tc.steps {
				d, again := r.restart(s.exit, s.ran)
				if again {
					restarts++
				}
				if got := map[bool]time.Duration{true: d, false: never}[again]; got != s.want || r.restarts != restarts {
					t.Fatalf("step %d (%+v after %v): back-off %v, want %v (restarts %d)", i, s.exit, s.ran, got, s.want, r.restarts)
				}
			}
		})
	}
}
