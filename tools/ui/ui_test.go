package ui

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

const (
	ready = troupev1.MachinePhase_MACHINE_PHASE_READY
	lost  = troupev1.MachinePhase_MACHINE_PHASE_LOST
)

// seedCell is a small cell with one of everything the pages show:
// machines ready, lost and cordoned, CPU allocated on two; a running job
// of three tasks bound by batch-0 after 1, 2 and 3 s, with a conflict; a
// pending job its scheduler says is unschedulable; batch-0's records 30 s
// apart; a lease.
func seedCell(f *fixture) {
	f.machine("m1", 4000, ready, false)
	f.machine("m2", 2000, ready, false)
	f.machine("m3", 4000, lost, false)
	f.machine("m4", 4000, ready, true)
	f.alloc("m1", "cpu", 1000)
	f.alloc("m2", "cpu", 2000)
	f.lease("m1", epoch.Add(-4*time.Second), 10*time.Second)
	f.job("default", "web", 3, &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_RUNNING, Running: 3})
	f.job("default", "big", 2, &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_PENDING, Pending: 2})
	for i := range int32(3) {
		f.task("default", "web", i, "m1", "batch-0", time.Duration(i+1)*time.Second, troupev1.TaskPhase_TASK_PHASE_RUNNING)
	}
	f.task("default", "big", 0, "", "", 0, troupev1.TaskPhase_TASK_PHASE_PENDING)
	f.task("default", "big", 1, "", "", 0, troupev1.TaskPhase_TASK_PHASE_PENDING)
	must[*troupev1.JobScheduling](f.t)(clientlib.Create(f.ctx, f.s, clientlib.JobSchedulings, &troupev1.JobScheduling{
		Metadata: &troupev1.ObjectMeta{Name: "big", Namespace: "default"},
		Status: &troupev1.SchedulingStatus{Scheduler: "batch-0", Reason: "Unschedulable", Message: "0/4 machines fit: 3× ResourceFit",
			Refused: map[string]int32{"ResourceFit": 3, "Schedulable": 1}, Machines: 4, Unplaced: 2, Time: timestamppb.New(epoch)}}))
	f.event("default", "web", "0001", "Conflict", "batch-0", "1 placement(s) lost to concurrent commits", 2, epoch.Add(-10*time.Second))
	f.event("default", "web", "0002", "Scheduled", "batch-0", "3 task(s) placed on 1 machine(s) by batch-0", 1, epoch.Add(-5*time.Second))
	f.record("batch-0", epoch.Add(-30*time.Second), 5, 1, 10, 0.02)
}

// newCell is a fixture of seedCell's cell, where batch-0 publishes its
// second record once the aggregator follows the cell.
func newCell(t *testing.T) *fixture {
	f := newFixture(t, seedCell)
	f.record("batch-0", epoch, 12, 4, 40, 0.05)
	f.settle()
	return f
}

// The aggregates are known answers of the seeded cell: the grid's bytes,
// the machine totals, phase counts, a scheduler's figures between its
// records and its waits.
func TestAggregatesOfASmallCell(t *testing.T) {
	f := newCell(t)
	g := f.agg.grid()
	if want := []string{"m1", "m2", "m3", "m4"}; !slices.Equal(g.names, want) {
		t.Fatalf("grid names %v, want %v", g.names, want)
	}
	if want := []byte{25, 0, 100, 0, 0, flagLost, 0, flagCordoned}; !slices.Equal(g.cells, want) {
		t.Fatalf("grid cells %v, want %v", g.cells, want)
	}
	v := f.agg.cellView(url.Values{})
	if m := v.Machines; m.Total != 4 || m.Ready != 3 || m.Lost != 1 || m.Cordoned != 1 || m.CPUAlloc != 3000 || m.CPUCap != 14000 {
		t.Fatalf("machine totals %+v", m)
	}
	counts := map[string]int{}
	for _, p := range v.TaskParts {
		counts[p.Label] = p.Count
	}
	if counts["RUNNING"] != 3 || counts["PENDING"] != 2 || v.Tasks != 5 {
		t.Fatalf("task phases %v of %d", counts, v.Tasks)
	}
	if len(v.Jobs) != 2 || v.Jobs[0].Name != "big" || v.Jobs[0].Reason != "Unschedulable" || v.Jobs[1].Phase != "RUNNING" {
		t.Fatalf("jobs %+v", v.Jobs)
	}
	if len(v.Schedulers) != 1 {
		t.Fatalf("schedulers %+v", v.Schedulers)
	}
	s := v.Schedulers[0]
	// 30 placements and 3 conflicts in 30 s between the records.
	if s.Placements != 40 || s.RecentRate != "1.00" || s.RecentFraction != "0.100" || s.Busyness != "0.050" || s.Fraction != "0.100" {
		t.Fatalf("scheduler figures %+v", s)
	}
	if s.WaitMedian != "2.0s" || s.WaitP90 != "3.0s" || s.Waits != 3 {
		t.Fatalf("waits: median %s, p90 %s of %d", s.WaitMedian, s.WaitP90, s.Waits)
	}

	// A lease that runs out marks its machine until the node controller
	// marks it lost.
	f.clock.Set(epoch.Add(7 * time.Second))
	if g := f.agg.grid(); g.cells[1] != flagExpired {
		t.Fatalf("m1's flags after its lease ran out: %d", g.cells[1])
	}
}

