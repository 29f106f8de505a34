package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// upCommand is `troupe up`: a whole cell in one process: a one-node
// store, the batch, service and gang schedulers, the controllers, an exec
// agent for this host and optionally hollow machines. It writes the CLI's
// context "local" for the cell and makes it current.
func (a *app) upCommand() *cobra.Command {
	var (
		dataDir, grpcAddr, httpAddr, taskUser, level, config string
		hollow                                               int
		shards                                               uint
		execAgent, insecure                                  bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole cell in one process",
		Long: `Run a whole cell in one process until Ctrl-C: a one-node store, the batch,
service and gang schedulers, the controllers, an exec agent for this host
and optionally hollow (simulated) machines. It makes the cell's
certificates and writes the CLI's context "` + upContext + `" (the store's
address and the admin's certificate) into the CLI's configuration, as the
current context: the troupe commands in another shell reach the cell with
no flags. On its HTTP address it serves the store's metrics and, on
loopback, a read-only web view of the cell at /ui/.`,
		Example: `  troupe up --hollow 10
  troupe get machines`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if insecure {
				fmt.Fprintln(a.errOut, "WARNING: troupe up runs with --insecure: no TLS, no authentication, no authorization; anyone who reaches its ports can read and change the whole cell")
			}
			node.RaiseGOMAXPROCS()
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			defer log.Sync()
			if dataDir == "" {
				if dataDir, err = os.MkdirTemp("", "troupe-up-"); err != nil {
					return err
				}
				// Task users pass through it to their working directories, in
				// tasks/; the store and the certificates are private below it.
				if err := os.Chmod(dataDir, 0o711); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The store serves no HTTP of its own: serveUp serves its
			// metrics and health at httpAddr beside the web view.
			cfg := cell.Config{Version: version, DataDir: dataDir, GRPCAddr: grpcAddr, Hollow: hollow, Shards: uint32(shards),
				HollowCapacity: map[string]int64{"cpu": 16000, "memory": 64 << 30}, TaskUser: taskUser, Insecure: insecure, Logger: log}
			if execAgent {
				cfg.ExecMachine, _ = agent.HostMachine()
				cfg.ExecCapacity = agent.HostCapacity()
			}
			c, err := cell.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Stop()
			c.Node.Registry().MustRegister(buildInfo())
			web, err := serveUp(ctx, httpAddr, c, insecure, log)
			if err != nil {
				return err
			}
			defer web.Close()
			view := fmt.Sprintf("http://%s/ui/ (read-only, for this machine only)", web.Addr)
			if !web.View {
				view = "off: --http-addr is not a loopback address (troupe ui serves it over TLS)"
			}
			path, err := writeUpContext(a.configPath(config), c, insecure)
			if err != nil {
				return err
			}
			security := "TLS; certificates in " + c.PKIDir()
			if insecure {
				security = "insecure: no TLS, no authorization"
			}
			fmt.Fprintf(a.out, `Troupe cell up: store at %s (metrics http://%s/metrics), data in %s
  web view: %s
  security: %s
  CLI: context %q in %s, the current context
  machines: %d (exec agent for this host: %v, hollow: %d)
  schedulers: batch-0, service-0, gang-0; controllers: job, node lifecycle, gc
Try:
  bin/troupe apply -f deploy/examples/batch.yaml
  bin/troupe get jobs
  bin/troupe get tasks
Stop with Ctrl-C.
`, c.Node.GRPCAddr(), web.Addr, dataDir, view, security, upContext, path, hollow+btoi(execAgent), execAgent, hollow)
			select {
			case <-ctx.Done():
				fmt.Fprintln(a.out, "troupe up: shutting down")
				return nil
			case err := <-c.Errors():
				return err
			case err := <-web.Errors:
				return err
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dataDir, "data-dir", "", "store and task data (default: a new temporary directory)")
	fs.StringVar(&grpcAddr, "grpc-addr", defaultEndpoint, "store gRPC address")
	fs.StringVar(&httpAddr, "http-addr", "127.0.0.1:7200", "address of the web view (/ui/, on loopback only), /metrics and /healthz")
	fs.IntVar(&hollow, "hollow", 0, "simulated machines to add (16 cores, 64 GiB each)")
	fs.UintVar(&shards, "shards", 1, "store shards, fixed when the data directory is created (on one machine, 1 is fastest; see DESIGN.md)")
	fs.BoolVar(&execAgent, "exec", true, "run an exec agent for this host")
	fs.StringVar(&taskUser, "task-user", runtime.DefaultTaskUser(), taskUserUsage)
	fs.StringVar(&level, "log-level", "warn", "log level")
	fs.BoolVar(&insecure, "insecure", false, "no TLS and no authorization: anyone who reaches the ports may read and change the whole cell")
	a.addConfigFlags(cmd, &config, nil)
	return cmd
}

// writeUpContext writes the CLI's context "local" for c into the CLI's
// configuration at path, as its current context: its store's address and
// the admin certificate, by absolute path (insecure: no certificate). The
// file's other contexts stay; a file of before contexts, which troupe up
// wrote, is replaced. It returns the path.
func writeUpContext(path string, c *cell.Cell, insecure bool) (string, error) {
	cc, err := readClientConfig(path)
	if err != nil {
		return "", fmt.Errorf("%w (fix or remove it, or give another --config)", err)
	}
	ctx := cellContext{Name: upContext, Endpoints: []string{c.Node.GRPCAddr()}, Insecure: insecure}
	if !insecure {
		dir, err := filepath.Abs(c.PKIDir())
		if err != nil {
			return "", err
		}
		f := pki.DirFiles(dir, pki.LocalAdmin)
		ctx.CA, ctx.Cert, ctx.Key = f.CA, f.Cert, f.Key
	}
	cc.setContext(ctx)
	cc.CurrentContext = upContext
	return path, writeClientConfig(path, cc)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
