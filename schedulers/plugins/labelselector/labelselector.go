// Package labelselector is the LabelSelector filter: a task's
// constraints.match_labels and constraints.match_expressions select the
// machines it may run on by their labels, with Kubernetes' semantics:
//
//	match_labels {k: v}    label k is present and equals v
//	IN k [v...]            label k is present and its value is one of v
//	NOT_IN k [v...]        label k is absent, or its value is none of v
//	EXISTS k               label k is present (values ignored)
//	DOES_NOT_EXIST k       label k is absent (values ignored)
//
// All requirements must hold. IN with no values selects no machine. An
// unspecified or unknown operator is an Error: the selector is malformed,
// not the cell.
package labelselector

import (
	"fmt"
	"maps"
	"slices"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Name is the plugin's name in statuses.
const Name = "LabelSelector"

// LabelSelector refuses machines whose labels (framework.Machine.Labels)
// do not satisfy the task's selector. It is Static.
type LabelSelector struct{}

var (
	_ framework.FilterPlugin = (*LabelSelector)(nil)
	_ framework.Static       = (*LabelSelector)(nil)
)

// New returns the plugin.
func New() *LabelSelector { return &LabelSelector{} }

// Name returns "LabelSelector".
func (*LabelSelector) Name() string { return Name }

// Static marks the verdict as depending only on the task's constraints and
// the machine's labels.
func (*LabelSelector) Static() {}

// Filter reports Unschedulable with one reason per unmet requirement:
// match_labels first, by key, then match_expressions in order.
func (*LabelSelector) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	c := t.Task.GetSpec().GetConstraints()
	var reasons []string
	if ml := c.GetMatchLabels(); len(ml) > 0 {
		for _, k := range slices.Sorted(maps.Keys(ml)) {
			want := ml[k]
			got, ok := m.Labels[k]
			switch {
			case !ok:
				reasons = append(reasons, fmt.Sprintf("label %s is missing, want %q", k, want))
			case got != want:
				reasons = append(reasons, fmt.Sprintf("label %s is %q, want %q", k, got, want))
			}
		}
	}
	for i, req := range c.GetMatchExpressions() {
		ok, reason, err := Matches(req, m.Labels)
		if err != nil {
			return framework.NewStatus(framework.Error, Name, fmt.Sprintf("match_expressions[%d]: %v", i, err))
		}
		if !ok {
			reasons = append(reasons, reason)
		}
	}
	if len(reasons) > 0 {
		return framework.NewStatus(framework.Unschedulable, Name, reasons...)
	}
	return nil
}

// Matches reports whether labels satisfy req and, when they do not, why.
// err is set for an unspecified or unknown operator.
func Matches(req *troupev1.LabelRequirement, labels map[string]string) (ok bool, reason string, err error) {
	k := req.GetKey()
	v, has := labels[k]
	switch req.GetOperator() {
	case troupev1.LabelOperator_LABEL_OPERATOR_IN:
		if has && slices.Contains(req.GetValues(), v) {
			return true, "", nil
		}
		if !has {
			return false, fmt.Sprintf("label %s is missing, want one of %q", k, req.GetValues()), nil
		}
		return false, fmt.Sprintf("label %s is %q, want one of %q", k, v, req.GetValues()), nil
	case troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN:
		if !has || !slices.Contains(req.GetValues(), v) {
			return true, "", nil
		}
		return false, fmt.Sprintf("label %s is %q, want none of %q", k, v, req.GetValues()), nil
	case troupev1.LabelOperator_LABEL_OPERATOR_EXISTS:
		if has {
			return true, "", nil
		}
		return false, fmt.Sprintf("label %s is missing, want it present", k), nil
	case troupev1.LabelOperator_LABEL_OPERATOR_DOES_NOT_EXIST:
		if !has {
			return true, "", nil
		}
		return false, fmt.Sprintf("label %s is %q, want it absent", k, v), nil
	default:
		return false, "", fmt.Errorf("key %q: unsupported operator %v", k, req.GetOperator())
	}
}
