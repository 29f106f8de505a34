package ui_test

import (
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/tools/cell"
	"github.com/troupe-cluster/troupe/tools/ui"
)

var (
	screenshots = flag.String("screenshots", "", "directory for the browser test's screenshots (default: a temporary one)")
	updateDocs  = flag.Bool("update-docs", false, "write the browser test's screenshot of the cell page to docs/ui-cell.png")
	docsRun     = flag.Duration("docs-run", 40*time.Second, "with -update-docs: how long the cell runs, a small job every 2 s, before that screenshot (for the schedulers' charts)")
)

// liveWithin is how soon a change in the cell must show on an open page.
const liveWithin = 2 * time.Second

// chromium finds a Chromium or Chrome binary: $TROUPE_CHROMIUM, else the
// first of the usual names on PATH ("" if none).
func chromium() string {
	if p := os.Getenv("TROUPE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserCell is a cell as `troupe up --hollow 50` runs it, in this
// process, with the example jobs and two more that fill machines, and
// its web view served as troupe up serves it (a viewer's client,
// loopback).
type browserCell struct {
	t   *testing.T
	ctx context.Context
	c   *cell.Cell
	url string
}

func startBrowserCell(t *testing.T, ctx context.Context) *browserCell {
	t.Helper()
	c, err := cell.Start(ctx, cell.Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Hollow: 50,
		HollowCapacity: map[string]int64{"cpu": 16000, "memory": 64 << 30}, LeaseDuration: 3 * time.Second, SchedulerBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cc := clientlib.DefaultConfig(c.Node.GRPCAddr())
	if cc.TLS, err = pki.NewSource(pki.DirFiles(c.PKIDir(), pki.LocalViewer), nil); err != nil {
		t.Fatal(err)
	}
	viewer, err := clientlib.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viewer.Close() })
	cfg := ui.DefaultConfig()
	agg, err := ui.NewAggregator(viewer, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go agg.Run(ctx)
	srv, err := ui.NewServer(agg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv)
	t.Cleanup(web.Close)
	b := &browserCell{t: t, ctx: ctx, c: c, url: web.URL}
	wait.Until(ctx, t, "50 machines registered", func() error {
		ms, _, err := clientlib.List(ctx, c.Client, clientlib.Machines, "")
		if err == nil && len(ms) != 50 {
			err = fmt.Errorf("%d machines", len(ms))
		}
		return err
	})
	b.applyExamples()
	for _, j := range []struct {
		name  string
		typ   troupev1.JobType
		count int32
		cpu   int64
	}{{"crunch", troupev1.JobType_JOB_TYPE_BATCH, 60, 3000}, {"serve", troupev1.JobType_JOB_TYPE_SERVICE, 40, 1500}} {
		b.job(j.name, &troupev1.JobSpec{Type: j.typ, Count: j.count, Tolerations: []*troupev1.Toleration{agent.HollowToleration()},
			Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(time.Hour), Requests: map[string]int64{"cpu": j.cpu, "memory": 1 << 30}}})
	}
	return b
}

// applyExamples creates the objects of deploy/examples, as `troupe apply
// -f` each would.
func (b *browserCell) applyExamples() {
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(files) == 0 {
		b.t.Fatalf("no examples (%v)", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.t.Fatal(err)
		}
		ms, err := clientlib.DecodeManifestFile(f, data)
		if err != nil {
			b.t.Fatal(err)
		}
		for _, m := range ms {
			switch o := m.Object.(type) {
			case *troupev1.Job:
				_, err = clientlib.Create(b.ctx, b.c.Client, clientlib.Jobs, o)
			case *troupev1.Quota:
				_, err = clientlib.Create(b.ctx, b.c.Client, clientlib.Quotas, o)
			default:
				err = fmt.Errorf("%s: say how to create a %s", f, m.Kind)
			}
			if err != nil {
				b.t.Fatal(err)
			}
		}
	}
}

func (b *browserCell) job(name string, spec *troupev1.JobSpec) {
	b.t.Helper()
	if _, err := clientlib.Create(b.ctx, b.c.Client, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}); err != nil {
		b.t.Fatal(err)
	}
}

