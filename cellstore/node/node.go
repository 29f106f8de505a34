// Package node runs one cell store node: a Dragonboat NodeHost holding a
// replica of every shard, each an on-disk state machine on Pebble
// (cellstore/statemachine), the watch hub fed by those replicas, the gRPC
// store and admin services, and an HTTP endpoint for health and Prometheus
// metrics. Membership changes are in members.go (a joining node's learner
// stage in learner.go), backup and restore in backup.go, the Raft
// transport between nodes (plain TCP or mutual TLS) in transport.go.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	dbconfig "github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/statemachine"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	"github.com/troupe-cluster/troupe/cellstore/watch"
	"github.com/troupe-cluster/troupe/proto/codec"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Node is a running store node.
type Node struct {
	cfg      Config
	log      *zap.Logger
	nh       *dragonboat.NodeHost
	backend  *raftBackend
	hub      *watch.Hub
	registry *prometheus.Registry

	mu  sync.Mutex
	sms []*statemachine.StateMachine // by shard index, set as replicas open

	grpcServer *grpc.Server
	grpcLis    net.Listener
	httpServer *http.Server
	httpLis    net.Listener
	stop       chan struct{} // ends the shards' proposers and promotion loops
	load       *cpuLoad      // whether the CPU limits the proposers (groupcommit.go)
	// promoting: a joined node's promotion loops (learner.go) and the
	// leader-preference loop (leaderpref.go); Close waits for them before
	// closing the Raft host they read.
	promoting sync.WaitGroup
	// publishing: the node publishing its record (publish.go), which
	// closes published when done; Close waits for it before closing the
	// Raft host.
	publishing sync.WaitGroup
	published  chan struct{}
	closeOnce  sync.Once
	removals   removals // removal.go
}

// streamWorkers is how many goroutines the gRPC server keeps to run
// calls, each reused from call to call (grpc.NumStreamWorkers). A call on
// a fresh goroutine grows its stack on the way to Raft and back, copying
// it each time (runtime.newstack under processRPC was 2-3% of the CPU of
// the bench workloads); a worker keeps its grown stack. A call takes a
// worker for its whole life, so there are enough for the concurrency of
// a busy node's commits; calls beyond them get a goroutine of their own,
// as they all did before.
const streamWorkers = 128

// The flow-control windows of the gRPC server's connections, fixed rather
// than left to gRPC's BDP estimator, which is on unless a window is set:
// it answers the first data of a round with a window update and a ping,
// which the client answers with a ping ack, so a lone commit cost each
// side an extra write and read, and a goroutine wake-up at either end of
// each (clients of the store fix theirs too,
// clientlib.FlowControlDialOptions; without the estimator on either side
// seq spent 3-9% less CPU per op on the 2-core development machine). The
// stream window holds the largest request (Server.Limits, 4 MiB by
// default) at once; the connection window is the estimator's own ceiling.
const (
	grpcStreamWindow = 4 << 20
	grpcConnWindow   = 16 << 20
)

// Start starts a store node. It returns once the node serves gRPC; shards
// may still be electing leaders (see WaitReady).
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := privateDir(cfg.DataDir); err != nil {
		return nil, err
	}
	meta, err := checkCellMeta(cfg, time.Now())
	if err != nil {
		return nil, err
	}
	if m := cfg.members(); meta.Restored && (len(m) != 1 || m[cfg.NodeID] == "") {
		return nil, fmt.Errorf("node: %s holds a restored cell, which starts with this node alone; add the others with AddMember (troupe store members add)", cfg.DataDir)
	}
	quietenDragonboat()
	wcfg := cfg.Watch
	wcfg.Retention = cfg.Server.LogRetention
	n := &Node{cfg: cfg, log: cfg.Logger, hub: watch.NewHub(wcfg, cfg.Shards), registry: prometheus.NewRegistry(),
		sms: make([]*statemachine.StateMachine, cfg.Shards)}
	n.removals.removed = make(chan struct{})
	n.published = make(chan struct{})
	if err := n.startRaft(meta); err != nil {
		return nil, err
	}
	if meta.Restored {
		if err := n.compactRestored(meta); err != nil {
			n.Close()
			return nil, err
		}
	}
	if err := n.startGRPC(); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.startHTTP(); err != nil {
		n.Close()
		return nil, err
	}
	n.publishing.Go(n.publish)
	n.log.Info("store node started", zap.Uint64("node", cfg.NodeID), zap.String("grpc", n.GRPCAddr()),
		zap.String("raft", cfg.RaftAddr), zap.Uint32("shards", cfg.Shards))
	return n, nil
}

