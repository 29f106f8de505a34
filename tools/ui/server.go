package ui

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

//go:embed assets/templates/*.html
var templateFiles embed.FS

//go:embed assets/static
var staticFiles embed.FS

// Server serves the pages of an aggregator's cell under /ui/. It only
// reads: GET and HEAD; anything else is refused.
type Server struct {
	agg    *Aggregator
	cfg    Config
	tmpl   *template.Template
	static http.Handler
	// streams are the open live streams; updates the events they sent.
	streams, updates atomic.Int64
}

// NewServer returns the server of agg's pages.
func NewServer(agg *Aggregator, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tmpl, err := template.New("ui").Funcs(template.FuncMap{
		"lower":    strings.ToLower,
		"inc":      func(i int) int { return i + 1 },
		"percent":  percent,
		"cores":    cores,
		"quantity": quantity,
		"memory":   memory,
		"usage":    func(used, capacity int64) template.HTML { return usageBar(used, capacity, 320, 8) },
	}).ParseFS(templateFiles, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFiles, "assets/static")
	if err != nil {
		return nil, err
	}
	return &Server{agg: agg, cfg: cfg, tmpl: tmpl, static: http.StripPrefix("/ui/static/", http.FileServerFS(static))}, nil
}

// ServeHTTP serves /ui/ and below.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the web view only reads", http.StatusMethodNotAllowed)
		return
	}
	if s.cfg.LocalOnly && !Loopback(r.Host) {
		http.Error(w, fmt.Sprintf("this view serves loopback only, not host %q", r.Host), http.StatusMisdirectedRequest)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/ui/")
	switch {
	case !ok:
		http.Redirect(w, r, "/ui/", http.StatusFound)
	case strings.HasPrefix(rest, "static/"):
		s.static.ServeHTTP(w, r)
	case strings.HasPrefix(rest, "live/"):
		s.serveLive(w, r, strings.TrimPrefix(rest, "live/"))
	default:
		s.servePage(w, r, rest)
	}
}

// Loopback reports whether host (a request's Host or a listening address,
// maybe with a port) names this machine's loopback.
func Loopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// page is a page as built at a moment: its sections rendered.
type page struct {
	Title, Heading, Kind string
	Crumbs               []crumb
	// Live is where the page's stream is.
	Live string
	// Grid says the page draws the machine grid.
	Grid bool
	// Search is the cell page's job search form, which stays out of the
	// live sections so that an update never replaces what one types.
	Search   *jobSearch
	Found    bool
	Sections []section
	topics   []topic
}

// jobSearch is the cell page's job search form: what the list shows now.
type jobSearch struct{ Find, Sort, Status string }

// Sorts are the form's choices of order, the current one selected.
func (j *jobSearch) Sorts() []sortChoice {
	out := make([]sortChoice, 0, len(jobSorts))
	for _, o := range jobSorts {
		out = append(out, sortChoice{Value: o.value, Label: o.label, On: o.value == j.Sort})
	}
	return out
}

// sortChoice is an option of the job search form's order.
type sortChoice struct {
	Value, Label string
	On           bool
}

// crumb is a step of the page's path in its header.
type crumb struct{ Text, URL string }

// section is a part of a page that its stream replaces whole.
type section struct {
	ID   string
	HTML template.HTML
}

// shows reports whether a page showing topics at from must be built
// again at to.
func (p *page) shows(from, to versions) bool {
	for _, t := range p.topics {
		if from[t] != to[t] {
			return true
		}
	}
	return false
}

// build builds the page at path (below /ui/) for query q; false if there
// is no such page.
func (s *Server) build(path string, q url.Values) (*page, bool, error) {
	parts := strings.Split(path, "/")
	live := "/ui/live/" + path
	if len(q) > 0 {
		live += "?" + q.Encode()
	}
	var (
		p    *page
		view any
		ids  []string
	)
	switch {
	case path == "":
		p = &page{Title: "Cell", Heading: "The cell", Kind: "cell", Grid: true, Found: true,
			topics: []topic{topicMachines, topicJobs, topicTasks, topicSchedulers}}
		v := s.agg.cellView(q)
		p.Search = &jobSearch{Find: v.Find, Sort: v.Sort, Status: v.Status}
		view, ids = v, []string{"cell-summary", "cell-schedulers", "cell-jobs"}
	case len(parts) == 3 && parts[0] == "job" && parts[1] != "" && parts[2] != "":
		v := s.agg.jobView(parts[1], parts[2], q)
		p = &page{Title: "Job " + parts[1] + "/" + parts[2], Heading: "Job " + parts[1] + "/" + parts[2], Kind: "job", Found: v.Found,
			Crumbs: []crumb{{"jobs", "/ui/"}, {parts[1] + "/" + parts[2], ""}},
			topics: []topic{topicJobs, topicTasks, topicEvents, topicSchedulers}}
		view, ids = v, []string{"job-summary", "job-tasks", "job-events"}
	case len(parts) == 2 && parts[0] == "machine" && parts[1] != "":
		v := s.agg.machineView(parts[1])
		p = &page{Title: "Machine " + parts[1], Heading: "Machine " + parts[1], Kind: "machine", Found: v.Found,
			Crumbs: []crumb{{"machines", "/ui/"}, {parts[1], ""}},
			topics: []topic{topicMachines, topicLeases, topicTasks, topicEvents, topicSchedulers}}
		view, ids = v, []string{"machine-summary", "machine-tasks", "machine-events"}
	case len(parts) == 2 && parts[0] == "scheduler" && parts[1] != "":
		v := s.agg.schedulerView(parts[1])
		v.Row.Name = parts[1]
		p = &page{Title: "Scheduler " + parts[1], Heading: "Scheduler " + parts[1], Kind: "scheduler", Found: v.Found,
			Crumbs: []crumb{{"schedulers", "/ui/"}, {parts[1], ""}},
			topics: []topic{topicSchedulers, topicJobs, topicTasks, topicEvents}}
		view, ids = v, []string{"scheduler-summary", "scheduler-pending", "scheduler-events"}
	default:
		return nil, false, nil
	}
	p.Live = live
	for _, id := range ids {
		var b bytes.Buffer
		if err := s.tmpl.ExecuteTemplate(&b, id, view); err != nil {
			return nil, true, err
		}
		p.Sections = append(p.Sections, section{ID: id, HTML: template.HTML(b.String())})
	}
	return p, true, nil
}

// servePage serves the page at path whole; one of something not in the
// cell is a 404 that shows it once it is.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request, path string) {
	p, ok, err := s.build(path, r.URL.Query())
	if !ok {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.cfg.Logger.Sugar().Errorw("ui: rendering a page", "path", path, "error", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&b, "layout", p); err != nil {
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !p.Found {
		w.WriteHeader(http.StatusNotFound)
	}
	w.Write(b.Bytes())
}

var (
	descStreams = prometheus.NewDesc("troupe_ui_streams", "Pages of the web view following the cell (open live streams).", nil, nil)
	descUpdates = prometheus.NewDesc("troupe_ui_updates_total", "Updates the web view sent to pages (sections and grids).", nil, nil)
)

// Collector exports the server's figures in Prometheus format.
func (s *Server) Collector() prometheus.Collector { return serverCollector{s} }

type serverCollector struct{ s *Server }

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descStreams; ch <- descUpdates }

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descStreams, prometheus.GaugeValue, float64(c.s.streams.Load()))
	ch <- prometheus.MustNewConstMetric(descUpdates, prometheus.CounterValue, float64(c.s.updates.Load()))
}