// The pages show the cell: the figures that matter, each in its place.
func TestPages(t *testing.T) {
	f := newCell(t)
	for _, c := range []struct {
		path  string
		code  int
		wants []string
	}{
		{"/ui/", 200, []string{`id="machine-count">4<`, `3 ready`, `1 lost`, `1 cordoned`, `id="cpu-allocated">21%<`, `id="job-default-web"`,
			`data-phase="RUNNING"`, `Unschedulable`, `id="sched-batch-0"`, `data-figure="placements">40<`, `<svg class="spark"`, `data-live="/ui/live/"`}},
		{"/ui/?status=pending", 200, []string{`id="job-default-big"`, `class="chip ph-pending on"`}},
		{"/ui/job/default/web", 200, []string{`id="job-phase" data-phase="RUNNING"`, `id="task-web-0"`, `id="task-web-1"`, `1–2 of 3 (page 1 of 2)`,
			`href="?page=2"`, `id="job-conflicts">2<`, `1 placement(s) lost`, `href="/ui/machine/m1"`, `/bin/sh -c echo hi`}},
		{"/ui/job/default/web?page=2", 200, []string{`id="task-web-2"`, `3–3 of 3`}},
		{"/ui/job/default/big", 200, []string{`Unschedulable`, `0/4 machines fit`, `<td>ResourceFit</td><td class="num">3</td>`}},
		{"/ui/machine/m1", 200, []string{`id="machine-phase">READY<`, `runs out in 6s`, `id="machine-tasks-count">3<`, `1000m (25%)`, `zone=z1`}},
		{"/ui/machine/m4", 200, []string{`id="machine-cordoned"`}},
		{"/ui/scheduler/batch-0", 200, []string{`id="sched-placements">40<`, `id="sched-conflicts">4<`, `1.00/s over the last minute`,
			`id="sched-wait">2.0s<`, `default/big`, `class="mine"`, `0/4 machines fit`, `1 placement(s) lost`, `12 (0.23/s over the last 10m)`}},
		{"/ui/job/default/nope", 404, []string{`Job default/nope is not in the cell (yet)`, `data-live="/ui/live/job/default/nope"`}},
		{"/ui/machine/nope", 404, []string{`Machine nope is not in the cell`}},
		{"/ui/elsewhere", 404, nil},
		{"/ui/static/ui.js", 200, []string{"EventSource"}},
		{"/ui/static/ui.css", 200, []string{"--accent"}},
	} {
		code, body := f.get(c.path)
		if code != c.code {
			t.Errorf("%s: %d, want %d", c.path, code, c.code)
		}
		for _, w := range c.wants {
			if !strings.Contains(body, w) {
				t.Errorf("%s: no %q in\n%s", c.path, w, body)
			}
		}
	}
	// The template's command is not kept with the tasks: the pages never
	// show it, and a large cell's tasks take less memory.
	if _, body := f.get("/ui/job/default/web"); strings.Contains(body, "secret") {
		t.Errorf("a task's command is on the page")
	}
}