func (n *Node) startRaft(meta cellMeta) error {
	cfg := n.cfg
	hostDir := filepath.Join(cfg.DataDir, "raft")
	logStore, err := resolveLogStore(hostDir, cfg.LogStore)
	if err != nil {
		return err
	}
	nhc := dbconfig.NodeHostConfig{
		NodeHostDir:    hostDir,
		RTTMillisecond: uint64(cfg.RTT / time.Millisecond),
		RaftAddress:    cfg.RaftAddr,
		ListenAddress:  cfg.RaftListenAddr,
		Expert:         expertConfig(cfg.LogDBMemory, logStore),
	}
	nhc.Expert.FS = cfg.fs
	// Always Troupe's transport, plain or TLS: one code path everywhere.
	nhc.Expert.TransportFactory = newTransportFactory(raftTLS(cfg.TLS), n.log)
	nhc.SystemEventListener = eventListener{n}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return fmt.Errorf("node: start raft host: %w", err)
	}
	if nh == nil {
		// Dragonboat recovers a panic of its own that is not an error
		// and returns neither host nor error.
		return errors.New("node: start raft host: Dragonboat failed without an error")
	}
	n.nh = nh
	n.log.Info("raft log store", zap.String("store", logStore))
	if err := n.checkReplicaIDs(meta); err != nil {
		n.closeRaft()
		return err
	}
	if err := recordCellMeta(cfg.DataDir, meta); err != nil {
		n.closeRaft()
		return err
	}
	joined, err := n.recordJoin(meta)
	if err != nil {
		n.closeRaft()
		return err
	}
	members := map[uint64]dragonboat.Target{}
	for id, addr := range cfg.members() {
		members[id] = addr
	}
	smCfg := statemachine.Config{Dir: stateDir(cfg.DataDir), Logger: n.log, Observer: n.hub}
	sessions := make([]*client.Session, cfg.Shards)
	for i := range cfg.Shards {
		rc := dbconfig.Config{
			ReplicaID:          cfg.NodeID,
			ShardID:            shardID(i),
			ElectionRTT:        cfg.ElectionRTT,
			HeartbeatRTT:       cfg.HeartbeatRTT,
			CheckQuorum:        true,
			PreVote:            true,
			SnapshotEntries:    cfg.SnapshotEntries,
			CompactionOverhead: cfg.CompactionOverhead,
			// Membership changes name the membership they change
			// (members.go), so concurrent ones cannot both apply.
			OrderedConfigChange: true,
			// A joining node's replicas start as non-voting members,
			// on every start (learner.go).
			IsNonVoting: joined,
		}
		create := func(uint64, uint64) sm.IOnDiskStateMachine {
			m := statemachine.New(smCfg, i)
			n.hub.Attach(i, m)
			n.mu.Lock()
			n.sms[i] = m
			n.mu.Unlock()
			return m
		}
		// A replica that exists already restarts as Dragonboat recorded it:
		// how it was created, whether as an initial member or by joining,
		// no longer matters (but a joined node's start non-voting, above).
		// One a joined node lacks joins, whatever Join says now.
		initial, join := members, cfg.Join
		if joined {
			initial, join = nil, true
		}
		if nh.HasNodeInfo(rc.ShardID, rc.ReplicaID) {
			initial, join = nil, false
		}
		if err := nh.StartOnDiskReplica(initial, join, create, rc); err != nil {
			n.closeRaft()
			if errors.Is(err, dragonboat.ErrReplicaRemoved) {
				return storeerr.NodeRemoved.With("node: start shard %d: node %d was removed from the cell; remove %s and join as a new node, with another node ID",
					i, cfg.NodeID, cfg.DataDir)
			}
			return fmt.Errorf("node: start shard %d: %w", i, err)
		}
		sessions[i] = nh.GetNoOPSession(shardID(i))
	}
	backend := &raftBackend{nh: nh, n: n, sessions: sessions}
	n.backend = backend
	n.stop = make(chan struct{})
	n.load = newCPULoad(processCores())
	go n.load.run(n.stop)
	for i := range cfg.Shards {
		pr := newProposer(backend, i, n.load, cfg.Server.MaxInflight, n.stop)
		backend.proposers = append(backend.proposers, pr)
		go pr.run()
	}
	if joined {
		for i := range cfg.Shards {
			n.promoting.Go(func() { backend.promoteWhenCaughtUp(i, n.stop) })
		}
	}
	n.startLeaderPreference()
	scfg := cfg.Server
	scfg.Logger = n.log
	scfg.Metrics = server.NewMetrics(n.registry)
	var opts []grpc.ServerOption
	if cfg.TLS != nil {
		rules := cfg.Rules
		if rules == nil {
			rules = authz.Default()
		}
		scfg.Authorizer = &server.RulesAuthorizer{Rules: rules, Logger: n.log, Metrics: scfg.Metrics}
		// Any identity of the cell may connect; authorization decides
		// what each may do.
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS.ServerConfig(nil, false))))
	}
	srv, err := server.New(scfg, backend, n.hub, cfg.Shards)
	if err != nil {
		close(n.stop)
		n.promoting.Wait()
		n.closeRaft()
		return err
	}
	go n.recoverTxns(srv, scfg.TxnTimeout)
	opts = append(opts, grpc.ChainUnaryInterceptor(n.unaryRemoved), grpc.ChainStreamInterceptor(n.streamRemoved), codec.ServerOption(),
		grpc.NumStreamWorkers(streamWorkers), grpc.InitialWindowSize(grpcStreamWindow), grpc.InitialConnWindowSize(grpcConnWindow))
	n.grpcServer = grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(cfg.Server.Limits.MaxRequestBytes+64<<10))...)
	storev1.RegisterStoreServer(n.grpcServer, srv)
	storev1.RegisterAdminServer(n.grpcServer, server.NewAdmin(srv, backend))
	n.registry.MustRegister(&raftCollector{n: n}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.TLS != nil {
		n.registry.MustRegister(cfg.TLS.ExpiryGauge())
	}
	return nil
}

