package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// roleFlags are the flags every role process has.
type roleFlags struct {
	endpoint, httpAddr, level string
	tls                       tlsFlags
}

// registerRoleFlags defines the role flags on fs: --endpoint (and its
// deprecated name --store), --http-addr, --log-level and the credentials.
func registerRoleFlags(fs *pflag.FlagSet) *roleFlags {
	rf := &roleFlags{}
	fs.StringVar(&rf.endpoint, "endpoint", defaultEndpoint, "store gRPC address(es), comma-separated")
	addAlias(fs, "endpoint", "store")
	fs.StringVar(&rf.httpAddr, "http-addr", "127.0.0.1:0", "address of /metrics and /healthz")
	fs.StringVar(&rf.level, "log-level", "warn", "log level: debug, info, warn, error")
	rf.tls.register(fs)
	return rf
}

// client returns a new client of the store the flags name, presenting
// creds.
func (rf *roleFlags) client(creds *pki.Source, log *zap.Logger) (*clientlib.Client, error) {
	cc := clientlib.DefaultConfig(strings.Split(rf.endpoint, ",")...)
	cc.Logger, cc.TLS = log, creds
	return clientlib.New(cc)
}

// schedulerCommand is `troupe scheduler`: scheduler instances of the
// built-in kinds against a cell's store, sharing one cell cache, until
// SIGINT or SIGTERM.
func (a *app) schedulerCommand() *cobra.Command {
	var (
		kinds                        string
		instances, first, partitions int
		backoff                      time.Duration
		rf                           *roleFlags
		shadow                       bool
		so                           shadowOptions
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run scheduler instances (batch, service, gang)",
		Long: `Run scheduler instances of the built-in kinds against a cell's store, sharing
one cell cache, until SIGINT or SIGTERM. Instances are named <kind>-<index>
and serve partition <index> of their kind's jobs.

With --shadow they are shadows, named shadow-<kind>-<index>: they follow the
cell and decide about its pending tasks as the instances would, with the
same profiles and policy, and write nothing (run them with a viewer's
certificate, which may only read). Each decides once about the tasks of a
job that become pending together, and again only if they are pending anew,
and records what it would have placed where, which placements would have
conflicted with what the real schedulers committed meanwhile, where the real
schedulers placed the same tasks, and its decision times: in /metrics
(troupe_shadow_*), in a summary printed at exit, and, with --shadow-report,
in a JSON file rewritten every --shadow-report-interval and at exit.`,
		Example: "  troupe scheduler --endpoint 10.0.0.1:7000,10.0.0.2:7000 --kinds batch --instances 2 --partitions 4 --first 0 --ca ... --cert ... --key ...\n" +
			"  troupe scheduler --shadow --shadow-report shadow.json --endpoint 10.0.0.1:7000 --kinds batch --ca ... --cert viewer.crt --key viewer.key",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parts := partitions
			if parts == 0 {
				parts = first + instances
			}
			if instances <= 0 || first < 0 || (parts > 1 && first+instances > parts) {
				return fmt.Errorf("instances %d from index %d do not fit in %d partitions", instances, first, parts)
			}
			if !shadow && (cmd.Flags().Changed("shadow-report") || cmd.Flags().Changed("shadow-report-interval") || cmd.Flags().Changed("shadow-keep")) {
				return usagef("--shadow-report, --shadow-report-interval and --shadow-keep go with --shadow")
			}
			if so.interval <= 0 {
				return usagef("--shadow-report-interval must be positive")
			}
			prefix := ""
			if shadow {
				prefix = "shadow-"
			}
			var specs []cell.SchedulerSpec
			for _, kind := range strings.Split(kinds, ",") {
				for i := first; i < first+instances; i++ {
					specs = append(specs, cell.SchedulerSpec{Name: fmt.Sprintf("%s%s-%d", prefix, kind, i), Kind: kind, Partition: i, Partitions: parts})
				}
			}
			if shadow {
				return a.runShadow(cmd.Context(), rf, specs, backoff, so)
			}
			return a.runRoles(cmd.Context(), rf, "scheduler", func(r *cell.Roles) error { return r.StartSchedulers(specs, backoff) })
		},
	}
	fs := cmd.Flags()
	rf = registerRoleFlags(fs)
	fs.StringVar(&kinds, "kinds", "batch,service,gang", "comma-separated scheduler kinds to run")
	fs.IntVar(&instances, "instances", 1, "instances of each kind in this process")
	fs.IntVar(&first, "first", 0, "index of this process's first instance of each kind: instances are named <kind>-<index> and serve partition <index>")
	fs.IntVar(&partitions, "partitions", 0, "instances of each kind over all processes, which split the kind's jobs by hash (0: this process's; 1: no split, instances compete for every job)")
	fs.DurationVar(&backoff, "backoff", time.Second, "wait before tasks that fit nowhere are tried again")
	fs.BoolVar(&shadow, "shadow", false, "run shadows: decide as the instances would against the live cell and write nothing, recording the decisions, conflicts, agreement with the real schedulers and decision times (needs a viewer's certificate)")
	fs.StringVar(&so.report, "shadow-report", "", "with --shadow: JSON report file, rewritten every --shadow-report-interval and at exit")
	fs.DurationVar(&so.interval, "shadow-report-interval", 10*time.Second, "with --shadow: how often the report file is rewritten")
	fs.IntVar(&so.keep, "shadow-keep", scheduler.DefaultShadowKeep, "with --shadow: how many of the latest decisions the report lists")
	return cmd
}

