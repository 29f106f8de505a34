package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// committer commits +1 to a counter in a loop from several clients, as
// the admin, recording every commit that failed after clientlib's own
// retries, and the longest time between two successful commits.
type committer struct {
	key     string
	clients []*clientlib.Client
	stop    chan struct{}
	wg      sync.WaitGroup

	mu        sync.Mutex
	ok        int
	failures  []string
	latencies []time.Duration
	lastOK    time.Time
	longest   time.Duration // between two commits that succeeded
	started   time.Time
	ended     time.Time
	// before and after are the counter's value before the loops started
	// and after they stopped.
	before, after int64
	afterErr      error
}

// newCommitter makes one client per endpoint order given, each with
// clientlib's default configuration (retries included).
func newCommitter(key string, creds *pki.Source, orders [][]string) (*committer, error) {
	cm := &committer{key: key, stop: make(chan struct{})}
	for _, eps := range orders {
		cfg := clientlib.DefaultConfig(eps...)
		cfg.TLS = creds
		c, err := clientlib.New(cfg)
		if err != nil {
			return nil, err
		}
		cm.clients = append(cm.clients, c)
	}
	return cm, nil
}

// start runs the loops, each at most one commit per interval.
func (cm *committer) start(interval time.Duration) {
	cm.started, cm.lastOK = time.Now(), time.Now()
	for _, c := range cm.clients {
		cm.wg.Go(func() { cm.loop(c, interval) })
	}
}

func (cm *committer) loop(c *clientlib.Client, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-cm.stop:
			return
		case <-tick.C:
		}
		// Not the test's context: a commit in flight when the test stops
		// the loop runs to its end, so that no cancellation counts as a
		// failure. Its retries end well within this bound.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t0 := time.Now()
		resp, err := c.Commit(ctx, &storev1.CommitRequest{Groups: []*storev1.Group{{Ops: []*storev1.Op{
			{Op: &storev1.Op_Add{Add: &storev1.Add{Key: cm.key, Delta: 1, Min: 0, Max: math.MaxInt64}}}}}}})
		cancel()
		now := time.Now()
		if err == nil && !resp.GetGroups()[0].GetCommitted() {
			err = fmt.Errorf("group not committed: %v", resp.GetGroups()[0].GetFailure())
		}
		cm.mu.Lock()
		if err != nil {
			cm.failures = append(cm.failures, fmt.Sprintf("%s after %v: %v", t0.Format("15:04:05.000"), now.Sub(t0).Round(time.Millisecond), err))
		} else {
			cm.ok++
			cm.latencies = append(cm.latencies, now.Sub(t0))
			cm.longest = max(cm.longest, now.Sub(cm.lastOK))
			cm.lastOK = now
		}
		cm.mu.Unlock()
	}
}

// finish stops the loops and waits for the commits in flight.
func (cm *committer) finish() {
	close(cm.stop)
	cm.wg.Wait()
	cm.ended = time.Now()
	cm.after, cm.afterErr = counter(context.Background(), cm.clients[0], cm.key)
	for _, c := range cm.clients {
		c.Close()
	}
}

// report is a line on the commits during what.
func (cm *committer) report(what string) string {
	dur := cm.ended.Sub(cm.started)
	return fmt.Sprintf("commits during %s: %d in %v (%.0f/s) from %d clients, %d failed; latency p50 %v, p99 %v; "+
		"longest between two commits %v; counter %d -> %d",
		what, cm.ok, dur.Round(100*time.Millisecond), float64(cm.ok)/dur.Seconds(), len(cm.clients), len(cm.failures),
		cm.percentile(0.5).Round(time.Millisecond), cm.percentile(0.99).Round(time.Millisecond), cm.longest.Round(time.Millisecond),
		cm.before, cm.after)
}

// check fails if a commit failed, none succeeded, or the counter did not
// move by exactly the commits acknowledged.
func (cm *committer) check() error {
	if len(cm.failures) > 0 {
		n := min(len(cm.failures), 10)
		return fmt.Errorf("%d commits failed; the first %d:\n%s", len(cm.failures), n, strings.Join(cm.failures[:n], "\n"))
	}
	if cm.ok == 0 {
		return errors.New("no commit succeeded")
	}
	if cm.afterErr != nil {
		return fmt.Errorf("reading the counter: %w", cm.afterErr)
	}
	if cm.after-cm.before != int64(cm.ok) {
		return fmt.Errorf("the counter moved by %d, but %d commits were acknowledged", cm.after-cm.before, cm.ok)
	}
	return nil
}

// percentile of the successful commits' latencies.
func (cm *committer) percentile(p float64) time.Duration {
	if len(cm.latencies) == 0 {
		return 0
	}
	l := slices.Clone(cm.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(p*float64(len(l))))]
}

// counter reads the counter's value.
func counter(ctx context.Context, c *clientlib.Client, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := c.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if kv == nil {
		return 0, errors.New(key + " does not exist")
	}
	return strconv.ParseInt(string(kv.GetValue()), 10, 64)
}
