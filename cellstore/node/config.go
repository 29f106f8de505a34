package node

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	dbconfig "github.com/lni/dragonboat/v4/config"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/server"
	"github.com/troupe-cluster/troupe/cellstore/watch"
)

// Config is one store node's configuration.
type Config struct {
	// NodeID is this node's replica ID in every shard (non-zero).
	NodeID uint64
	// DataDir holds the Raft logs and the shards' state.
	DataDir string
	// RaftAddr is the host:port replicas of other nodes reach this one at:
	// an address or a DNS name (a StatefulSet's or a compose service's),
	// which peers resolve again when they reconnect, so a node that
	// restarts with a new IP address is found again.
	RaftAddr string
	// RaftListenAddr, if set, is where the Raft transport listens
	// (0.0.0.0:7100) when RaftAddr names the node in a way it cannot bind
	// (a DNS name).
	RaftListenAddr string
	// GRPCAddr is where clients reach the store ("127.0.0.1:0" picks a
	// free port; see Node.GRPCAddr).
	GRPCAddr string
	// AdvertiseGRPCAddr, if set, is the gRPC address the node publishes
	// for clients and other tools to reach it at (default: GRPCAddr with
	// the port it got, and the Raft address's host when GRPCAddr names
	// none or 0.0.0.0), as etcd's advertised client URLs.
	AdvertiseGRPCAddr string
	// Version of the binary, which the node publishes and reports in
	// Status (empty: unknown).
	Version string
	// HTTPAddr serves /healthz and /metrics ("" disables it).
	HTTPAddr string
	// InitialMembers maps node IDs to Raft addresses for a new cell. Empty:
	// a one-node cell of this node. Ignored on restart.
	InitialMembers map[uint64]string
	// Join starts this node as a new member of an existing cell: its
	// shards wait, empty, until the cell adds the node (Admin.AddMember)
	// as a non-voting member and their leaders bring them up to date; the
	// node then promotes itself to a voter of each (learner.go). Ignored
	// on restart.
	Join bool
	// Shards is the cell's shard count, fixed when the cell is created.
	Shards uint32

	// RTT is the round trip time between nodes that Raft's timing
	// (ElectionRTT, HeartbeatRTT) is counted in.
	RTT                time.Duration
	ElectionRTT        uint64
	HeartbeatRTT       uint64
	SnapshotEntries    uint64 // take a snapshot every this many entries
	CompactionOverhead uint64 // Raft entries kept after a snapshot
	// LogDBMemory sizes Dragonboat's log store: tiny, small, medium, large.
	LogDBMemory string
	// LogStore is the Raft log store of a new data directory:
	// LogStoreTan, LogStorePebble, or LogStoreAuto (tan) to keep the one
	// an existing directory holds (logstore.go).
	LogStore string
	// ProposalTimeout bounds a commit or read that came without deadline.
	ProposalTimeout time.Duration

	// TLS is the node's credentials (a store identity): its gRPC service
	// takes only clients with a certificate of the cell's CA, and Raft
	// traffic only store nodes. Nil serves everything in plaintext to
	// anyone (troupe store --insecure).
	TLS *pki.Source
	// Rules authorize requests when TLS is set (nil: authz.Default()).
	Rules *authz.Rules
	// LeaderPreference, if it names a node, keeps every shard's
	// leadership on that node while it is up (leaderpref.go).
	LeaderPreference LeaderPreference

	Server server.Config
	Watch  watch.Config
	Logger *zap.Logger

	// fs, if set, is the file system Dragonboat works in (tests count
	// its fsyncs).
	fs dbconfig.IFS
}

// DefaultConfig returns a one-node cell on loopback with one shard.
func DefaultConfig() Config {
	return Config{
		NodeID:             1,
		DataDir:            "troupe-data",
		RaftAddr:           "127.0.0.1:7100",
		GRPCAddr:           "127.0.0.1:7000",
		HTTPAddr:           "127.0.0.1:7200",
		Shards:             1,
		RTT:                10 * time.Millisecond,
		ElectionRTT:        20,
		HeartbeatRTT:       2,
		SnapshotEntries:    10000,
		CompactionOverhead: 5000,
		LogDBMemory:        "small",
		ProposalTimeout:    5 * time.Second,
		Server:             server.DefaultConfig(),
		Watch:              watch.DefaultConfig(),
		Logger:             zap.NewNop(),
	}
}

