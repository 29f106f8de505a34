package job_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/cache"
	"github.com/troupe-cluster/troupe/clientlib/cache/cachetest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// admission is a condition on job's status: its phase, pending count and
// admission message.
func (c *memCell) admission(job, phase string, pending int32, msg string) func() error {
	return func() error {
		j, err := clientlib.Get(c.ctx, c.s, clientlib.Jobs, "/jobs/ns/"+job)
		if err != nil {
			return err
		}
		st := j.GetStatus()
		if got := st.GetPhase().String(); got != "JOB_PHASE_"+phase || st.GetPending() != pending || st.GetAdmission() != msg {
			return fmt.Errorf("job %s: %s, %d pending, admission %q; want %s, %d pending, admission %q", job, got, st.GetPending(),
				st.GetAdmission(), phase, pending, msg)
		}
		return nil
	}
}

// quota is a condition on the namespace's quota counters (as
// clienttest.QuotaCounters prints them), which must also equal the
// charges of its tasks.
func (c *memCell) quota(want string) func() error {
	return func() error {
		got, err := clienttest.QuotaCounters(c.ctx, c.s, "ns")
		if err == nil && got != want {
			err = fmt.Errorf("quota counters %s, want %s", got, want)
		}
		return errors.Join(err, clienttest.CheckQuotaCharges(c.ctx, c.s, "ns"))
	}
}

// count is a condition: job has n tasks.
func (c *memCell) count(job string, n int) func() error {
	return func() error {
		if got := len(c.tasks(job)); got != n {
			return fmt.Errorf("job %s has %d tasks, want %d", job, got, n)
		}
		return nil
	}
}

