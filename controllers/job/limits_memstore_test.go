package job_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// taskCount is a condition on how many tasks job has.
func (c *memCell) taskCount(job string, want int) func() error {
	return func() error {
		if n := len(c.tasks(job)); n != want {
			return fmt.Errorf("%d tasks, want %d", n, want)
		}
		return nil
	}
}

// The job controller is where the cell's policies bind: a job written by
// a client that never loaded them (here the in-memory store itself, which
// enforces the built-in rules alone) gets no task while it breaks them
// (DefaultJobLimits while the cell stores no job-limits policy), its
// status says which rule of which policy, and one Refused warning says
// so. A change of the policy has it judged again; once it passes, its
// tasks are created. A limit lowered later blocks no job already
// admitted. The test syncs the queued jobs itself, each from settled
// caches, so every step is exact.
func TestPoliciesRefuseJobsOverMemstore(t *testing.T) {
	ctx := t.Context()
	clock := cachetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newMemCell(ctx, t, clock.Now, cache.QueueConfig{BaseDelay: time.Second, MaxDelay: time.Minute, Clock: clock})
	c.startCaches()
	create := func(j *troupev1.Job) {
		t.Helper()
		if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, j); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(why string) string {
		return clientlib.AdmissionRefused + "spec.count: " + why + " (policy/job-limits)"
	}

	// 20,000 tasks: past the default limits.
	create(newJob("huge", troupev1.JobType_JOB_TYPE_BATCH, 20_000, 0))
	c.syncAll(0)
	c.check("huge gets no task", c.taskCount("huge", 0))
	defaults := fmt.Sprintf("a job has at most %d tasks (policy job-limits; store your own to change it)", clientlib.DefaultMaxTasks)
	c.check("huge refused by the defaults", c.admission("huge", "PENDING", 0, refused(defaults)))

	// The cell stores its own limits: huge is judged again, under them.
	limits := &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: clientlib.JobLimitsPolicy}}
	limit := func(n int) {
		t.Helper()
		limits.Spec = &troupev1.ValidationPolicySpec{Kinds: []string{clientlib.Jobs.Name}, Rules: []*troupev1.ValidationRule{{
			Expression: fmt.Sprintf("object.spec.count <= %d", n), FieldPath: "spec.count", Message: fmt.Sprintf("at most %d tasks here", n)}}}
		var err error
		if limits.Metadata.Version == 0 {
			limits, err = clientlib.Create(ctx, c.s, clientlib.ValidationPolicies, limits)
		} else {
			limits, err = clientlib.Update(ctx, c.s, clientlib.ValidationPolicies, limits)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	limit(5)
	c.syncAll(0)
	c.check("huge refused by the cell's limits", c.admission("huge", "PENDING", 0, refused("at most 5 tasks here")))

	create(newJob("six", troupev1.JobType_JOB_TYPE_BATCH, 6, 0))
	c.syncAll(0)
	c.check("six gets no task", c.taskCount("six", 0))
	c.check("six refused", c.admission("six", "PENDING", 0, refused("at most 5 tasks here")))
	six, err := clientlib.Get(ctx, c.s, clientlib.Jobs, "/jobs/ns/six")
	if err != nil {
		t.Fatal(err)
	}
	// Synced again with nothing new to say: nothing is written.
	six.Metadata.Labels = map[string]string{"touched": "yes"}
	if six, err = clientlib.Update(ctx, c.s, clientlib.Jobs, six); err != nil {
		t.Fatal(err)
	}
	c.syncAll(0)
	if j, err := clientlib.Get(ctx, c.s, clientlib.Jobs, "/jobs/ns/six"); err != nil || j.GetMetadata().GetVersion() != six.GetMetadata().GetVersion() {
		t.Fatalf("six %v (%v): want its status left alone at version %d", j, err, six.GetMetadata().GetVersion())
	}

	// Raised: six proceeds, its admission cleared; huge still waits.
	limit(10)
	c.syncAll(0)
	c.check("six created", c.taskCount("six", 6))
	c.check("six admitted", c.admission("six", "PENDING", 6, ""))
	c.check("huge gets no task", c.taskCount("huge", 0))
	c.check("huge refused", c.admission("huge", "PENDING", 0, refused("at most 10 tasks here")))

	// Lowered below six's count: six, admitted, is not blocked; a task of
	// it gone missing is created again.
	limit(2)
	c.syncAll(0)
	c.check("huge refused", c.admission("huge", "PENDING", 0, refused("at most 2 tasks here")))
	if err := clientlib.Delete(ctx, c.s, clientlib.Tasks, c.tasks("six")[5]); err != nil {
		t.Fatal(err)
	}
	c.syncAll(0)
	c.check("six's task created again", c.taskCount("six", 6))
	c.check("six still admitted", c.admission("six", "PENDING", 6, ""))

	// The events, written in the background in the order recorded: once
	// the last one is there, so are the others. One Refused warning per
	// verdict, each written once.
	c.until("six's missing task created", c.event("six", "six", "TasksCreated", "Created 1 task(s) of 6"))
	refusals := func(job string) []string {
		es, _, err := clientlib.List(ctx, c.s, clientlib.Events, "ns/"+job+"/")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if e.GetReason() == "Refused" {
				if e.GetType() != clientlib.EventWarning {
					t.Errorf("%s: a %s Refused event", job, e.GetType())
				}
				_, why, _ := strings.Cut(e.GetMessage(), "(edit it, or the policy): ")
				out = append(out, fmt.Sprintf("%d× %s", e.GetCount(), why))
			}
		}
		slices.Sort(out) // their names order events of the same time (the clock stands still) at random
		return out
	}
	for job, want := range map[string][]string{
		"six": {"1× spec.count: at most 5 tasks here (policy/job-limits)"},
		"huge": {"1× spec.count: a job has at most 10000 tasks (policy job-limits; store your own to change it) (policy/job-limits)",
			"1× spec.count: at most 10 tasks here (policy/job-limits)", "1× spec.count: at most 2 tasks here (policy/job-limits)",
			"1× spec.count: at most 5 tasks here (policy/job-limits)"},
	} {
		if got := refusals(job); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s's Refused events:\n%s\nwant\n%s", job, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