// The server only reads, and on loopback answers only requests for
// loopback names (DNS rebinding).
func TestServerRefuses(t *testing.T) {
	f := newFixture(t, nil)
	resp, err := http.Post(f.web.URL+"/ui/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, f.web.URL+"/ui/", nil)
	req.Host = "rebound.example:80"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host rebound.example: %s", resp.Status)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for host, want := range map[string]bool{"localhost:7200": true, "127.0.0.1": true, "[::1]:80": true, "ui.localhost": true, "10.0.0.1:7200": false, "example.com": false} {
		if got := Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v", host, got)
		}
	}
}

// A page's stream follows the cell: the first events say everything,
// later ones what changed: a new job in its section, a machine's CPU as
// one slot of the grid, a new machine as the whole grid with its name.
func TestLiveStreamFollowsTheCell(t *testing.T) {
	f := newCell(t)
	s := f.live("/ui/live/")
	s.until("the cell", func(s *stream) error {
		if err := contains("cell-summary", `id="machine-count">4<`)(s); err != nil {
			return err
		}
		if !slices.Equal(s.grid, []byte{25, 0, 100, 0, 0, flagLost, 0, flagCordoned}) {
			return errorf("grid %v", s.grid)
		}
		return contains("cell-jobs", `id="job-default-web"`)(s)
	})

	f.job("default", "late", 1, nil)
	f.settle()
	s.until("the new job", contains("cell-jobs", `id="job-default-late"`, `data-phase="PENDING"`))

	f.alloc("m1", "cpu", 2000)
	f.settle()
	s.until("m1 at 75%", func(s *stream) error {
		if s.grid[0] != 75 {
			return errorf("m1 at %d%%", s.grid[0])
		}
		return nil
	})

	f.machine("m0", 1000, ready, false)
	f.settle()
	s.until("machine m0 first", func(s *stream) error {
		if len(s.names) != 5 || s.names[0] != "m0" || len(s.grid) != 10 {
			return errorf("names %v, grid %v", s.names, s.grid)
		}
		return contains("cell-summary", `id="machine-count">5<`)(s)
	})

	// A job page follows its job, paged as it was opened.
	j := f.live("/ui/live/job/default/web?page=2")
	j.until("web's last task", contains("job-tasks", `id="task-web-2"`))
	f.record("batch-0", epoch.Add(10*time.Second), 14, 4, 41, 0.05)
	f.event("default", "web", "0003", "Conflict", "batch-0", "2 placement(s) lost to concurrent commits", 1, epoch.Add(9*time.Second))
	f.settle()
	j.until("the new conflict", contains("job-summary", `id="job-conflicts">3<`))
	if strings.Contains(j.sections["job-tasks"], "task-web-0") {
		t.Errorf("page 2 of web's tasks shows its first")
	}
}

// A stream sends nothing while nothing it shows changes: a lease renewal
// wakes the cell page's stream, which sends no event for it.
func TestLiveStreamSendsOnlyChanges(t *testing.T) {
	f := newCell(t)
	s := f.live("/ui/live/")
	s.until("the grid", func(s *stream) error {
		if len(s.grid) != 8 {
			return errorf("grid %v", s.grid)
		}
		return nil
	})
	if n, u := f.srv.streams.Load(), f.srv.updates.Load(); n != 1 || u != 2 {
		t.Errorf("%d streams, %d updates sent; want 1 and 2 (the sections, the grid)", n, u)
	}
	must[*troupev1.Lease](t)(clientlib.Create(f.ctx, f.s, clientlib.Leases, &troupev1.Lease{
		Metadata: &troupev1.ObjectMeta{Name: "m2"}, Holder: "agent/m2", Renewed: timestamppb.New(epoch), Duration: durationpb.New(time.Second)}))
	f.job("default", "after", 1, nil)
	f.settle()
	// The next event is the job's: the lease sent nothing.
	name, err := s.next()
	if err != nil || name != "sections" || !strings.Contains(s.sections["cell-jobs"], "job-default-after") {
		t.Fatalf("next event %q (%v): %s", name, err, s.sections["cell-jobs"])
	}
}

