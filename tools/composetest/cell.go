package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// cell is the test's view of the running cell from the host: the store
// nodes' published gRPC ports, the admin's certificate copied out of the
// pki volume, and the troupe binary copied out of the image.
type cell struct {
	dir       string // the admin's certificate and the CLI binary
	troupe    string
	endpoints []string // store-1..3's published gRPC addresses
	creds     *pki.Source
	client    *clientlib.Client
	nodes     []*grpc.ClientConn
}

func (c *cell) files() pki.Files {
	return pki.Files{CA: filepath.Join(c.dir, "ca.crt"), Cert: filepath.Join(c.dir, "admin-admin.crt"), Key: filepath.Join(c.dir, "admin-admin.key")}
}

func (c *cell) connect() error {
	var err error
	if c.creds, err = pki.NewSource(c.files(), nil); err != nil {
		return err
	}
	cfg := clientlib.DefaultConfig(c.endpoints...)
	cfg.TLS = c.creds
	if c.client, err = clientlib.New(cfg); err != nil {
		return err
	}
	for _, ep := range c.endpoints {
		// Reconnect within a second of a node coming back (gRPC's default
		// backoff grows to two minutes).
		conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(pki.StoreCredentials(c.creds)),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
				Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, conn)
	}
	return nil
}

func (c *cell) close() {
	if c.client != nil {
		c.client.Close()
	}
	for _, n := range c.nodes {
		n.Close()
	}
}

// cli runs the troupe CLI against the cell as its admin.
func (c *cell) cli(ctx context.Context, args ...string) (string, error) {
	f := c.files()
	env := []string{"TROUPE_CA=" + f.CA, "TROUPE_CERT=" + f.Cert, "TROUPE_KEY=" + f.Key,
		"TROUPE_ENDPOINT=" + strings.Join(c.endpoints, ","),
		// No ~/.troupe/config.yaml of a local cell gets in the way.
		"TROUPE_CONFIG=" + filepath.Join(c.dir, "no-config.yaml")}
	return run(ctx, env, c.troupe, args...)
}

// status asks store node i (0-based) for its status.
func (c *cell) status(ctx context.Context, i int) (*storev1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return storev1.NewStoreClient(c.nodes[i]).Status(ctx, &storev1.StatusRequest{})
}

// healthy says whether every shard of node i's status has a leader.
func healthy(st *storev1.StatusResponse) bool {
	if len(st.GetShards()) == 0 {
		return false
	}
	for _, sh := range st.GetShards() {
		if sh.GetLeaderReplicaId() == 0 {
			return false
		}
	}
	return true
}

// applied maps each shard to the node's applied Raft index.
func applied(st *storev1.StatusResponse) map[uint32]uint64 {
	m := map[uint32]uint64{}
	for _, sh := range st.GetShards() {
		m[sh.GetShard()] = sh.GetAppliedIndex()
	}
	return m
}

// allHealthy waits until every node answers with a leader for every shard.
func (c *cell) allHealthy(ctx context.Context) error {
	return waitFor(ctx, "every store node healthy", func() (bool, string, error) {
		for i := range c.nodes {
			st, err := c.status(ctx, i)
			if err != nil {
				return false, fmt.Sprintf("store-%d: %v", i+1, err), nil
			}
			if !healthy(st) {
				return false, fmt.Sprintf("store-%d: a shard has no leader", i+1), nil
			}
		}
		return true, "", nil
	})
}

// othersApplied is, per shard, the most any node but i has applied.
func (c *cell) othersApplied(ctx context.Context, i int) (map[uint32]uint64, error) {
	target := map[uint32]uint64{}
	err := waitFor(ctx, fmt.Sprintf("the applied index of the nodes other than store-%d", i+1), func() (bool, string, error) {
		for j := range c.nodes {
			if j == i {
				continue
			}
			st, err := c.status(ctx, j)
			if err != nil {
				return false, fmt.Sprintf("store-%d: %v", j+1, err), nil
			}
			for sh, a := range applied(st) {
				target[sh] = max(target[sh], a)
			}
		}
		return true, "", nil
	})
	return target, err
}

// catchUp waits until node i has applied, in every shard, at least
// target.
func (c *cell) catchUp(ctx context.Context, i int, target map[uint32]uint64) error {
	return waitFor(ctx, fmt.Sprintf("store-%d to catch up", i+1), func() (bool, string, error) {
		st, err := c.status(ctx, i)
		if err != nil {
			return false, err.Error(), nil
		}
		have := applied(st)
		for sh, t := range target {
			if have[sh] < t {
				return false, fmt.Sprintf("applied %v, want %v", have, target), nil
			}
		}
		return true, "", nil
	})
}

