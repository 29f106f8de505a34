package clienttest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// QuotaAudit checks the quota invariant after every commit of a store it
// follows by change sets (Observe, which an in-memory store's Observe
// takes): each counter under clientlib.QuotaUsedPrefix equals the sum of
// the charges of the tasks (clientlib.ChargedUsage), and stays within its
// namespace's Quota as stored then. (A Quota lowered below what is used
// breaks the second check by design: tests that lower one do not use
// this.) Safe for concurrent use.
type QuotaAudit struct {
	mu       sync.Mutex
	tasks    map[string]*troupev1.Task
	quotas   map[string]*troupev1.Quota // by namespace
	counters map[string]int64
	commits  int
	err      error // the first violation
}

// NewQuotaAudit returns an audit of an empty store.
func NewQuotaAudit() *QuotaAudit {
	return &QuotaAudit{tasks: map[string]*troupev1.Task{}, quotas: map[string]*troupev1.Quota{}, counters: map[string]int64{}}
}

// Observe applies the changes of one commit and checks the invariant.
func (a *QuotaAudit) Observe(cs *storev1.ChangeSet) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.commits++
	for _, ev := range cs.GetEvents() {
		if err := a.apply(ev); err != nil && a.err == nil {
			a.err = fmt.Errorf("commit %d: %w", a.commits, err)
		}
	}
	if err := a.check(); err != nil && a.err == nil {
		a.err = fmt.Errorf("after commit %d: %w", a.commits, err)
	}
}

func (a *QuotaAudit) apply(ev *storev1.Event) error {
	kv := ev.GetKv()
	key, deleted := kv.GetKey(), ev.GetType() == storev1.EventType_EVENT_TYPE_DELETE
	switch {
	case strings.HasPrefix(key, clientlib.Tasks.Prefix):
		delete(a.tasks, key)
		if !deleted {
			t, err := clientlib.DecodeAt(clientlib.Tasks, key, kv.GetValue(), kv.GetVersion())
			if err != nil {
				return err
			}
			a.tasks[key] = t
		}
	case strings.HasPrefix(key, clientlib.Quotas.Prefix):
		ns := strings.TrimPrefix(key, clientlib.Quotas.Prefix)
		delete(a.quotas, ns)
		if !deleted {
			q, err := clientlib.DecodeAt(clientlib.Quotas, key, kv.GetValue(), kv.GetVersion())
			if err != nil {
				return err
			}
			a.quotas[ns] = q
		}
	case strings.HasPrefix(key, clientlib.QuotaUsedPrefix):
		delete(a.counters, key)
		if !deleted {
			c, err := clientlib.DecodeCounter(key, kv.GetValue(), kv.GetVersion())
			if err != nil {
				return err
			}
			a.counters[key] = c.GetValue()
		}
	}
	return nil
}

// check compares the counters with the charges, and with the limits.
func (a *QuotaAudit) check() error {
	want := clientlib.ChargedUsage(slices.Collect(maps.Values(a.tasks)))
	keys := slices.Collect(maps.Keys(want))
	for k := range a.counters {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		if got := a.counters[key]; got != want[key] {
			return fmt.Errorf("counter %s is %d, the tasks' charges sum to %d", key, got, want[key])
		}
		ns, band, resource, ok := clientlib.ParseQuotaUsedKey(key)
		if !ok {
			return fmt.Errorf("counter key %s is not a quota counter's", key)
		}
		if limit, limited := clientlib.QuotaLimits(a.quotas[ns], band)[resource]; limited && a.counters[key] > limit {
			return fmt.Errorf("counter %s is %d, over its quota's limit %d", key, a.counters[key], limit)
		}
	}
	return nil
}

// Err returns the first violation seen (nil: none), naming the commit.
func (a *QuotaAudit) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Commits is how many commits the audit has checked.
func (a *QuotaAudit) Commits() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.commits
}

// Counters returns the quota counters as of the last commit.
func (a *QuotaAudit) Counters() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.counters)
}

// QuotaCounters reads namespace's quota counters from s, as
// "band/resource=value" in key order, space-separated.
func QuotaCounters(ctx context.Context, s clientlib.Store, namespace string) (string, error) {
	kvs, _, err := s.List(ctx, clientlib.QuotaUsedPrefix+namespace+"/")
	if err != nil {
		return "", fmt.Errorf("quota counters of %s: %w", namespace, err)
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		_, band, resource, _ := clientlib.ParseQuotaUsedKey(kv.GetKey())
		out = append(out, band+"/"+resource+"="+string(kv.GetValue()))
	}
	return strings.Join(out, " "), nil
}

// CheckQuotaCharges reads namespace's tasks and quota counters from s
// and says how the counters differ from the tasks' charges (nil: they
// are equal). The reads are not one snapshot: call it when nothing
// writes, or poll it.
func CheckQuotaCharges(ctx context.Context, s clientlib.Store, namespace string) error {
	tasks, _, err := clientlib.List(ctx, s, clientlib.Tasks, namespace+"/")
	if err != nil {
		return err
	}
	kvs, _, err := s.List(ctx, clientlib.QuotaUsedPrefix+namespace+"/")
	if err != nil {
		return fmt.Errorf("quota counters of %s: %w", namespace, err)
	}
	a := NewQuotaAudit()
	for _, t := range tasks {
		key, _ := clientlib.Tasks.Key(t)
		a.tasks[key] = t
	}
	for _, kv := range kvs {
		c, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
		if err != nil {
			return err
		}
		a.counters[kv.GetKey()] = c.GetValue()
	}
	return a.check()
}