// Validate checks the configuration and says precisely what is wrong.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.NodeID == 0 {
		add("node: NodeID must be non-zero")
	}
	if c.DataDir == "" {
		add("node: DataDir is required")
	}
	for name, a := range map[string]string{"RaftAddr": c.RaftAddr, "GRPCAddr": c.GRPCAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add("node: %s %q: %v", name, a, err)
		}
	}
	if c.Shards == 0 || c.Shards > 1024 {
		add("node: Shards must be in [1, 1024], got %d", c.Shards)
	}
	if c.RTT < time.Millisecond {
		add("node: RTT must be at least 1ms, got %v", c.RTT)
	}
	if c.HeartbeatRTT == 0 || c.ElectionRTT <= 2*c.HeartbeatRTT {
		add("node: need 0 < 2*HeartbeatRTT < ElectionRTT, got %d and %d", c.HeartbeatRTT, c.ElectionRTT)
	}
	if c.SnapshotEntries == 0 {
		add("node: SnapshotEntries must be positive")
	}
	if _, ok := logDBConfigs[c.LogDBMemory]; !ok {
		add("node: LogDBMemory %q is not one of tiny, small, medium, large", c.LogDBMemory)
	}
	if c.LogStore != LogStoreAuto && c.LogStore != LogStoreTan && c.LogStore != LogStorePebble {
		add("node: LogStore %q is not one of %s, %s or empty (auto)", c.LogStore, LogStoreTan, LogStorePebble)
	}
	if c.ProposalTimeout <= 0 {
		add("node: ProposalTimeout must be positive")
	}
	if c.LeaderPreference.Period < 0 {
		add("node: LeaderPreference.Period must be 0 (an election timeout) or more, got %v", c.LeaderPreference.Period)
	}
	if len(c.InitialMembers) > 0 && c.Join {
		add("node: a joining node takes no InitialMembers: the cell it joins has its members")
	} else if len(c.InitialMembers) > 0 {
		if a, ok := c.InitialMembers[c.NodeID]; !ok {
			add("node: InitialMembers does not include this node (%d)", c.NodeID)
		} else if a != c.RaftAddr {
			add("node: InitialMembers gives node %d the address %s, RaftAddr is %s", c.NodeID, a, c.RaftAddr)
		}
	}
	if c.Watch.RingRevisions <= 0 || c.Watch.RingBytes <= 0 {
		add("node: watch ring bounds must be positive")
	}
	if c.Server.MaxInflight < int(c.Shards) {
		add("node: Server.MaxInflight (%d) must be at least Shards (%d), or a request touching every shard could never run", c.Server.MaxInflight, c.Shards)
	}
	if err := c.Server.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Logger == nil {
		add("node: Logger is required")
	}
	if c.TLS != nil && c.TLS.Identity().Role != pki.RoleStore {
		add("node: the TLS certificate names %s; a store node needs a store identity", c.TLS.Identity())
	}
	return errors.Join(errs...)
}

// members returns the initial members of a new cell, defaulting to this
// node alone; none for a joining node.
func (c Config) members() map[uint64]string {
	if len(c.InitialMembers) > 0 || c.Join {
		return c.InitialMembers
	}
	return map[uint64]string{c.NodeID: c.RaftAddr}
}

// ParseMembers parses "1=host:port,2=host:port".
func ParseMembers(s string) (map[uint64]string, error) {
	out := map[uint64]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("member %q: want ID=HOST:PORT", part)
		}
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("member %q: ID must be a positive integer", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("member %q: %v", part, err)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("member %d listed twice", n)
		}
		out[n] = addr
	}
	return out, nil
}
