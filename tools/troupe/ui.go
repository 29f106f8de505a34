package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/tools/cell"
	"github.com/troupe-cluster/troupe/tools/ui"
)

// defaultUIAddr is where `troupe ui` serves by default.
const defaultUIAddr = "127.0.0.1:7300"

// uiCommand is `troupe ui`: the web view of a cell (tools/ui), from any
// machine that reaches its store, until SIGINT or SIGTERM.
func (a *app) uiCommand() *cobra.Command {
	var rf *roleFlags
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web view of a cell (read-only)",
		Long: `Serve the web view of a cell at http://<http-addr>/ui/, from any machine that
reaches its store, until SIGINT or SIGTERM: the machines as a grid coloured
by CPU allocated, jobs by status, the schedulers' placements, conflicts and
busyness, and a page per job, machine and scheduler. Pages follow the cell
live (server-sent events), fed by one watch of the store however many
people look. It only reads, with a viewer's certificate (troupe certs issue
--role viewer).

On a loopback address (the default, ` + defaultUIAddr + `) it serves plain HTTP to
this machine alone (reach it from elsewhere through ssh -L). On any other
address it serves HTTPS with its own certificate, which must then name
the hosts it is reached at (troupe certs issue --role viewer --hosts ...),
and admits only clients presenting a certificate of the cell's CA, of any
role; with --insecure it refuses to serve away from loopback.`,
		Example: "  troupe ui --endpoint 10.0.0.1:7000 --ca pki/ca.crt --cert pki/viewer-ops.crt --key pki/viewer-ops.key\n" +
			"  troupe ui --http-addr 0.0.0.0:7300 --endpoint 10.0.0.1:7000 --ca pki/ca.crt --cert viewer-web.crt --key viewer-web.key",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runUI(cmd.Context(), rf) },
	}
	rf = registerRoleFlags(cmd.Flags())
	addr := cmd.Flags().Lookup("http-addr")
	addr.DefValue, addr.Usage = defaultUIAddr, "address of the web view (/ui/), /metrics and /healthz: plain HTTP on loopback, else HTTPS for clients of the cell's CA"
	if err := addr.Value.Set(defaultUIAddr); err != nil {
		panic(err)
	}
	return cmd
}