// A job over its namespace's quota stays pending: the tasks that fit are
// created, the job's status.admission says what is full and how many
// tasks wait, with a QuotaExceeded event. Raising the quota admits the
// rest at once (the controller follows quotas), and the message goes. A
// task that ends gives its charge back, which admits another job's
// waiting task at once (the controller follows charges given back);
// deleting the jobs releases everything. Step by step on a manual clock,
// which never reaches the waiting jobs' back-off: what admits them is
// the wake-up.
func TestJobWaitsForQuota(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	clock := cachetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newMemCell(ctx, t, clock.Now, cache.QueueConfig{BaseDelay: time.Second, MaxDelay: time.Minute, Clock: clock})
	c.startCaches()
	q, err := clientlib.Create(ctx, c.s, clientlib.Quotas, &troupev1.Quota{Metadata: &troupev1.ObjectMeta{Name: "ns"},
		Spec: &troupev1.QuotaSpec{NonProduction: map[string]int64{clientlib.QuotaTasks: 2, "cpu": 10_000}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, newJob("q", troupev1.JobType_JOB_TYPE_BATCH, 3, 0)); err != nil {
		t.Fatal(err)
	}
	c.syncAll(time.Second) // looked at again after the back-off
	c.check("2 of 3 created", c.count("q", 2))
	c.check("q waits", c.admission("q", "PENDING", 3, "namespace ns non-production quota: tasks 2 used of 2, 1 task(s) waiting"))
	c.check("charged", c.quota("non-production/cpu=2000 non-production/tasks=2"))
	c.until("QuotaExceeded", c.event("q", "q", "QuotaExceeded", "tasks 2 used of 2, 1 task(s) waiting"))

	q.Spec.NonProduction[clientlib.QuotaTasks] = 3
	if _, err := clientlib.Update(ctx, c.s, clientlib.Quotas, q); err != nil {
		t.Fatal(err)
	}
	c.syncAll(time.Second) // the back-off is still ahead
	c.check("all created", c.count("q", 3))
	c.check("q admitted", c.admission("q", "PENDING", 3, ""))
	c.check("charged", c.quota("non-production/cpu=3000 non-production/tasks=3"))

	if _, err := clientlib.Create(ctx, c.s, clientlib.Jobs, newJob("w", troupev1.JobType_JOB_TYPE_BATCH, 1, 0)); err != nil {
		t.Fatal(err)
	}
	c.syncAll(time.Second)
	c.check("w waits", c.admission("w", "PENDING", 1, "namespace ns non-production quota: tasks 3 used of 3, 1 task(s) waiting"))
	c.check("none of w", c.count("w", 0))

	c.bind("q", 0)
	c.report("q", 0, troupev1.RunPhase_RUN_PHASE_SUCCEEDED, 0)
	c.syncAll(time.Second)
	c.check("w admitted", c.admission("w", "PENDING", 1, ""))
	c.check("w's task", c.count("w", 1))
	c.check("q's ended task released, w's charged", c.quota("non-production/cpu=3000 non-production/tasks=3"))

	for _, name := range []string{"q", "w"} {
		if err := clientlib.Delete(ctx, c.s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"}}); err != nil {
			t.Fatal(err)
		}
	}
	c.syncAll(time.Second)
	c.check("q's tasks deleted", c.count("q", 0))
	c.check("w's tasks deleted", c.count("w", 0))
	c.check("all released", c.quota("non-production/cpu=0 non-production/tasks=0"))
}

// Several job controllers create the tasks of many jobs of one
// namespace at once, all competing for its quota, and are all restarted
// while they work. After every commit (audited from the store's change
// sets) each counter equals the charges of the tasks and stays within
// its limit; the quota fills exactly, the jobs left out say so, deleting
// some jobs admits the others, and deleting the rest brings every
// counter back to zero.
func TestControllersNeverExceedQuota(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s := memstore.New(time.Now, time.Minute)
	audit := clienttest.NewQuotaAudit()
	s.Observe(audit.Observe)
	if _, err := clientlib.Create(ctx, s, clientlib.Quotas, &troupev1.Quota{Metadata: &troupev1.ObjectMeta{Name: "ns"},
		Spec: &troupev1.QuotaSpec{Production: map[string]int64{clientlib.QuotaTasks: 4},
			NonProduction: map[string]int64{clientlib.QuotaTasks: 10, "cpu": 9500}}}); err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for i := range 6 {
		j := newJob(fmt.Sprintf("j%d", i), troupev1.JobType_JOB_TYPE_BATCH, 4, 0)
		if i == 5 {
			j.Spec.Priority, j.Spec.Count = clientlib.ProductionPriority, 6
		}
		if _, err := clientlib.Create(ctx, s, clientlib.Jobs, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j.GetMetadata().GetName())
	}

	// A generation of three controllers, two workers each.
	start := func() (stop func()) {
		gctx, gcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 3 {
			ctl, err := job.New(s, job.Config{Now: time.Now, Logger: zap.NewNop(), Workers: 2,
				Queue: cache.QueueConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if err := ctl.Run(gctx); !errors.Is(err, context.Canceled) {
					t.Errorf("controller: %v", err)
				}
			})
		}
		return func() { gcancel(); wg.Wait() }
	}
	usage := func(want string) func() (bool, string) {
		return func() (bool, string) {
			got, err := clienttest.QuotaCounters(ctx, s, "ns")
			return err == nil && got == want, fmt.Sprint(got, err)
		}
	}
	waiting := func(names ...string) func() (bool, string) {
		return func() (bool, string) {
			var saw []string
			ok := true
			for _, name := range jobs {
				j, err := clientlib.Get(ctx, s, clientlib.Jobs, "/jobs/ns/"+name)
				if errors.Is(err, clientlib.ErrNotFound) {
					continue
				}
				if err != nil {
					return false, err.Error()
				}
				adm := j.GetStatus().GetAdmission()
				want := false
				for _, n := range names {
					want = want || n == name
				}
				ok = ok && (adm != "") == want
				saw = append(saw, fmt.Sprintf("%s: %q", name, adm))
			}
			return ok, fmt.Sprint(saw)
		}
	}

	stop := start()
	wait.Until(ctx, t, "some tasks charged", func() (bool, string) {
		n := audit.Counters()[clientlib.QuotaUsedKey("ns", clientlib.BandNonProduction, clientlib.QuotaTasks)]
		return n >= 3, fmt.Sprint(n, " charged")
	})
	stop() // every controller, in the middle of its work
	stop = start()
	defer func() { stop() }()
	// 24 non-production tasks of 1000m want in: 9 fit the cpu limit;
	// 6 production tasks, 4 fit.
	wait.Until(ctx, t, "the quota full", usage("non-production/cpu=9000 non-production/tasks=9 production/cpu=4000 production/tasks=4"))
	// Which jobs wait depends on who won the races; at least three of the
	// non-production ones and the production one do.
	wait.Until(ctx, t, "the jobs left out say so", func() (bool, string) {
		n := 0
		var saw []string
		for _, name := range jobs {
			j, err := clientlib.Get(ctx, s, clientlib.Jobs, "/jobs/ns/"+name)
			if err != nil {
				return false, err.Error()
			}
			tasks, _, err := clientlib.List(ctx, s, clientlib.Tasks, "ns/"+name+"/")
			if err != nil {
				return false, err.Error()
			}
			short := len(tasks) < int(j.GetSpec().GetCount())
			if short != (j.GetStatus().GetAdmission() != "") {
				return false, fmt.Sprintf("job %s: %d tasks of %d, admission %q", name, len(tasks), j.GetSpec().GetCount(), j.GetStatus().GetAdmission())
			}
			if short {
				n++
			}
			saw = append(saw, fmt.Sprintf("%s: %d %q", name, len(tasks), j.GetStatus().GetAdmission()))
		}
		return n >= 4, fmt.Sprint(saw)
	})

	// Three non-production jobs go: the other two (8 tasks) fit.
	for _, name := range jobs[:3] {
		if err := clientlib.Delete(ctx, s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"}}); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(ctx, t, "the others admitted", usage("non-production/cpu=8000 non-production/tasks=8 production/cpu=4000 production/tasks=4"))
	wait.Until(ctx, t, "only the production job waits", waiting(jobs[5]))

	for _, name := range jobs[3:] {
		if err := clientlib.Delete(ctx, s, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"}}); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(ctx, t, "everything released", usage("non-production/cpu=0 non-production/tasks=0 production/cpu=0 production/tasks=0"))
	wait.Until(ctx, t, "no task left", func() (bool, string) {
		ts, _, err := clientlib.List(ctx, s, clientlib.Tasks, "ns/")
		return err == nil && len(ts) == 0, fmt.Sprint(len(ts), " tasks ", err)
	})
	if err := audit.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits audited", audit.Commits())
}
