package clientlib

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Quota: what the live tasks of one namespace hold, per priority band.
//
// A task holds a charge while it is live (pending, bound or running): its
// Charge records its band and the amounts it was charged (its requests,
// and QuotaTasks = 1). The namespace's counters,
// /quotaused/<namespace>/<band>/<resource>, are changed only by adds, in
// the transactions that set or clear a task's charge (ChargeQuota), so
// that for every namespace, band and resource
//
//	counter == sum of the amounts of the tasks whose charge is set.
//
// A charge is a bounded add within [0, limit] when the namespace's Quota
// (/quotas/<namespace>) limits the resource in the band, in a group
// conditioned on the Quota's version as read: two writers racing for the
// last unit both add, and the store lets exactly one through; the other's
// group fails (QuotaRefusal turns that into a *QuotaError). A release is
// an add of the negative amount. Counters are kept whether or not a Quota
// exists, so a Quota applied later starts from the true usage. All of a
// namespace's counters share a shard (their shard key is
// "/quotaused/<namespace>").

// ProductionPriority starts the production band: tasks of this priority
// and above are production (Borg's band); schedulers never let one
// production task preempt another.
const ProductionPriority = 100

// The priority bands, as counter keys name them.
const (
	BandProduction    = "production"
	BandNonProduction = "non-production"
)

// QuotaTasks is the resource that counts live tasks.
const QuotaTasks = "tasks"

// QuotaUsedPrefix holds the namespaces' quota counters.
const QuotaUsedPrefix = "/quotaused/"

// Band returns the band of a task of priority p.
func Band(priority int32) string {
	if priority >= ProductionPriority {
		return BandProduction
	}
	return BandNonProduction
}

// QuotaKey returns the key of the Quota of namespace.
func QuotaKey(namespace string) string { return Quotas.Prefix + namespace }

// QuotaUsedKey returns the key of namespace's counter of resource in band.
func QuotaUsedKey(namespace, band, resource string) string {
	return QuotaUsedPrefix + namespace + "/" + band + "/" + resource
}

// ParseQuotaUsedKey splits a key QuotaUsedKey made.
func ParseQuotaUsedKey(key string) (namespace, band, resource string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, QuotaUsedPrefix), "/")
	if !strings.HasPrefix(key, QuotaUsedPrefix) || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// QuotaLimits returns q's limits of band (nil: none).
func QuotaLimits(q *troupev1.Quota, band string) map[string]int64 {
	switch band {
	case BandProduction:
		return q.GetSpec().GetProduction()
	case BandNonProduction:
		return q.GetSpec().GetNonProduction()
	}
	return nil
}

// Live reports whether task t holds a charge: it is pending, bound or
// running, not ended (succeeded, failed, stopped or lost).
func Live(t *troupev1.Task) bool {
	switch t.GetStatus().GetPhase() {
	case troupev1.TaskPhase_TASK_PHASE_SUCCEEDED, troupev1.TaskPhase_TASK_PHASE_FAILED,
		troupev1.TaskPhase_TASK_PHASE_STOPPED, troupev1.TaskPhase_TASK_PHASE_LOST:
		return false
	}
	return true
}

// TaskCharge returns what live task t is charged: its band, its positive
// requests and one of QuotaTasks.
func TaskCharge(t *troupev1.Task) *troupev1.Charge {
	amounts := map[string]int64{QuotaTasks: 1}
	for r, v := range t.GetSpec().GetTemplate().GetRequests() {
		if v > 0 {
			amounts[r] = v
		}
	}
	return &troupev1.Charge{Band: Band(t.GetSpec().GetPriority()), Amounts: amounts}
}

// ChargeQuota adds to g what writing next over prev does to their
// namespace's quota counters, and returns a copy of next with the charge
// it then holds, for the caller to write in the same group (nil when next
// is nil). prev is nil for a task created, next nil for one deleted; q is
// the namespace's Quota as read (nil: it has none).
//
//   - next live: it holds TaskCharge(next). The difference from prev's
//     charge is added to the counters: an increase is bounded by q's limit
//     of the resource in its band, and the group is conditioned on q's
//     version (0 when nil), so that a Quota written meanwhile fails it.
//     A live prev that held no charge (a task from before quotas) is
//     charged without bound: its work is admitted already.
//   - next ended or deleted: prev's charge is given back and next holds
//     none.
//
// Amounts that do not change add nothing, so rewriting a live task with
// the same requests (its status, its binding) touches no counter.
func ChargeQuota(g *Group, prev, next *troupev1.Task, q *troupev1.Quota) *troupev1.Task {
	held := prev.GetCharge()
	var out *troupev1.Task
	var want *troupev1.Charge
	if next != nil {
		out = proto.Clone(next).(*troupev1.Task)
		if Live(next) {
			want = TaskCharge(next)
		}
		out.Charge = want
	}
	ns := next.GetMetadata().GetNamespace()
	if next == nil {
		ns = prev.GetMetadata().GetNamespace()
	}
	if q != nil && q.GetMetadata().GetName() != ns {
		g.t.fail(fmt.Errorf("charge quota: task of namespace %q against the Quota of %q", ns, q.GetMetadata().GetName()))
		return out
	}
	bounded := held != nil || prev == nil || !Live(prev)
	type counter struct{ band, resource string }
	deltas := map[counter]int64{}
	for r, v := range held.GetAmounts() {
		deltas[counter{held.GetBand(), r}] -= v
	}
	for r, v := range want.GetAmounts() {
		deltas[counter{want.GetBand(), r}] += v
	}
	keys := slices.SortedFunc(maps.Keys(deltas), func(a, b counter) int {
		return cmp.Or(cmp.Compare(a.band, b.band), cmp.Compare(a.resource, b.resource))
	})
	conditioned := false
	for _, c := range keys {
		d, hi := deltas[c], int64(math.MaxInt64)
		if d == 0 {
			continue
		}
		if d > 0 && bounded {
			if limit, ok := QuotaLimits(q, c.band)[c.resource]; ok {
				hi = limit
			}
			if !conditioned {
				g.Require(QuotaKey(ns), q.GetMetadata().GetVersion())
				conditioned = true
			}
		}
		g.Add(QuotaUsedKey(ns, c.band, c.resource), d, 0, hi)
	}
	return out
}

