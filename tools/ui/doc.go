// Package ui is the web view of a cell: read-only pages that follow the
// cell live, served by `troupe up` on its HTTP address and by the `troupe
// ui` role on any machine that reaches the store.
//
//	store ──List/Watch──► informers (machines, leases, /alloc counters,
//	                      jobs, tasks, schedulers, JobSchedulings, events)
//	                         │ handlers, under one lock
//	                         ▼
//	                      Aggregator: compact aggregates kept incrementally
//	                      (a slot per machine, phases counted, a ring of
//	                      samples per scheduler, waits), a version per topic
//	                         │ page views built on demand, rendered by
//	                         ▼ html/template (and SVG charts in Go)
//	  GET /ui/...  ◄──── Server ────► GET /ui/live/... (server-sent events)
//
// The store is read once by the informers, whatever the number of
// viewers: a page's stream rebuilds its view when a topic it shows
// changed (at most every Config.MinInterval) and sends only the sections
// whose HTML changed, plus the machine grid as two bytes per machine (CPU
// allocated in percent, and flags), in full when the set of machines
// changes and as the changed slots otherwise. Lists are bounded: a job's
// tasks come a page at a time, a machine's tasks, events and pending jobs
// up to a limit; the page never receives every task of a large cell.
//
// Pages (Server):
//
//	/ui/                       the cell: machine grid, jobs by status, schedulers
//	/ui/job/<ns>/<name>        a job: status, update, scheduling, tasks, events
//	/ui/machine/<name>         a machine: status, lease, resources, tasks, events
//	/ui/scheduler/<name>       a scheduler: figures, charts, pending jobs, events
//	/ui/live/<page>            the page's server-sent events
//	/ui/static/...             CSS and JavaScript, embedded (go:embed)
//
// The schedulers' figures are what each instance publishes in its record
// /schedulers/<name> every few seconds (cumulative attempts, conflicts,
// placements, unschedulable tasks and busyness since it started): rates
// and conflict fractions over a time are the differences of consecutive
// records, kept in a ring over Config.Window. Waits, which records do not
// carry, come from the tasks an instance bound: bound_at − submitted.
//
// The server writes nothing and serves GET and HEAD only. It does not
// authenticate: whoever serves it puts it behind the cell's TLS (the
// `troupe ui` role requires a client certificate of the cell's CA away
// from loopback) or on a loopback listener, where Config.LocalOnly
// refuses requests for other host names (DNS rebinding).
//
// Usage:
//
//	agg := ui.NewAggregator(store, cfg) // a viewer's client is enough
//	go agg.Run(ctx)
//	mux.Handle("/ui/", ui.NewServer(agg, cfg))
package ui