// trickle submits a small job every 2 s for d, so that the schedulers
// have a history to chart (for docs/ui-cell.png only: the test proper
// waits for nothing).
func (b *browserCell) trickle(d time.Duration) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	end := time.After(d)
	for i := 0; ; i++ {
		select {
		case <-end:
			return
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		spec := &troupev1.JobSpec{Count: int32(4 + i%5), Tolerations: []*troupev1.Toleration{agent.HollowToleration()},
			Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(time.Duration(5+i%4) * time.Second),
				Requests: map[string]int64{"cpu": 2000, "memory": 1 << 30}}}
		if i%3 == 0 {
			spec.Type = troupev1.JobType_JOB_TYPE_SERVICE
		}
		b.job(fmt.Sprintf("wave-%d", i), spec)
	}
}

// browser is a headless Chromium tab, and where its screenshots go.
type browser struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	base string
}

func startBrowser(t *testing.T, ctx context.Context, path, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first action starts the browser, under no deadline of its own.
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: tctx, dir: dir, base: base}
}

// open loads the page at path and waits until its stream is live.
func (br *browser) open(path string) {
	br.t.Helper()
	br.do("open "+path, chromedp.Navigate(br.base+path), chromedp.WaitVisible(chromedp.CSS("#live-status.on")))
}

// do runs actions, failing the test with what on an error.
func (br *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	br.t.Helper()
	if err := chromedp.Do(br.ctx, actions...); err != nil {
		br.t.Fatalf("%s: %v", what, err)
	}
}

// text is the text of the element sel selects.
func (br *browser) text(sel string) (string, error) {
	ctx, cancel := context.WithTimeout(br.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	return strings.TrimSpace(s), err
}

// until waits until the element sel selects says what want says.
func (br *browser) until(what, sel string, want func() (string, error)) {
	br.t.Helper()
	wait.Until(br.ctx, br.t, what, func() error {
		w, err := want()
		if err != nil {
			return err
		}
		got, err := br.text(sel)
		if err == nil && got != w {
			err = fmt.Errorf("%s says %q, want %q", sel, got, w)
		}
		return err
	})
}

// within waits, at most liveWithin, for the element sel selects to be
// visible after a change made at since.
func (br *browser) within(what, sel string, since time.Time) {
	br.t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, liveWithin)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		br.t.Fatalf("%s: not on the open page within %v: %v", what, liveWithin, err)
	}
	br.t.Logf("%s: on the page after %v", what, time.Since(since).Round(time.Millisecond))
}

