package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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

// storeCommand is `troupe store`: it runs one store node; its
// subcommands are the store's operations (members, backup, restore).
func (a *app) storeCommand() *cobra.Command {
	cfg := node.DefaultConfig()
	cfg.Version = version
	var (
		tf            tlsFlags
		idFromHost    bool
		members, join string
		shards        uint
		rules, level  string
		printRules    bool
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run one cell store node; store members|backup|restore",
		Long: `Run one node of the cell's store until SIGINT or SIGTERM: a new cell's
member (--initial-members), a node restarting on its data directory, or a
new member joining a running cell (--join). Its subcommands are the store's
operations: members, backup, restore.

A node the cell removes (store members remove) exits with status 1 saying
so, and does not start again on its data directory. A data directory
records its node and its cell (the CA of --ca); started as another node,
or with another cell's credentials, the node says whose it is and exits.`,
		Example: `  troupe store --node-id 1 --data-dir /var/lib/troupe/store --raft-addr 10.0.0.1:7100 --grpc-addr 10.0.0.1:7000 \
    --initial-members 1=10.0.0.1:7100,2=10.0.0.2:7100,3=10.0.0.3:7100 --ca ca.crt --cert store-1.crt --key store-1.key`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printRules {
				_, err := a.out.Write(authz.DefaultRulesYAML())
				return err
			}
			node.RaiseGOMAXPROCS()
			var err error
			if idFromHost {
				if cfg.NodeID, err = nodeIDFromHostname(); err != nil {
					return err
				}
			}
			if cfg.TLS, err = tf.source("store", a.errOut); err != nil {
				return err
			}
			if rules != "" {
				if cfg.TLS == nil {
					return errors.New("--rules needs TLS: an --insecure store authorizes nothing")
				}
				if cfg.Rules, err = authz.Load(rules); err != nil {
					return err
				}
			}
			if cfg.InitialMembers, err = node.ParseMembers(members); err != nil {
				return err
			}
			if cfg.Shards, err = storeShards(cfg.DataDir, uint32(shards), join, cfg.TLS); err != nil {
				return err
			}
			cfg.Join = join != ""
			if cfg.Logger, err = newLogger(level); err != nil {
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
				if err := joinCell(a.out, join, cfg, n); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.out, "troupe store node %d: gRPC %s, Raft %s, health and metrics http://%s/healthz /metrics, data in %s\n",
				cfg.NodeID, n.GRPCAddr(), cfg.RaftAddr, n.HTTPAddr(), cfg.DataDir)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			select {
			case <-ctx.Done():
				fmt.Fprintln(a.out, "troupe store: shutting down")
				return nil
			case <-n.Removed():
				// Like etcd's removed member: it exits, and does not
				// start again on its data directory.
				return errors.New(status.Convert(n.RemovedError()).Message())
			}
		},
	}
	fs := cmd.Flags()
	fs.Uint64Var(&cfg.NodeID, "node-id", cfg.NodeID, "this node's ID in the cell (non-zero)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for Raft logs and state")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "host:port other store nodes reach this one at (an address or a DNS name)")
	fs.StringVar(&cfg.RaftListenAddr, "raft-listen-addr", "", "host:port the Raft transport listens on, when --raft-addr is a name it cannot bind (default: --raft-addr)")
	fs.BoolVar(&idFromHost, "node-id-from-hostname", false, "take the node ID from the hostname's last number plus one (a StatefulSet's store-0 is node 1); overrides --node-id")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "host:port clients reach the store at")
	fs.StringVar(&cfg.AdvertiseGRPCAddr, "advertise-grpc-addr", "", "host:port the node publishes for clients (troupe status) to reach it at (default: --grpc-addr with the port it got, and the --raft-addr host when --grpc-addr names none)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "host:port for /healthz and /metrics (empty: off)")
	fs.StringVar(&members, "initial-members", "", "a new cell's members, ID=RAFTADDR,... (default: this node alone)")
	fs.StringVar(&join, "join", "", "join the cell the store node at this gRPC address serves, as a new member")
	fs.UintVar(&shards, "shards", 0, "shard count, fixed when the cell is created (default: the data directory's, the joined cell's, or 1)")
	fs.DurationVar(&cfg.RTT, "rtt", cfg.RTT, "network round trip that Raft timing is counted in")
	fs.Uint64Var(&cfg.SnapshotEntries, "snapshot-entries", cfg.SnapshotEntries, "Raft entries between snapshots")
	fs.Uint64Var(&cfg.CompactionOverhead, "compaction-overhead", cfg.CompactionOverhead, "Raft entries kept before each snapshot: a replica further behind catches up from a snapshot instead of the log")
	fs.StringVar(&cfg.LogDBMemory, "logdb-memory", cfg.LogDBMemory, "Raft log store memory: tiny, small, medium, large")
	fs.StringVar(&cfg.LogStore, "log-store", cfg.LogStore, "Raft log store of a new data directory: tan or pebble; empty (auto): tan, or the one an existing directory holds")
	fs.DurationVar(&cfg.Server.DedupeWindow, "dedupe-window", cfg.Server.DedupeWindow, "how long a txn_id's outcome is remembered")
	fs.Uint64Var(&cfg.Server.LogRetention, "log-retention", cfg.Server.LogRetention, "revisions of change log each shard keeps for watchers")
	fs.DurationVar(&cfg.Server.ProgressInterval, "progress-interval", cfg.Server.ProgressInterval, "how often idle watchers get a progress notification")
	fs.IntVar(&cfg.Server.MaxInflight, "max-inflight", cfg.Server.MaxInflight, "proposals in flight before commits get RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.Server.TxnTimeout, "txn-timeout", cfg.Server.TxnTimeout, "how long a cross-shard transaction may stay prepared before its shards' leaders resolve it")
	fs.DurationVar(&cfg.Server.FreezeTimeout, "backup-freeze-timeout", cfg.Server.FreezeTimeout, "the longest a backup may keep the cell's writes paused (its freeze lapses by itself then)")
	fs.DurationVar(&cfg.Server.PrepareDelay, "fault-prepare-delay", 0, "FAULT TESTS ONLY: wait this long after a cross-shard transaction's prepares, before its resolution and reply")
	fs.IntVar(&cfg.Server.MaxInflightPerIdentity, "max-inflight-per-identity", 0, "one identity's share of --max-inflight (0: a quarter of it)")
	fs.Uint64Var(&cfg.LeaderPreference.Node, "leader-preference", 0, "node ID that should lead every shard while it is up and caught up (0: Raft's elections decide); give every node the same")
	tf.register(fs)
	fs.StringVar(&rules, "rules", "", "authorization rules file replacing the built-in rules (see --print-default-rules)")
	fs.BoolVar(&printRules, "print-default-rules", false, "print the built-in authorization rules and exit")
	fs.StringVar(&level, "log-level", "warn", "log level: debug, info, warn, error")
	cmd.AddCommand(a.membersCommand(), a.backupCommand(), a.restoreCommand())
	return cmd
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
func joinCell(out io.Writer, endpoint string, cfg node.Config, n *node.Node) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(pki.StoreCredentials(cfg.TLS)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := storev1.NewAdminClient(conn).AddMember(ctx, &storev1.AddMemberRequest{NodeId: cfg.NodeID, RaftAddress: cfg.RaftAddr, ShardCount: cfg.Shards})
	if nv := n.NonVoting(); storeerr.Is(err, storeerr.NotCaughtUp) && len(nv) > 0 {
		fmt.Fprintf(out, "troupe store node %d joined the cell at %s and is still catching up: it does not vote in shards %s yet (troupe store members list)\n",
			cfg.NodeID, endpoint, shardRanges(nv))
		return nil
	}
	if err != nil {
		return fmt.Errorf("join %s: %w", endpoint, err)
	}
	fmt.Fprintf(out, "troupe store node %d joined the cell at %s:\n", cfg.NodeID, endpoint)
	return printMembers(out, resp.GetMembers())
}

// statusCommand is `troupe status`: per store node of the cell, its
// addresses, its health (every shard has a leader), the shards it leads,
// its applied index, how far it lags the most advanced node shown, shard
// by shard, and its version. It asks the endpoints (every one given, or
// the context's), then every member of the cell the store lists (Admin
// ListMembers) that none of them is, at the gRPC address the member
// published; -o json prints the nodes' raw status.
func (a *app) statusCommand() *cobra.Command {
	var (
		output  string
		members bool
		cf      *connFlags
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the store nodes' status",
		Long: `Show each store node of the cell: those at --endpoint (every address
given, or the context's), then every other member of the cell, from the
store's member list, asked at the gRPC address it published. For each:
its ID, the address asked, the gRPC and Raft addresses it reports, its
health (every shard has a leader), the shards it leads, its applied index
(summed over shards), its lag (the most entries any shard is behind the
most advanced node shown) and its version (for a member that does not
answer, the one it last published); then the CLI's version. A member
that has published no gRPC address is shown as such. It exits with
status 1 when a node is unreachable, unhealthy, removed from the cell,
or a member cannot be asked. --members=false asks the endpoints alone
(a store node's own health check, which another node's outage must not
fail).`,
		Example: `  troupe status --endpoint 127.0.0.1:7001
  troupe status --endpoint 127.0.0.1:7000 --members=false   # this node only`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return usagef("-o is table or json, not %q", output)
			}
			t, err := a.target(cmd, cf)
			if err != nil {
				return err
			}
			eps := slices.Clone(t.endpoints)
			sts, errs := nodeStatuses(cmd.Context(), eps, t.creds, cf.timeout)
			if !slices.ContainsFunc(errs, func(err error) bool { return err == nil }) {
				if err := unreachableAll(t, errs, cf.timeout); err != nil {
					return err
				}
			}
			var ms []*storev1.Member
			if members {
				ms = listMembers(cmd.Context(), t, eps, errs, cf.timeout)
				more := unasked(ms, eps, sts)
				moreSts, moreErrs := nodeStatuses(cmd.Context(), more, t.creds, cf.timeout)
				eps, sts, errs = append(eps, more...), append(sts, moreSts...), append(errs, moreErrs...)
			}
			if output == "json" {
				for i, st := range sts {
					if errs[i] != nil {
						return fmt.Errorf("status of %s: %w", eps[i], errs[i])
					}
					b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(st)
					if err != nil {
						return err
					}
					fmt.Fprintln(a.out, string(b))
				}
				return nil
			}
			return printStatus(a.out, eps, sts, errs, ms)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().BoolVar(&members, "members", true, "also ask the cell's other members, at the gRPC addresses they published (false: the endpoints alone)")
	cf = a.addConnFlags(cmd, 5*time.Second, "request timeout per node")
	return cmd
}

// nodeStatuses asks the nodes at eps for their status, all at once.
func nodeStatuses(ctx context.Context, eps []string, creds *pki.Source, timeout time.Duration) ([]*storev1.StatusResponse, []error) {
	sts := make([]*storev1.StatusResponse, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() { sts[i], errs[i] = nodeStatus(ctx, ep, creds, timeout) })
	}
	wg.Wait()
	return sts, errs
}

// unasked lists the published gRPC addresses of the members that did
// not answer at eps (and were not asked there already).
func unasked(members []*storev1.Member, eps []string, sts []*storev1.StatusResponse) []string {
	answered := map[uint64]bool{}
	for _, st := range sts {
		if st != nil {
			answered[st.GetReplicaId()] = true
		}
	}
	var out []string
	for _, m := range members {
		if a := m.GetGrpcAddress(); a != "" && !answered[m.GetNodeId()] && !slices.Contains(eps, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// unreachableAll is the error of status when no node answered at all:
// the probe's words when none is reachable (nil if some answered, with an
// error: the table says which).
func unreachableAll(t target, errs []error, timeout time.Duration) error {
	for _, err := range errs {
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			return nil
		}
	}
	return unreachable(t, errs, timeout)
}

// listMembers asks the first node that answered for the cell's members
// (nil if none answers it: the table then shows the nodes asked only).
func listMembers(ctx context.Context, t target, eps []string, errs []error, timeout time.Duration) []*storev1.Member {
	i := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	if i < 0 {
		return nil
	}
	conn, err := grpc.NewClient(eps[i], grpc.WithTransportCredentials(pki.StoreCredentials(t.creds)))
	if err != nil {
		return nil
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := storev1.NewAdminClient(conn).ListMembers(ctx, &storev1.ListMembersRequest{})
	if err != nil {
		return nil
	}
	return resp.GetMembers()
}

// printStatus prints a line per node asked: NODE, ENDPOINT (the address
// asked), GRPC and RAFT (the addresses it reports), HEALTH, LEADS, APPLIED
// (the sum over shards of the applied Raft index), LAG (the most entries
// any shard is behind the most advanced node shown), VERSION; a node that
// did not answer at a member's published address is that member (its
// addresses and the version it published, as the answering node knows
// them). Then a line per member of members not shown, which could not be
// asked (it published no gRPC address), and the CLI's version. Every node
// that did not answer, is unhealthy or could not be asked counts as
// unhealthy.
func printStatus(out io.Writer, eps []string, sts []*storev1.StatusResponse, errs []error, members []*storev1.Member) error {
	top := map[uint32]uint64{} // shard -> most advanced applied index shown
	for _, st := range sts {
		for _, sh := range st.GetShards() {
			top[sh.GetShard()] = max(top[sh.GetShard()], sh.GetAppliedIndex())
		}
	}
	memberAt := map[string]*storev1.Member{} // by published gRPC address
	for _, m := range members {
		if a := m.GetGrpcAddress(); a != "" {
			memberAt[a] = m
		}
	}
	shown := map[uint64]bool{}
	for i, st := range sts {
		if errs[i] == nil {
			shown[st.GetReplicaId()] = true
		}
	}
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NODE\tENDPOINT\tGRPC\tRAFT\tHEALTH\tLEADS\tAPPLIED\tLAG\tVERSION")
	rows, unhealthy := len(sts), 0
	for i, st := range sts {
		if errs[i] != nil {
			unhealthy++
			health := "unreachable: " + status.Convert(errs[i]).Message()
			if storeerr.Is(errs[i], storeerr.NodeRemoved) {
				health = "removed: " + status.Convert(errs[i]).Message()
			}
			// The member published at this address, if any (the version
			// column stays empty for an address no member published).
			id, grpcAddr, raftAddr, ver := "-", "-", "-", ""
			if m := memberAt[eps[i]]; m != nil && !shown[m.GetNodeId()] {
				shown[m.GetNodeId()] = true
				id, grpcAddr, raftAddr, ver = strconv.FormatUint(m.GetNodeId(), 10), m.GetGrpcAddress(), dash(m.GetRaftAddress()), dash(m.GetVersion())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t-\t-\t-\t%s\n", id, eps[i], grpcAddr, raftAddr, health, ver)
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
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", st.GetReplicaId(), eps[i], dash(st.GetGrpcAddress()), dash(st.GetRaftAddress()),
			health, shardRanges(leads), applied, lag, dash(st.GetVersion()))
	}
	for _, m := range members {
		if shown[m.GetNodeId()] {
			continue
		}
		rows++
		unhealthy++
		health := "not asked (add its address to --endpoint)"
		if m.GetGrpcAddress() == "" {
			health = "gRPC address unknown (not published yet; add its address to --endpoint)"
		}
		fmt.Fprintf(w, "%d\t-\t%s\t%s\t%s\t%s\t-\t-\t%s\n", m.GetNodeId(), dash(m.GetGrpcAddress()), dash(m.GetRaftAddress()),
			health, shardRanges(m.GetLeads()), dash(m.GetVersion()))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nCLI: troupe %s (commit %s)\n", version, commit)
	if unhealthy > 0 {
		return fmt.Errorf("%d of %d nodes unhealthy", unhealthy, rows)
	}
	return nil
}
