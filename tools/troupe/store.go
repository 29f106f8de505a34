package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/troupe-cluster/troupe/cellstore/node"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// newLogger returns a zap logger at level (quiet by default: warnings and
// errors only).
func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Encoding = "console"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	return cfg.Build()
}

func runStore(args []string) error {
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.Uint64Var(&cfg.NodeID, "node-id", cfg.NodeID, "this node's ID in the cell (non-zero)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for Raft logs and state")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "host:port other store nodes reach this one at")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "host:port clients reach the store at")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "host:port for /healthz and /metrics (empty: off)")
	members := fs.String("initial-members", "", "a new cell's members, ID=RAFTADDR,... (default: this node alone)")
	fs.BoolVar(&cfg.Join, "join", false, "join an existing cell as a new member")
	shards := fs.Uint("shards", uint(cfg.Shards), "shard count, fixed when the cell is created")
	fs.DurationVar(&cfg.RTT, "rtt", cfg.RTT, "network round trip that Raft timing is counted in")
	fs.Uint64Var(&cfg.SnapshotEntries, "snapshot-entries", cfg.SnapshotEntries, "Raft entries between snapshots")
	fs.StringVar(&cfg.LogDBMemory, "logdb-memory", cfg.LogDBMemory, "Raft log store memory: tiny, small, medium, large")
	fs.DurationVar(&cfg.Server.DedupeWindow, "dedupe-window", cfg.Server.DedupeWindow, "how long a txn_id's outcome is remembered")
	fs.Uint64Var(&cfg.Server.LogRetention, "log-retention", cfg.Server.LogRetention, "revisions of change log each shard keeps for watchers")
	fs.DurationVar(&cfg.Server.ProgressInterval, "progress-interval", cfg.Server.ProgressInterval, "how often idle watchers get a progress notification")
	fs.IntVar(&cfg.Server.MaxInflight, "max-inflight", cfg.Server.MaxInflight, "proposals in flight before commits get RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.Server.TxnTimeout, "txn-timeout", cfg.Server.TxnTimeout, "how long a cross-shard transaction may stay prepared before its shards' leaders resolve it")
	fs.DurationVar(&cfg.Server.PrepareDelay, "fault-prepare-delay", 0, "FAULT TESTS ONLY: wait this long between a cross-shard transaction's prepare and its decision")
	level := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Shards = uint32(*shards)
	var err error
	if cfg.InitialMembers, err = node.ParseMembers(*members); err != nil {
		return err
	}
	if cfg.Logger, err = newLogger(*level); err != nil {
		return err
	}
	defer cfg.Logger.Sync()
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Printf("troupe store node %d: gRPC %s, Raft %s, health and metrics http://%s/healthz /metrics, data in %s\n",
		cfg.NodeID, n.GRPCAddr(), cfg.RaftAddr, n.HTTPAddr(), cfg.DataDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Println("troupe store: shutting down")
	return nil
}

func runStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "127.0.0.1:7000", "store node gRPC address")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := storev1.NewStoreClient(conn).Status(ctx, &storev1.StatusRequest{})
	if err != nil {
		return err
	}
	b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(st)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