// controllerCommand is `troupe controller`: the job, node-lifecycle and
// garbage-collection controllers against a cell's store until SIGINT or
// SIGTERM.
func (a *app) controllerCommand() *cobra.Command {
	var (
		interval time.Duration
		rf       *roleFlags
	)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the job, node-lifecycle and gc controllers",
		Long:  "Run the job, node-lifecycle and garbage-collection controllers against a cell's store until SIGINT or SIGTERM.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runRoles(cmd.Context(), rf, "controller", func(r *cell.Roles) error { return r.StartControllers(interval) })
		},
	}
	rf = registerRoleFlags(cmd.Flags())
	cmd.Flags().DurationVar(&interval, "node-interval", time.Second, "how often machine leases are checked")
	return cmd
}

// runRoles connects to the store, starts roles with start, serves their
// metrics, and waits for a signal or a failure.
func (a *app) runRoles(ctx context.Context, rf *roleFlags, what string, start func(*cell.Roles) error) error {
	log, creds, reg, err := a.roleProcess(rf, what, what, "")
	if err != nil {
		return err
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := cell.NewRoles(ctx, func(string) (*clientlib.Client, error) { return rf.client(creds, log) }, reg, log)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := start(r); err != nil {
		return err
	}
	addr, srv, err := serveMetrics(rf.httpAddr, what, reg, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(a.out, "troupe %s: store at %s, metrics http://%s/metrics; stop with Ctrl-C\n", what, rf.endpoint, addr)
	select {
	case <-ctx.Done():
		return nil
	case err := <-r.Errors():
		return err
	}
}

// roleProcess sets up a long-running role's process: its logger, its
// credentials (refused unless their identity's role is role; hint says
// why, after the refusal) and a metrics registry with the process's
// collectors and the credentials' expiry.
func (a *app) roleProcess(rf *roleFlags, what, role, hint string) (*zap.Logger, *pki.Source, *prometheus.Registry, error) {
	log, err := newLogger(rf.level)
	if err != nil {
		return nil, nil, nil, err
	}
	creds, err := rf.tls.source(what, a.errOut)
	if err == nil && creds != nil && creds.Identity().Role != role {
		err = fmt.Errorf("%s: the certificate names %s, not a %s%s", what, creds.Identity(), role, hint)
	}
	if err != nil {
		log.Sync()
		return nil, nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	if creds != nil {
		reg.MustRegister(creds.ExpiryGauge())
	}
	return log, creds, reg, nil
}

// serveMetrics serves reg at /metrics, and /healthz, on addr until the
// server returned is closed.
func serveMetrics(addr, what string, reg *prometheus.Registry, log *zap.Logger) (net.Addr, *http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: metrics address: %w", what, err)
	}
	return ln.Addr(), serveOn(ln, roleMux(reg, func() error { return nil }), what, log), nil
}
