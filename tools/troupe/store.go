package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/node"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
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

// runStore runs one store node, or one of the store's operations.
func runStore(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "members":
			return runMembers(args[1:])
		case "backup":
			return runBackup(args[1:])
		case "restore":
			return runRestore(args[1:])
		}
	}
	node.RaiseGOMAXPROCS()
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.Uint64Var(&cfg.NodeID, "node-id", cfg.NodeID, "this node's ID in the cell (non-zero)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for Raft logs and state")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "host:port other store nodes reach this one at (an address or a DNS name)")
	fs.StringVar(&cfg.RaftListenAddr, "raft-listen-addr", "", "host:port the Raft transport listens on, when --raft-addr is a name it cannot bind (default: --raft-addr)")
	idFromHost := fs.Bool("node-id-from-hostname", false, "take the node ID from the hostname's last number plus one (a StatefulSet's store-0 is node 1); overrides --node-id")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "host:port clients reach the store at")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "host:port for /healthz and /metrics (empty: off)")
	members := fs.String("initial-members", "", "a new cell's members, ID=RAFTADDR,... (default: this node alone)")
	join := fs.String("join", "", "join the cell the store node at this gRPC address serves, as a new member")
	shards := fs.Uint("shards", 0, "shard count, fixed when the cell is created (default: the data directory's, the joined cell's, or 1)")
	fs.DurationVar(&cfg.RTT, "rtt", cfg.RTT, "network round trip that Raft timing is counted in")
	fs.Uint64Var(&cfg.SnapshotEntries, "snapshot-entries", cfg.SnapshotEntries, "Raft entries between snapshots")
	fs.StringVar(&cfg.LogDBMemory, "logdb-memory", cfg.LogDBMemory, "Raft log store memory: tiny, small, medium, large")
	fs.DurationVar(&cfg.Server.DedupeWindow, "dedupe-window", cfg.Server.DedupeWindow, "how long a txn_id's outcome is remembered")
	fs.Uint64Var(&cfg.Server.LogRetention, "log-retention", cfg.Server.LogRetention, "revisions of change log each shard keeps for watchers")
	fs.DurationVar(&cfg.Server.ProgressInterval, "progress-interval", cfg.Server.ProgressInterval, "how often idle watchers get a progress notification")
	fs.IntVar(&cfg.Server.MaxInflight, "max-inflight", cfg.Server.MaxInflight, "proposals in flight before commits get RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.Server.TxnTimeout, "txn-timeout", cfg.Server.TxnTimeout, "how long a cross-shard transaction may stay prepared before its shards' leaders resolve it")
	fs.DurationVar(&cfg.Server.FreezeTimeout, "backup-freeze-timeout", cfg.Server.FreezeTimeout, "the longest a backup may keep the cell's writes paused (its freeze lapses by itself then)")
	fs.DurationVar(&cfg.Server.PrepareDelay, "fault-prepare-delay", 0, "FAULT TESTS ONLY: wait this long after a cross-shard transaction's prepares, before its resolution and reply")
	fs.IntVar(&cfg.Server.MaxInflightPerIdentity, "max-inflight-per-identity", 0, "one identity's share of --max-inflight (0: a quarter of it)")
	tf := registerTLSFlags(fs)
	rules := fs.String("rules", "", "authorization rules file replacing the built-in rules (see --print-default-rules)")
	printRules := fs.Bool("print-default-rules", false, "print the built-in authorization rules and exit")
	level := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *printRules {
		_, err := os.Stdout.Write(authz.DefaultRulesYAML())
		return err
	}
	var err error
	if *idFromHost {
		if cfg.NodeID, err = nodeIDFromHostname(); err != nil {
			return err
		}
	}
	if cfg.TLS, err = tf.source("store"); err != nil {
		return err
	}
	if *rules != "" {
		if cfg.TLS == nil {
			return errors.New("store: --rules needs TLS: an --insecure store authorizes nothing")
		}
		if cfg.Rules, err = authz.Load(*rules); err != nil {
			return err
		}
	}
	if cfg.InitialMembers, err = node.ParseMembers(*members); err != nil {
		return err
	}
	if cfg.Shards, err = storeShards(cfg.DataDir, uint32(*shards), *join, cfg.TLS); err != nil {
		return err
	}
	cfg.Join = *join != ""
	if cfg.Logger, err = newLogger(*level); err != nil {
		return err
	}
	defer cfg.Logger.Sync()
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	n.Registry().MustRegister(buildInfo())
	if cfg.Join {
		if err := joinCell(*join, cfg, n); err != nil {
			return err
		}
	}
	fmt.Printf("troupe store node %d: gRPC %s, Raft %s, health and metrics http://%s/healthz /metrics, data in %s\n",
		cfg.NodeID, n.GRPCAddr(), cfg.RaftAddr, n.HTTPAddr(), cfg.DataDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Println("troupe store: shutting down")
	return nil
}

// nodeIDFromHostname is the ordinal at the end of this host's name, plus
// one: a StatefulSet names its pods store-0, store-1, ...
func nodeIDFromHostname() (uint64, error) {
	host, err := os.Hostname()
	if err != nil {
		return 0, err
	}
	return nodeIDOf(host)
}

func nodeIDOf(host string) (uint64, error) {
	i := strings.LastIndexFunc(host, func(r rune) bool { return r < '0' || r > '9' })
	n, err := strconv.ParseUint(host[i+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("store: --node-id-from-hostname: hostname %q does not end in a number", host)
	}
	return n + 1, nil
}

// storeShards picks a node's shard count: the one given, else the one its
// data directory records, else 1; a new member takes its cell's, and
// refuses to start with another.
func storeShards(dataDir string, given uint32, join string, creds *pki.Source) (uint32, error) {
	recorded, err := node.CellShards(dataDir)
	if err != nil {
		return 0, err
	}
	want := cmp.Or(given, recorded)
	if join == "" || recorded != 0 {
		return cmp.Or(want, 1), nil // node.Start refuses a count that changed
	}
	conn, err := grpc.NewClient(join, grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := storev1.NewStoreClient(conn).Status(ctx, &storev1.StatusRequest{})
	if err != nil {
		return 0, fmt.Errorf("join %s: %w", join, err)
	}
	if want != 0 && want != st.GetShardCount() {
		return 0, fmt.Errorf("join %s: the cell has %d shards, not %d", join, st.GetShardCount(), want)
	}
	return st.GetShardCount(), nil
}

// joinCell asks the cell at endpoint to add the started node n, which cfg
// describes, to every shard: as a non-voting member that promotes itself
// once caught up, the request returning once it votes everywhere. A node
// still catching up when the request times out keeps running and catching
// up. Repeating it (a restart with --join) is harmless.
func joinCell(endpoint string, cfg node.Config, n *node.Node) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(pki.StoreCredentials(cfg.TLS)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := storev1.NewAdminClient(conn).AddMember(ctx, &storev1.AddMemberRequest{NodeId: cfg.NodeID, RaftAddress: cfg.RaftAddr, ShardCount: cfg.Shards})
	if nv := n.NonVoting(); storeerr.Is(err, storeerr.NotCaughtUp) && len(nv) > 0 {
		fmt.Printf("troupe store node %d joined the cell at %s and is still catching up: it does not vote in shards %s yet (troupe store members list)\n",
			cfg.NodeID, endpoint, shardRanges(nv))
		return nil
	}
	if err != nil {
		return fmt.Errorf("join %s: %w", endpoint, err)
	}
	fmt.Printf("troupe store node %d joined the cell at %s:\n", cfg.NodeID, endpoint)
	return printMembers(resp.GetMembers())
}

// runStatus shows the store nodes at --endpoint (every one given, or the
// CLI configuration's): per node its health (every shard has a leader),
// the shards it leads, its applied index and how far it lags the most
// advanced node shown, shard by shard; -o json prints their raw status.
func runStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	output := fs.String("o", "table", "table or json")
	cf := registerCLIFlags(fs)
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout per node")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	creds, err := cf.source()
	if err != nil {
		return err
	}
	eps := cf.endpoints()
	sts := make([]*storev1.StatusResponse, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() { sts[i], errs[i] = nodeStatus(ep, creds, *timeout) })
	}
	wg.Wait()
	switch *output {
	case "json":
		for i, st := range sts {
			if errs[i] != nil {
				return fmt.Errorf("status of %s: %w", eps[i], errs[i])
			}
			b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(st)
			if err != nil {
				return err
			}
			fmt.Println(string(b))
		}
		return nil
	case "table":
		return printStatus(os.Stdout, eps, sts, errs)
	default:
		return fmt.Errorf("status: -o is table or json, not %q", *output)
	}
}

func nodeStatus(endpoint string, creds *pki.Source, timeout time.Duration) (*storev1.StatusResponse, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(pki.StoreCredentials(creds)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return storev1.NewStoreClient(conn).Status(ctx, &storev1.StatusRequest{})
}

// printStatus prints a line per node: NODE, ENDPOINT, HEALTH, LEADS,
// APPLIED (the sum over shards of the applied Raft index), LAG (the most
// entries any shard is behind the most advanced node shown).
func printStatus(out io.Writer, eps []string, sts []*storev1.StatusResponse, errs []error) error {
	top := map[uint32]uint64{} // shard -> most advanced applied index shown
	for _, st := range sts {
		for _, sh := range st.GetShards() {
			top[sh.GetShard()] = max(top[sh.GetShard()], sh.GetAppliedIndex())
		}
	}
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NODE\tENDPOINT\tHEALTH\tLEADS\tAPPLIED\tLAG")
	unhealthy := 0
	for i, st := range sts {
		if errs[i] != nil {
			unhealthy++
			fmt.Fprintf(w, "-\t%s\tunreachable: %s\t-\t-\t-\n", eps[i], status.Convert(errs[i]).Message())
			continue
		}
		var leads, leaderless []uint32
		var applied, lag uint64
		for _, sh := range st.GetShards() {
			if sh.GetIsLeader() {
				leads = append(leads, sh.GetShard())
			}
			if sh.GetLeaderReplicaId() == 0 {
				leaderless = append(leaderless, sh.GetShard())
			}
			applied += sh.GetAppliedIndex()
			lag = max(lag, top[sh.GetShard()]-sh.GetAppliedIndex())
		}
		health := "ok"
		if len(leaderless) > 0 {
			unhealthy++
			health = "no leader for shards " + shardRanges(leaderless)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\n", st.GetReplicaId(), eps[i], health, shardRanges(leads), applied, lag)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if unhealthy > 0 {
		return fmt.Errorf("status: %d of %d nodes unhealthy", unhealthy, len(sts))
	}
	return nil
}
