package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/tools/bench"
)

// etcdSystem is the bench.System of an etcd cluster: one clientv3 client
// per member, sessions spread over them by client id (as the Troupe side
// spreads its sessions over the replicas).
type etcdSystem struct {
	clients  []*clientv3.Client
	counters counterCache
}

var _ bench.System = (*etcdSystem)(nil)

// dialEtcd connects one client to each endpoint, over TLS with tlsCfg
// (its client certificate and the CA it trusts) unless tlsCfg is nil.
func dialEtcd(endpoints []string, tlsCfg *tls.Config) (*etcdSystem, error) {
	s := &etcdSystem{counters: counterCache{m: map[string]counterValue{}}}
	for _, ep := range endpoints {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{ep},
			DialTimeout: dialTimeout,
			TLS:         tlsCfg,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("etcd client for %s: %w", ep, err)
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

func (s *etcdSystem) Name() string { return "etcd" }

func (s *etcdSystem) NewSession(_ context.Context, id int) (bench.Session, error) {
	return &etcdSession{c: s.clients[id%len(s.clients)], sys: s}, nil
}

func (s *etcdSystem) Close() error {
	var errs []error
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// etcdSession maps the bench operations onto etcd requests, one request
// per operation as on the Troupe side.
type etcdSession struct {
	c   *clientv3.Client
	sys *etcdSystem
}

var _ bench.Session = (*etcdSession)(nil)

// Put is a plain Put; the key's version is its ModRevision, the revision
// of the Put.
func (s *etcdSession) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	resp, err := s.c.Put(ctx, key, string(value))
	if err != nil {
		return 0, err
	}
	return uint64(resp.Header.Revision), nil
}

// PutEach is one Put per key, sent at once.
func (s *etcdSession) PutEach(ctx context.Context, keys []string, value []byte) error {
	return bench.AtOnce(keys, func(_ int, key string) error {
		_, err := s.Put(ctx, key, value)
		return err
	})
}

// CompareAndPut is Txn If(ModRevision(key) == version) Then Put Else Get:
// like a Troupe conflict, a failed compare hands back the key's current
// version in the same round trip. (etcd compares an absent key's
// ModRevision as 0, as Troupe's version 0 means absent.)
func (s *etcdSession) CompareAndPut(ctx context.Context, key string, version uint64, value []byte) (bench.Outcome, error) {
	resp, err := s.c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(version))).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return bench.Outcome{}, err
	}
	if resp.Succeeded {
		return bench.Outcome{Committed: true, Version: uint64(resp.Header.Revision)}, nil
	}
	var cur int64
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		cur = kvs[0].ModRevision
	}
	return bench.Outcome{Version: uint64(cur)}, nil
}

// Place is one Txn:
//
//	If   ModRevision(task) == 0            (the task does not exist)
//	     ModRevision(counter) == seen      (the counter is as last seen)
//	Then Put task, Put binding, Put counter = seen value + delta
//	Else Get counter                       (to refresh what was seen)
//
// The asymmetry: Troupe's add is a server-side increment, so concurrent
// placements on one machine all commit while within bounds (the counter
// here has none). etcd has no server-side arithmetic: a counter is a
// get+compare+put, so the client must know the counter's value and
// ModRevision, and of two concurrent placements on one machine one fails
// (counted as a completed op that conflicted, like any conflict). To give
// etcd its best case the value is not read in a separate round trip: all
// sessions share a cache of the last counter value seen (from their own
// commits and from the Else branch), as thick clients fed by a watch
// would have. A first placement on a machine sees ModRevision 0 (absent,
// value 0).
func (s *etcdSession) Place(ctx context.Context, p bench.Placement) (bench.Outcome, error) {
	seen := s.sys.counters.get(p.Counter)
	next := seen.value + p.Delta
	resp, err := s.c.Txn(ctx).
		If(
			clientv3.Compare(clientv3.ModRevision(p.Task), "=", 0),
			clientv3.Compare(clientv3.ModRevision(p.Counter), "=", seen.modRev),
		).
		Then(
			clientv3.OpPut(p.Task, string(p.TaskValue)),
			clientv3.OpPut(p.Binding, string(p.BindingValue)),
			clientv3.OpPut(p.Counter, strconv.FormatInt(next, 10)),
		).
		Else(clientv3.OpGet(p.Counter)).
		Commit()
	if err != nil {
		return bench.Outcome{}, err
	}
	if resp.Succeeded {
		s.sys.counters.saw(p.Counter, counterValue{value: next, modRev: resp.Header.Revision})
		return bench.Outcome{Committed: true, Version: uint64(resp.Header.Revision)}, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		n, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
		if err != nil {
			return bench.Outcome{}, fmt.Errorf("counter %s holds %q: %w", p.Counter, kvs[0].Value, err)
		}
		s.sys.counters.saw(p.Counter, counterValue{value: n, modRev: kvs[0].ModRevision})
	}
	return bench.Outcome{}, nil
}

func (s *etcdSession) Close() error { return nil }

// counterValue is a counter's value and ModRevision as last seen.
type counterValue struct {
	value  int64
	modRev int64
}

// counterCache is the etcd sessions' shared view of the counters.
type counterCache struct {
	mu sync.Mutex
	m  map[string]counterValue
}

func (c *counterCache) get(key string) counterValue {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// saw records v unless a newer value was seen already.
func (c *counterCache) saw(key string, v counterValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v.modRev > c.m[key].modRev {
		c.m[key] = v
	}
}