// nodeApplied is node i's applied index per shard.
func (c *cell) nodeApplied(ctx context.Context, i int) (map[uint32]uint64, error) {
	st, err := c.status(ctx, i)
	if err != nil {
		return nil, err
	}
	return applied(st), nil
}

// lag is the most entries any shard of have is behind target.
func lag(have, target map[uint32]uint64) uint64 {
	var l uint64
	for sh, t := range target {
		if have[sh] < t {
			l = max(l, t-have[sh])
		}
	}
	return l
}

// leader is the node (0-based) leading shard 0.
func (c *cell) leader(ctx context.Context) (int, error) {
	for i := range c.nodes {
		st, err := c.status(ctx, i)
		if err != nil {
			continue
		}
		for _, sh := range st.GetShards() {
			if sh.GetShard() == 0 && sh.GetLeaderReplicaId() != 0 {
				return int(sh.GetLeaderReplicaId()) - 1, nil
			}
		}
	}
	return 0, errors.New("no node knows shard 0's leader")
}

// job reads a job.
func (c *cell) job(ctx context.Context, name string) (*troupev1.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return clientlib.Get(ctx, c.client, clientlib.Jobs, clientlib.Jobs.Prefix+"default/"+name)
}

// waitJob waits until job name's status satisfies ok.
func (c *cell) waitJob(ctx context.Context, name, want string, ok func(*troupev1.JobStatus) bool) (*troupev1.Job, error) {
	var j *troupev1.Job
	err := waitFor(ctx, "job "+name+" "+want, func() (bool, string, error) {
		var err error
		if j, err = c.job(ctx, name); err != nil {
			return false, err.Error(), nil
		}
		st := j.GetStatus()
		if st.GetPhase() == troupev1.JobPhase_JOB_PHASE_FAILED && want != "FAILED" {
			return false, "", fmt.Errorf("job %s failed: %s", name, st.GetMessage())
		}
		return ok(st), fmt.Sprintf("%s: %d pending, %d running, %d succeeded, %d failed", st.GetPhase(),
			st.GetPending(), st.GetRunning(), st.GetSucceeded(), st.GetFailed()), nil
	})
	return j, err
}

// tasks lists a job's tasks.
func (c *cell) tasks(ctx context.Context, job string) ([]*troupev1.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ts, _, err := clientlib.List(ctx, c.client, clientlib.Tasks, "default/"+job+"/")
	return ts, err
}

// machines lists the machines.
func (c *cell) machines(ctx context.Context) ([]*troupev1.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ms, _, err := clientlib.List(ctx, c.client, clientlib.Machines, "")
	return ms, err
}

// leases lists the machines' leases.
func (c *cell) leases(ctx context.Context) ([]*troupev1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ls, _, err := clientlib.List(ctx, c.client, clientlib.Leases, "")
	return ls, err
}

// renewedSince waits until every lease whose machine has the prefix was
// renewed after t: the machines' agent is the process started after t.
func (c *cell) renewedSince(ctx context.Context, prefix string, want int, t time.Time) error {
	return waitFor(ctx, fmt.Sprintf("%d leases of %s* renewed", want, prefix), func() (bool, string, error) {
		ls, err := c.leases(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		n := 0
		for _, l := range ls {
			if strings.HasPrefix(l.GetMetadata().GetName(), prefix) && l.GetRenewed().AsTime().After(t) {
				n++
			}
		}
		return n >= want, fmt.Sprintf("%d of %d", n, want), nil
	})
}

var buildInfoRE = regexp.MustCompile(`(?m)^troupe_build_info\{[^}]*version="([^"]*)"[^}]*\} 1$`)

// buildVersion is the version label of troupe_build_info at a /metrics URL.
func buildVersion(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	m := buildInfoRE.FindSubmatch(body)
	if m == nil {
		return "", fmt.Errorf("%s: no troupe_build_info", url)
	}
	return string(m[1]), nil
}

// waitFor polls cond every 250 ms until it holds, it fails, or ctx (the
// step's deadline) ends; the error then says what was awaited and what
// was seen last.
func waitFor(ctx context.Context, what string, cond func() (ok bool, seen string, err error)) error {
	var last string
	for {
		ok, seen, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if seen != "" {
			last = seen
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last seen: %s)", what, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// writeFile writes a manifest for the CLI.
func writeFile(dir, name, text string) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, []byte(text), 0o644)
}