// ChargedUsage returns what the quota counters hold when the invariant
// holds: the sum of the charges of tasks, by counter key (QuotaUsedKey).
// Auditors compare it with the counters.
func ChargedUsage(tasks []*troupev1.Task) map[string]int64 {
	out := map[string]int64{}
	for _, t := range tasks {
		c := t.GetCharge()
		for r, v := range c.GetAmounts() {
			out[QuotaUsedKey(t.GetMetadata().GetNamespace(), c.GetBand(), r)] += v
		}
	}
	return out
}

// QuotaError is a charge a namespace's quota refused: the resource of the
// band whose counter would have gone over its limit.
type QuotaError struct {
	Namespace, Band, Resource string
	// Used is the counter when the store refused the charge (-1: not
	// known); Limit the quota's limit; Asked what the task asks for.
	Used, Limit, Asked int64
}

// ErrOverQuota matches every *QuotaError with errors.Is.
var ErrOverQuota = errors.New("over quota")

// Is makes errors.Is(err, ErrOverQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrOverQuota }

// Usage says how full the quota is: "namespace team-a production quota:
// cpu 64000m used of 64000m". When what is used leaves room for what was
// asked, the rest was held by cross-shard commits in progress (the store
// reserves their adds), and it says so.
func (e *QuotaError) Usage() string {
	limit := FormatQuantity(e.Resource, e.Limit)
	switch {
	case e.Used < 0:
		return fmt.Sprintf("namespace %s %s quota: %s at its limit of %s", e.Namespace, e.Band, e.Resource, limit)
	case e.Used+e.Asked <= e.Limit:
		return fmt.Sprintf("namespace %s %s quota: %s %s used of %s, the rest held by commits in progress", e.Namespace, e.Band,
			e.Resource, FormatQuantity(e.Resource, e.Used), limit)
	}
	return fmt.Sprintf("namespace %s %s quota: %s %s used of %s", e.Namespace, e.Band, e.Resource, FormatQuantity(e.Resource, e.Used), limit)
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s, %s more asked", e.Usage(), FormatQuantity(e.Resource, e.Asked))
}

// QuotaRefusal returns the *QuotaError that conflict c is when the group
// charged task t (ChargeQuota) against the namespace's Quota q and the
// store refused one of its bounded adds; nil when c is another conflict.
func QuotaRefusal(c *Conflict, t *troupev1.Task, q *troupev1.Quota) *QuotaError {
	if c == nil || c.Reason != storev1.FailureReason_FAILURE_REASON_BOUND_EXCEEDED {
		return nil
	}
	ns, band, resource, ok := ParseQuotaUsedKey(c.Key)
	if !ok {
		return nil
	}
	limit, limited := QuotaLimits(q, band)[resource]
	if !limited {
		return nil // not a quota's bound: a release below zero, or an overflow
	}
	return &QuotaError{Namespace: ns, Band: band, Resource: resource, Used: counterInMessage(c.Message), Limit: limit,
		Asked: TaskCharge(t).GetAmounts()[resource]}
}

// counterInMessage reads the counter's value from the message of a
// BOUND_EXCEEDED failure (the store's engine writes `counter "<key>" is
// <value>; ...`), or -1.
func counterInMessage(msg string) int64 {
	var (
		key string
		v   int64
	)
	if n, err := fmt.Sscanf(msg, "counter %q is %d", &key, &v); n != 2 || err != nil {
		return -1
	}
	return v
}

// quota checks a Quota: named after the namespace it governs, limits
// that are non-negative amounts of resources (or of QuotaTasks).
func (c *checker) quota(q *troupev1.Quota) {
	c.meta(q.GetMetadata(), false, c.namespace)
	for _, band := range []struct {
		field  string
		limits map[string]int64
	}{{"spec.production", q.GetSpec().GetProduction()}, {"spec.non_production", q.GetSpec().GetNonProduction()}} {
		resources := maps.Clone(band.limits)
		if n, ok := resources[QuotaTasks]; ok {
			c.check(n >= 0, band.field+"["+QuotaTasks+"]", "non-negative", "must not be negative, got %d", n)
			delete(resources, QuotaTasks)
		}
		c.resources(band.field, resources)
	}
}
