package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// roleFlags are the flags every role process has.
type roleFlags struct {
	store, httpAddr, level *string
	tls                    tlsFlags
}

func registerRoleFlags(fs *flag.FlagSet) roleFlags {
	return roleFlags{
		store:    fs.String("store", "127.0.0.1:7000", "store gRPC address(es), comma-separated"),
		httpAddr: fs.String("http-addr", "127.0.0.1:0", "address of /metrics and /healthz"),
		level:    fs.String("log-level", "warn", "log level: debug, info, warn, error"),
		tls:      registerTLSFlags(fs),
	}
}

// client returns a new client of the store the flags name, presenting
// creds.
func (rf roleFlags) client(creds *pki.Source, log *zap.Logger) (*clientlib.Client, error) {
	cc := clientlib.DefaultConfig(strings.Split(*rf.store, ",")...)
	cc.Logger, cc.TLS = log, creds
	return clientlib.New(cc)
}

// runScheduler runs scheduler instances of the built-in kinds against a
// cell's store, sharing one cell cache, until SIGINT or SIGTERM.
func runScheduler(args []string) error {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	rf := registerRoleFlags(fs)
	kinds := fs.String("kinds", "batch,service,gang", "comma-separated scheduler kinds to run")
	instances := fs.Int("instances", 1, "instances of each kind in this process")
	first := fs.Int("first", 0, "index of this process's first instance of each kind: instances are named <kind>-<index> and serve partition <index>")
	partitions := fs.Int("partitions", 0, "instances of each kind over all processes, which split the kind's jobs by hash (0: this process's; 1: no split, instances compete for every job)")
	backoff := fs.Duration("backoff", time.Second, "wait before tasks that fit nowhere are tried again")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	parts := *partitions
	if parts == 0 {
		parts = *first + *instances
	}
	if *instances <= 0 || *first < 0 || (parts > 1 && *first+*instances > parts) {
		return fmt.Errorf("scheduler: instances %d from index %d do not fit in %d partitions", *instances, *first, parts)
	}
	var specs []cell.SchedulerSpec
	for _, kind := range strings.Split(*kinds, ",") {
		for i := *first; i < *first+*instances; i++ {
			specs = append(specs, cell.SchedulerSpec{Name: fmt.Sprintf("%s-%d", kind, i), Kind: kind, Partition: i, Partitions: parts})
		}
	}
	return runRoles(rf, "scheduler", func(r *cell.Roles) error { return r.StartSchedulers(specs, *backoff) })
}

// runController runs the job, node-lifecycle and garbage-collection
// controllers against a cell's store until SIGINT or SIGTERM.
func runController(args []string) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	rf := registerRoleFlags(fs)
	interval := fs.Duration("node-interval", time.Second, "how often machine leases are checked")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return runRoles(rf, "controller", func(r *cell.Roles) error { return r.StartControllers(*interval) })
}

// runRoles connects to the store, starts roles with start, serves their
// metrics, and waits for a signal or a failure.
func runRoles(rf roleFlags, what string, start func(*cell.Roles) error) error {
	log, err := newLogger(*rf.level)
	if err != nil {
		return err
	}
	defer log.Sync()
	creds, err := rf.tls.source(what)
	if err != nil {
		return err
	}
	if creds != nil && creds.Identity().Role != what {
		return fmt.Errorf("%s: the certificate names %s, not a %s", what, creds.Identity(), what)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	if creds != nil {
		reg.MustRegister(creds.ExpiryGauge())
	}
	r, err := cell.NewRoles(ctx, func(string) (*clientlib.Client, error) { return rf.client(creds, log) }, reg, log)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := start(r); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *rf.httpAddr)
	if err != nil {
		return fmt.Errorf("%s: metrics address: %w", what, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	defer srv.Close()
	fmt.Printf("troupe %s: store at %s, metrics http://%s/metrics; stop with Ctrl-C\n", what, *rf.store, ln.Addr())
	select {
	case <-ctx.Done():
		return nil
	case err := <-r.Errors():
		return err
	}
}