// runUI is `troupe ui`.
func (a *app) runUI(ctx context.Context, rf *roleFlags) error {
	const what = "ui"
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log, creds, reg, err := a.roleProcess(rf, what, pki.RoleViewer,
		": the web view only reads the cell, and runs with a viewer's certificate (troupe certs issue --role viewer)")
	if err != nil {
		return err
	}
	defer log.Sync()
	cl, err := rf.client(creds, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	ln, scheme, err := uiListener(rf.httpAddr, creds)
	if err != nil {
		return err
	}
	defer ln.Close()
	cfg := ui.DefaultConfig()
	cfg.Logger, cfg.LocalOnly = log, scheme == "http"
	mux, errc, err := serveUI(ctx, cl, cfg, reg, nil)
	if err != nil {
		return err
	}
	srv := serveOn(ln, mux, what, log)
	defer srv.Close()
	fmt.Fprintf(a.out, "troupe %s: store at %s, the cell at %s://%s/ui/ (read-only), metrics at /metrics; stop with Ctrl-C\n", what, rf.endpoint, scheme, ln.Addr())
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// uiListener listens at addr for the web view: plain HTTP on loopback;
// elsewhere TLS with creds, admitting clients of the cell's CA of any
// role, and refused without creds or with a certificate that names no
// host. It returns the listener and its scheme.
func uiListener(addr string, creds *pki.Source) (net.Listener, string, error) {
	if ui.Loopback(addr) {
		ln, err := net.Listen("tcp", addr)
		return ln, "http", err
	}
	if creds == nil {
		return nil, "", fmt.Errorf("--http-addr %s is not a loopback address, and without TLS (--insecure) the web view serves loopback only: "+
			"give a certificate (troupe certs issue --role viewer --hosts ...), or serve on loopback and tunnel to it (ssh -L)", addr)
	}
	if !slices.Contains(creds.Leaf().ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return nil, "", fmt.Errorf("--http-addr %s is not a loopback address, so the web view serves HTTPS with its certificate, but %s names no host "+
			"to serve at: issue it with --hosts (troupe certs issue --role viewer --name %s --hosts <the names it is reached at>)",
			addr, creds.Identity(), creds.Identity().Name)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	return tls.NewListener(ln, creds.ServerConfig(nil, false)), "https", nil
}

// serveUI follows the cell through s for the web view until ctx ends
// and returns the mux of a role's HTTP address with it: /ui/ (and / sent
// there), /metrics of reg and /healthz (healthy nil: ok once the view
// has read the cell). A failure of the view's informers comes on the
// channel.
func serveUI(ctx context.Context, s ui.Reader, cfg ui.Config, reg *prometheus.Registry, healthy func() error) (*http.ServeMux, <-chan error, error) {
	agg, err := ui.NewAggregator(s, cfg)
	if err != nil {
		return nil, nil, err
	}
	srv, err := ui.NewServer(agg, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := reg.Register(srv.Collector()); err != nil {
		return nil, nil, err
	}
	errc := make(chan error, 1)
	go func() {
		if err := agg.Run(ctx); err != nil && ctx.Err() == nil {
			errc <- fmt.Errorf("web view: %w", err)
		}
	}()
	if healthy == nil {
		healthy = func() error {
			if !agg.Synced() {
				return errors.New("the web view has not read the cell yet")
			}
			return nil
		}
	}
	mux := roleMux(reg, healthy)
	mux.Handle("/ui/", srv)
	mux.Handle("/ui", srv)
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	return mux, errc, nil
}

// roleMux is the mux of a role's HTTP address: /metrics of reg and
// /healthz, "ok" while healthy says nothing is wrong.
func roleMux(reg *prometheus.Registry, healthy func() error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serveOn serves h on ln until the server returned is closed; what the
// server has to say of a connection (a failed TLS handshake) goes to log
// at debug level.
func serveOn(ln net.Listener, h http.Handler, what string, log *zap.Logger) *http.Server {
	errs, err := zap.NewStdLogAt(log.With(zap.String("server", what)), zapcore.DebugLevel)
	if err != nil {
		panic(err) // only for an invalid level
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: errs}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+": HTTP server stopped", zap.Error(err))
		}
	}()
	return srv
}

// upHTTP is `troupe up`'s HTTP address: the store's /metrics and
// /healthz and, on a loopback address, the web view.
type upHTTP struct {
	Addr net.Addr
	// View says the web view is served (on loopback only).
	View   bool
	srv    *http.Server
	Errors <-chan error
}

// serveUp serves `troupe up`'s HTTP address at addr until ctx ends; the
// web view reads the cell with the local viewer's certificate (none for
// an insecure cell).
func serveUp(ctx context.Context, addr string, c *cell.Cell, insecure bool, log *zap.Logger) (*upHTTP, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("up: metrics address: %w", err)
	}
	mux, errc, err := upMux(ctx, c, insecure, ui.Loopback(addr), log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &upHTTP{Addr: ln.Addr(), View: errc != nil, srv: serveOn(ln, mux, "up", log), Errors: errc}, nil
}

// upMux is the mux of `troupe up`'s HTTP address, with the web view if
// view (then with the channel of its failures).
func upMux(ctx context.Context, c *cell.Cell, insecure, view bool, log *zap.Logger) (*http.ServeMux, <-chan error, error) {
	if !view {
		return roleMux(c.Node.Registry(), c.Node.Healthy), nil, nil
	}
	cc := clientlib.DefaultConfig(c.Node.GRPCAddr())
	cc.Logger = log
	if !insecure {
		var err error
		if cc.TLS, err = pki.NewSource(pki.DirFiles(c.PKIDir(), pki.LocalViewer), nil); err != nil {
			return nil, nil, err
		}
	}
	cl, err := clientlib.New(cc)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, func() { cl.Close() })
	cfg := ui.DefaultConfig()
	cfg.Logger = log
	return serveUI(ctx, cl, cfg, c.Node.Registry(), c.Node.Healthy)
}

// Close stops serving.
func (u *upHTTP) Close() error { return u.srv.Close() }