// screenshot saves the page as name.png in the screenshots' directory.
func (br *browser) screenshot(name string) string {
	br.t.Helper()
	png, err := chromedp.Run(br.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		br.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(br.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		br.t.Fatal(err)
	}
	return path
}

// The web view in a real browser: headless Chromium loads each page of a
// cell of 50 hollow machines running the example jobs, finds on it the
// figures that matter (machines, job status, a scheduler's placements as
// its record says), sees changes to the cell on the open page within
// two seconds, and saves screenshots.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cell and a browser")
	}
	path := chromium()
	if path == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome on PATH, or $TROUPE_CHROMIUM): " +
			"install Debian's chromium package (apt-get install -y chromium) to run the browser test")
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b := startBrowserCell(t, ctx)
	br := startBrowser(t, ctx, path, b.url)
	t.Logf("cell and browser up in %v", time.Since(started).Round(time.Millisecond))
	admin := b.c.Client
	record := func(name string) func() (string, error) {
		return func() (string, error) {
			info, err := clientlib.Get(ctx, admin, clientlib.Schedulers, clientlib.Schedulers.Prefix+name)
			return strconv.FormatUint(info.GetCounters().GetPlacements(), 10), err
		}
	}
	fixed := func(s string) func() (string, error) { return func() (string, error) { return s, nil } }

	// The cell: its machines, in figures and in the grid the page drew
	// from the bytes it was sent; the jobs by status; the schedulers'
	// figures as their records say.
	br.open("/ui/")
	br.until("the machine count", "#machine-count", fixed("50"))
	br.do("the grid of 50 machines", chromedp.WaitVisible(chromedp.CSS(`canvas#grid[data-machines="50"]`)))
	br.until("web running", "#job-default-web [data-phase]", fixed("RUNNING"))
	br.until("train running", "#job-default-train [data-phase]", fixed("RUNNING"))
	br.until("hello pending: it fits no hollow machine", "#job-default-hello [data-phase]", fixed("PENDING"))
	br.until("batch-0's placements as its record says", `#sched-batch-0 [data-figure="placements"]`, record("batch-0"))

	// A change to the cell shows on the open page.
	changed := time.Now()
	b.job("late", &troupev1.JobSpec{Count: 1, Tolerations: []*troupev1.Toleration{agent.HollowToleration()},
		Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(time.Hour), Requests: map[string]int64{"cpu": 100}}})
	br.within("a new job", "#job-default-late", changed)

	// A search typed into the form and sent: the list keeps the jobs
	// whose name contains it, case aside.
	br.do("a search for TRA", chromedp.SendKeys(chromedp.CSS(`#job-search input[name="find"]`), "TRA"),
		chromedp.Submit(chromedp.CSS(`#job-search input[name="find"]`)))
	wait.Until(br.ctx, t, "the jobs found", func() error {
		rows, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#cell-jobs tbody tr")).map(r => r.id)`))
		if err == nil && !slices.Equal(rows, []string{"job-default-train"}) {
			err = fmt.Errorf("rows %v, want job-default-train alone", rows)
		}
		return err
	})

	// A machine: its status, lease and tasks; cordoned while the page is
	// open.
	br.open("/ui/machine/hollow-0003")
	br.until("hollow-0003 ready", "#machine-phase", fixed("READY"))
	changed = time.Now()
	m, err := clientlib.Get(ctx, admin, clientlib.Machines, clientlib.Machines.Prefix+"hollow-0003")
	if err != nil {
		t.Fatal(err)
	}
	m.Spec.Unschedulable = true
	if _, err := clientlib.Update(ctx, admin, clientlib.Machines, m); err != nil {
		t.Fatal(err)
	}
	br.within("the cordon", "#machine-cordoned", changed)
	br.screenshot("machine")

	// A job: its status and tasks, on the machines they run on.
	br.open("/ui/job/default/web")
	br.until("web running", "#job-phase", fixed("RUNNING"))
	br.do("web's tasks", chromedp.WaitVisible(chromedp.CSS("#task-web-0 a[href^='/ui/machine/']")), chromedp.WaitVisible(chromedp.CSS("#task-web-2")))
	br.screenshot("job")

	// A scheduler: its figures, and the job it cannot place, and why.
	br.open("/ui/scheduler/batch-0")
	br.until("batch-0's placements", "#sched-placements", record("batch-0"))
	br.do("hello pending, and why", chromedp.WaitVisible(chromedp.CSS(`#scheduler-pending a[href="/ui/job/default/hello"]`)))
	if text, err := br.text("#scheduler-pending"); err != nil || !strings.Contains(text, "Unschedulable") {
		t.Fatalf("batch-0's pending jobs: %q (%v)", text, err)
	}
	br.screenshot("scheduler")

	// A machine whose agent stops is marked lost, on the cell's page too.
	br.open("/ui/")
	b.c.StopAgent("hollow-0007")
	br.until("a lost machine", "#machines-lost", fixed("1 lost"))
	br.until("the cordoned machine", "#machines-cordoned", fixed("1 cordoned"))
	if *updateDocs {
		b.trickle(*docsRun)
	}
	br.screenshot("cell")
	if *updateDocs {
		// The window, not the whole page: the README shows the top.
		png, err := chromedp.Run(br.ctx, chromedp.CaptureScreenshot())
		if err == nil {
			err = os.WriteFile("../../docs/ui-cell.png", png, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s; the whole test took %v", br.dir, time.Since(started).Round(time.Millisecond))
}