func (n *Node) startGRPC() error {
	lis, err := net.Listen("tcp", n.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("node: listen for gRPC on %s: %w", n.cfg.GRPCAddr, err)
	}
	n.grpcLis = lis
	go func() {
		if err := n.grpcServer.Serve(lis); err != nil {
			n.log.Error("gRPC server stopped", zap.Error(err))
		}
	}()
	return nil
}

func (n *Node) startHTTP() error {
	if n.cfg.HTTPAddr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("node: listen for HTTP on %s: %w", n.cfg.HTTPAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", n.serveHealth)
	n.httpLis = lis
	n.httpServer = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := n.httpServer.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server stopped", zap.Error(err))
		}
	}()
	return nil
}

// serveHealth answers 200 when every shard has a leader this node knows of.
func (n *Node) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if err := n.Healthy(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Healthy returns nil when every shard has a known leader, and the node
// was not removed from the cell.
func (n *Node) Healthy() error {
	if err := n.removedErr(); err != nil {
		return fmt.Errorf("removed: %w", err)
	}
	for i := range n.cfg.Shards {
		if _, _, ok, err := n.nh.GetLeaderID(shardID(i)); err != nil || !ok {
			return fmt.Errorf("shard %d has no leader", i)
		}
	}
	return nil
}

// WaitReady waits until every shard has a leader and the node has
// published its record (publish.go), or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(n.cfg.RTT)
	defer t.Stop()
	for {
		err := n.Healthy()
		if err == nil {
			select {
			case <-n.published:
				return nil
			default:
				err = errors.New("its record is not published yet")
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d not ready: %w", n.cfg.NodeID, err)
		case <-t.C:
		}
	}
}

// raftTLS secures Raft traffic with a node's credentials: mutual TLS
// between store identities only; plain TCP without credentials.
func raftTLS(creds *pki.Source) *TransportTLS {
	if creds == nil {
		return nil
	}
	stores := pki.AcceptRoles(pki.RoleStore)
	return &TransportTLS{Server: creds.ServerConfig(stores, false), Client: creds.DialConfig(stores)}
}

// privateDir makes dir, or makes it again, readable by this user alone:
// the cell's whole state is in there, and tasks run as other users on
// the same host. Its parents, made as any directory, let those users
// pass to what else they hold (troupe up's task directories).
func privateDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// stateDir holds a node's state machines, one subdirectory per shard.
func stateDir(dataDir string) string { return filepath.Join(dataDir, "state") }

// Registry is the node's metrics registry, served at /metrics; a
// process embedding the node adds its own collectors to it.
func (n *Node) Registry() *prometheus.Registry { return n.registry }

// GRPCAddr is the address the gRPC service listens on.
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// HTTPAddr is the address of the health and metrics endpoint ("" if off).
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// RaftAddr is the address the node's Raft transport listens on.
func (n *Node) RaftAddr() string { return n.cfg.RaftAddr }

// ID is the node's replica ID.
func (n *Node) ID() uint64 { return n.cfg.NodeID }

// Status describes the node and its shards.
func (n *Node) Status() *storev1.StatusResponse {
	st := &storev1.StatusResponse{ReplicaId: n.cfg.NodeID, RaftAddress: n.cfg.RaftAddr, GrpcAddress: n.advertisedGRPC(), ShardCount: n.cfg.Shards,
		Version: n.cfg.Version}
	for i := range n.cfg.Shards {
		ss := &storev1.ShardStatus{Shard: i, RaftShardId: shardID(i)}
		if leader, term, ok, err := n.nh.GetLeaderID(shardID(i)); err == nil && ok {
			ss.LeaderReplicaId, ss.Term, ss.IsLeader = leader, term, leader == n.cfg.NodeID
		}
		if m := n.stateMachine(i); m != nil {
			ss.AppliedIndex, ss.Revision, ss.SnapshotsRecovered = m.AppliedIndex(), m.Revision(), m.SnapshotsRecovered()
			if lr, err := m.ReadLog(0, 0); err == nil {
				ss.LogOldestRevision = lr.Oldest
			}
		}
		if lr, err := n.nh.GetLogReader(shardID(i)); err == nil {
			ss.RaftLogFirstIndex, _ = lr.GetRange()
		}
		st.Shards = append(st.Shards, ss)
	}
	return st
}

// StateMachine returns this node's replica of shard i (nil before it opens).
func (n *Node) StateMachine(i uint32) *statemachine.StateMachine { return n.stateMachine(i) }

func (n *Node) stateMachine(i uint32) *statemachine.StateMachine {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sms[i]
}

// NodeHost exposes the Raft host, for tests and membership tools.
func (n *Node) NodeHost() *dragonboat.NodeHost { return n.nh }

// Close stops the node: gRPC, HTTP, then the Raft host (which closes the
// state machines).
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		if n.httpServer != nil {
			n.httpServer.Close()
		}
		n.grpcServer.Stop()
		close(n.stop)
		n.promoting.Wait()
		n.publishing.Wait()
		n.closeRaft()
	})
}

// closeRaft closes the Raft host, which unloads every replica: not a
// removal (removal.go).
func (n *Node) closeRaft() {
	n.removals.closing.Store(true)
	n.nh.Close()
}

// checkReplicaIDs refuses a data directory whose Raft logs are another
// node's: what Dragonboat holds is the truth, whatever cell.json says (a
// directory from before it recorded the node).
func (n *Node) checkReplicaIDs(meta cellMeta) error {
	info := n.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{})
	if info == nil {
		return nil
	}
	for _, li := range info.LogInfo {
		if li.ShardID >= 1 && li.ShardID <= uint64(n.cfg.Shards) && li.ReplicaID != n.cfg.NodeID {
			meta.NodeID = li.ReplicaID
			return meta.check(n.cfg)
		}
	}
	return nil
}

// stopContext returns a context that ends when stop closes or cancel is
// called: a node loop's, for the Raft calls it makes.
func stopContext(stop <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