// Scheduler figures between records: rates and conflict fractions of
// each interval, a restart (counters going down) left out, the recent
// span from the earliest record within it.
func TestSchedulerSamples(t *testing.T) {
	var ss samples
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	for _, s := range []sample{
		{at: at(0), placements: 0},
		{at: at(10), placements: 20, conflicts: 2, attempts: 5},
		{at: at(20), placements: 50, conflicts: 2, attempts: 9},
		{at: at(20), placements: 99}, // not later: dropped
		{at: at(30), placements: 5},  // restarted
		{at: at(40), placements: 15, conflicts: 5},
	} {
		ss.add(s, time.Minute)
	}
	if len(ss) != 5 {
		t.Fatalf("%d samples", len(ss))
	}
	sr := ss.series()
	var rates, fractions []float64
	for i := range sr.rate {
		rates, fractions = append(rates, sr.rate[i].v), append(fractions, sr.fraction[i].v)
	}
	if !slices.Equal(rates, []float64{2, 3, 1}) || !slices.Equal(fractions, []float64{0.1, 0, 0.5}) {
		t.Fatalf("rates %v, fractions %v", rates, fractions)
	}
	if c, ok := ss.recent(time.Minute); !ok || c.placements != 10 || c.span != 10*time.Second {
		t.Errorf("recent minute, since the restart: %+v %v", c, ok)
	}
	if c, ok := ss[:3].recent(15 * time.Second); !ok || c.placements != 30 || c.span != 10*time.Second {
		t.Errorf("recent 15s before the restart: %+v %v", c, ok)
	}
	if c, ok := ss[:3].recent(time.Minute); !ok || c.placements != 50 || c.attempts != 9 {
		t.Errorf("recent minute before the restart: %+v %v", c, ok)
	}
	ss.add(sample{at: at(100), placements: 16}, time.Minute)
	if len(ss) != 2 || !ss[0].at.Equal(at(40)) {
		t.Fatalf("window kept %v", ss)
	}
	var w waits
	w.ring = make([]time.Duration, 0, 4)
	for _, d := range []time.Duration{9, 1, 2, 3, 4, 5} {
		w.add(d * time.Second)
	}
	if med, p90, n := w.quantiles(); med != 3*time.Second || p90 != 5*time.Second || n != 4 || w.n != 6 {
		t.Fatalf("waits: median %v, p90 %v, of %d (%d seen)", med, p90, n, w.n)
	}
}

// A grid update is nothing, the changed slots, or the whole grid.
func TestGridUpdate(t *testing.T) {
	cur := gridFrame{gen: 1, names: []string{"a", "b", "c", "d", "e", "f", "g"}, cells: make([]byte, 14)}
	if m, ok := gridUpdate(nil, cur); !ok || m.Names == nil || len(m.Full) != 14 {
		t.Fatalf("first: %+v", m)
	}
	next := gridFrame{gen: 1, names: cur.names, cells: slices.Clone(cur.cells)}
	if _, ok := gridUpdate(&cur, next); ok {
		t.Fatalf("an update without a change")
	}
	next.cells[2], next.cells[3] = 40, flagCordoned
	if m, ok := gridUpdate(&cur, next); !ok || m.Full != nil || !slices.Equal(m.Delta, []int{1, 40, flagCordoned}) {
		t.Fatalf("one slot: %+v", m)
	}
	next.cells[4], next.cells[6] = 1, 1
	if m, ok := gridUpdate(&cur, next); !ok || m.Full == nil || m.Names != nil {
		t.Fatalf("three of seven slots: %+v", m)
	}
	next.gen = 2
	if m, ok := gridUpdate(&cur, next); !ok || m.Names == nil {
		t.Fatalf("a new set of machines: %+v", m)
	}
}

