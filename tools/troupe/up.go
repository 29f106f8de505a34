package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// runUp runs a whole cell in one process: a one-node store, the batch,
// service and gang schedulers, the controllers, an exec agent for this
// host and optionally hollow machines.
func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "store and task data (default: a new temporary directory)")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7000", "store gRPC address")
	httpAddr := fs.String("http-addr", "127.0.0.1:7200", "health and metrics address")
	hollow := fs.Int("hollow", 0, "simulated machines to add (16 cores, 64 GiB each)")
	shards := fs.Uint("shards", 1, "store shards, fixed when the data directory is created (on one machine, 1 is fastest; see DESIGN.md)")
	execAgent := fs.Bool("exec", true, "run an exec agent for this host")
	taskUser := fs.String("task-user", runtime.DefaultTaskUser(), taskUserUsage)
	level := fs.String("log-level", "warn", "log level")
	insecure := fs.Bool("insecure", false, "no TLS and no authorization: anyone who reaches the ports may read and change the whole cell")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *insecure {
		fmt.Fprintln(os.Stderr, "WARNING: troupe up runs with --insecure: no TLS, no authentication, no authorization; anyone who reaches its ports can read and change the whole cell")
	}
	node.RaiseGOMAXPROCS()
	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	defer log.Sync()
	if *dataDir == "" {
		if *dataDir, err = os.MkdirTemp("", "troupe-up-"); err != nil {
			return err
		}
		// Task users pass through it to their working directories, in
		// tasks/; the store and the certificates are private below it.
		if err := os.Chmod(*dataDir, 0o711); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := cell.Config{DataDir: *dataDir, GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr, Hollow: *hollow, Shards: uint32(*shards),
		HollowCapacity: map[string]int64{"cpu": 16000, "memory": 64 << 30}, TaskUser: *taskUser, Insecure: *insecure, Logger: log}
	if *execAgent {
		cfg.ExecMachine, _ = agent.HostMachine()
		cfg.ExecCapacity = agent.HostCapacity()
	}
	c, err := cell.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Stop()
	c.Node.Registry().MustRegister(buildInfo())
	security := "insecure: no TLS, no authorization"
	if !*insecure {
		path, err := writeUpClientConfig(c)
		if err != nil {
			return err
		}
		security = "TLS; certificates in " + c.PKIDir() + "; the CLI's configuration (admin) in " + path
	}
	fmt.Printf(`Troupe cell up: store at %s (metrics http://%s/metrics), data in %s
  security: %s
  machines: %d (exec agent for this host: %v, hollow: %d)
  schedulers: batch-0, service-0, gang-0; controllers: job, node lifecycle, gc
Try:
  bin/troupe apply -f deploy/examples/batch.yaml
  bin/troupe get jobs
  bin/troupe get tasks
Stop with Ctrl-C.
`, c.Node.GRPCAddr(), c.Node.HTTPAddr(), *dataDir, security, *hollow+btoi(*execAgent), *execAgent, *hollow)
	select {
	case <-ctx.Done():
		fmt.Println("troupe up: shutting down")
		return nil
	case err := <-c.Errors():
		return err
	}
}

// writeUpClientConfig writes the CLI's configuration for c: its store's
// address and the admin certificate, by absolute path.
func writeUpClientConfig(c *cell.Cell) (string, error) {
	dir, err := filepath.Abs(c.PKIDir())
	if err != nil {
		return "", err
	}
	f := pki.DirFiles(dir, pki.LocalAdmin)
	return writeClientConfig(clientConfig{Endpoints: []string{c.Node.GRPCAddr()}, CA: f.CA, Cert: f.Cert, Key: f.Key})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
