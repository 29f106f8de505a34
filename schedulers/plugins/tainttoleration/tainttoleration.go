// Package tainttoleration holds the TaintToleration filter and the
// TaintPreference score, Kubernetes-style: a machine's taints repel tasks
// that do not tolerate them.
//
//	taint effect          TaintToleration            TaintPreference
//	NO_SCHEDULE           refuses if untolerated     -
//	NO_EXECUTE            refuses if untolerated     -
//	UNSPECIFIED           as NO_SCHEDULE             -
//	PREFER_NO_SCHEDULE    -                          lowers the score if untolerated
//
// A toleration tolerates a taint when its effect is unspecified (every
// effect) or equal to the taint's, and
//
//	operator EQUAL (or unspecified)   key and value equal the taint's
//	operator EXISTS                   key equals the taint's, or is empty (every key)
//
// An unknown operator tolerates nothing. Only the scheduler reads
// NO_EXECUTE here: evicting running tasks is not a plugin's business.
package tainttoleration

import (
	"fmt"
	"strings"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Names of the plugins in statuses.
const (
	Name           = "TaintToleration"
	PreferenceName = "TaintPreference"
)

// Tolerates reports whether tol tolerates taint.
func Tolerates(tol *troupev1.Toleration, taint *troupev1.Taint) bool {
	if e := tol.GetEffect(); e != troupev1.TaintEffect_TAINT_EFFECT_UNSPECIFIED && e != effect(taint) {
		return false
	}
	switch tol.GetOperator() {
	case troupev1.TolerationOperator_TOLERATION_OPERATOR_UNSPECIFIED, troupev1.TolerationOperator_TOLERATION_OPERATOR_EQUAL:
		return tol.GetKey() == taint.GetKey() && tol.GetValue() == taint.GetValue()
	case troupev1.TolerationOperator_TOLERATION_OPERATOR_EXISTS:
		return tol.GetKey() == "" || tol.GetKey() == taint.GetKey()
	default:
		return false
	}
}

// Tolerated reports whether one of tols tolerates taint.
func Tolerated(tols []*troupev1.Toleration, taint *troupev1.Taint) bool {
	for _, tol := range tols {
		if Tolerates(tol, taint) {
			return true
		}
	}
	return false
}

// effect is taint's effect, an unspecified one counting as NO_SCHEDULE.
func effect(taint *troupev1.Taint) troupev1.TaintEffect {
	if e := taint.GetEffect(); e != troupev1.TaintEffect_TAINT_EFFECT_UNSPECIFIED {
		return e
	}
	return troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE
}

// String formats taint as key=value:EFFECT.
func String(taint *troupev1.Taint) string {
	return fmt.Sprintf("%s=%s:%s", taint.GetKey(), taint.GetValue(),
		strings.TrimPrefix(effect(taint).String(), "TAINT_EFFECT_"))
}

// TaintToleration refuses machines with a NO_SCHEDULE or NO_EXECUTE taint
// (framework.Machine.Taints) that none of the task's tolerations
// tolerates. It is Static.
type TaintToleration struct{}

var (
	_ framework.FilterPlugin = (*TaintToleration)(nil)
	_ framework.Static       = (*TaintToleration)(nil)
)

// New returns the filter.
func New() *TaintToleration { return &TaintToleration{} }

// Name returns "TaintToleration".
func (*TaintToleration) Name() string { return Name }

// Static marks the verdict as depending only on the task's tolerations and
// the machine's taints.
func (*TaintToleration) Static() {}

// Filter reports Unschedulable with one reason per untolerated taint, in
// the machine's order.
func (*TaintToleration) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	tols := t.Task.GetSpec().GetTolerations()
	var reasons []string
	for _, taint := range m.Taints {
		if effect(taint) == troupev1.TaintEffect_TAINT_EFFECT_PREFER_NO_SCHEDULE || Tolerated(tols, taint) {
			continue
		}
		reasons = append(reasons, "untolerated taint "+String(taint))
	}
	if len(reasons) > 0 {
		return framework.NewStatus(framework.Unschedulable, Name, reasons...)
	}
	return nil
}

// TaintPreference scores machines by their PREFER_NO_SCHEDULE taints the
// task does not tolerate: framework.MaxScore / (1 + n), so a machine
// without any scores MaxScore, one with one scores half. Other taints do
// not count (TaintToleration filters on them).
type TaintPreference struct{}

var _ framework.ScorePlugin = (*TaintPreference)(nil)

// NewPreference returns the score plugin.
func NewPreference() *TaintPreference { return &TaintPreference{} }

// Name returns "TaintPreference".
func (*TaintPreference) Name() string { return PreferenceName }

// Score returns MaxScore / (1 + untolerated PREFER_NO_SCHEDULE taints).
func (*TaintPreference) Score(t *framework.Task, m *framework.Machine) int64 {
	tols := t.Task.GetSpec().GetTolerations()
	var n int64
	for _, taint := range m.Taints {
		if effect(taint) == troupev1.TaintEffect_TAINT_EFFECT_PREFER_NO_SCHEDULE && !Tolerated(tols, taint) {
			n++
		}
	}
	return framework.MaxScore / (1 + n)
}