// The charts are SVG whose points are where their values say.
func TestCharts(t *testing.T) {
	got := string(sparkline([]point{{epoch, 0}, {epoch.Add(time.Minute), 2}}, epoch, epoch.Add(time.Minute), 0, 102, 24, "a <b>"))
	for _, w := range []string{`<title>a &lt;b&gt;</title>`, `points="1.0,22.0 101.0,2.0"`, `<circle class="dot" cx="101.0" cy="2.0"`} {
		if !strings.Contains(got, w) {
			t.Errorf("sparkline: no %q in %s", w, got)
		}
	}
	if got := string(stackedBar([]part{{"a", "x", 1}, {"b", "y", 3}}, 100, 10)); !strings.Contains(got, `class="x" x="0.0" y="0" width="25.0"`) ||
		!strings.Contains(got, `class="y" x="25.0" y="0" width="75.0"`) {
		t.Errorf("stacked bar %s", got)
	}
	if got := string(usageBar(3, 2, 100, 8)); !strings.Contains(got, `class="used over" x="0" y="0" width="100.0"`) {
		t.Errorf("usage over capacity %s", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Now, c.Window, c.TasksPerPage = nil, time.Second, 0
	err := c.Validate()
	for _, w := range []string{"Now is nil", "Window 1s", "TasksPerPage 0"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("no %q in %v", w, err)
		}
	}
}

// The cell page finds jobs by a part of their namespace/name, case aside,
// and sorts them newest first or by tasks pending or failed, ties in name
// order; its status chips and pager keep the search, and the search form
// stays out of the live sections, so an update never replaces what one
// types.
func TestJobSearchAndSort(t *testing.T) {
	f := newCell(t)
	f.jobAt("ops", "web-canary", 1, &troupev1.JobStatus{Phase: troupev1.JobPhase_JOB_PHASE_FAILED, Failed: 1}, epoch)
	f.settle()
	for _, c := range []struct {
		path       string
		jobs       []string // in this order, and no other
		wants      []string
		rules      []string // what must not be there
		noneListed bool
	}{
		{path: "/ui/", jobs: []string{"default-big", "default-web", "ops-web-canary"}, wants: []string{`<option value="" selected>name</option>`}},
		{path: "/ui/?find=WEB", jobs: []string{"default-web", "ops-web-canary"},
			wants: []string{`name="find" value="WEB"`, `href="?find=WEB&amp;status=PENDING"`, `href="?find=WEB">all<`, `>clear</a>`}},
		{path: "/ui/?sort=newest", jobs: []string{"ops-web-canary", "default-big", "default-web"}, wants: []string{`<option value="newest" selected>`}},
		{path: "/ui/?sort=pending", jobs: []string{"default-big", "default-web", "ops-web-canary"}},
		{path: "/ui/?sort=failed&find=web", jobs: []string{"ops-web-canary", "default-web"},
			wants: []string{`href="?find=web&amp;sort=failed&amp;status=FAILED"`}},
		{path: "/ui/?status=failed&find=canary", jobs: []string{"ops-web-canary"}, wants: []string{`<input type="hidden" name="status" value="FAILED">`}},
		{path: "/ui/?sort=bogus", jobs: []string{"default-big", "default-web", "ops-web-canary"}, rules: []string{`selected>newest`, `>clear</a>`}},
		{path: "/ui/?find=nothing", noneListed: true, wants: []string{`No jobs whose namespace/name contains “nothing”`}},
	} {
		code, body := f.get(c.path)
		if code != 200 {
			t.Fatalf("%s: %d", c.path, code)
		}
		var at []int
		for _, j := range c.jobs {
			at = append(at, strings.Index(body, `id="job-`+j+`"`))
		}
		if n := strings.Count(body, `<tr id="job-`); n != len(c.jobs) || slices.Contains(at, -1) || !slices.IsSorted(at) {
			t.Errorf("%s: %d jobs listed at %v, want %v in that order", c.path, n, at, c.jobs)
		}
		if !strings.Contains(body, `</form><section id="cell-jobs"`) || strings.Count(body, `id="job-search"`) != 1 {
			t.Errorf("%s: the search form is not just before the live jobs section", c.path)
		}
		for _, w := range c.wants {
			if !strings.Contains(body, w) {
				t.Errorf("%s: no %q", c.path, w)
			}
		}
		for _, r := range c.rules {
			if strings.Contains(body, r) {
				t.Errorf("%s: %q", c.path, r)
			}
		}
		if c.noneListed != strings.Contains(body, `class="none">No jobs`) {
			t.Errorf("%s: says no jobs: %v, want %v", c.path, !c.noneListed, c.noneListed)
		}
	}
}
