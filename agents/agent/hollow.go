package agent

import troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"

// HollowLabel marks a hollow (simulated) machine, with the value
// HollowValue, as a label and as a taint (HollowTaint). Every hollow
// machine carries both (troupe up --hollow, troupe agent --hollow), so
// that a job lands on one only when it tolerates the taint
// (HollowToleration) and, to land on no other, selects the label
// (constraints.matchLabels: {troupe.io/hollow: "true"}). A job without the
// toleration goes to the real machines (an exec agent) alone.
const (
	HollowLabel = "troupe.io/hollow"
	HollowValue = "true"
)

// HollowTaint is the taint of every hollow machine: troupe.io/hollow=true
// with effect NO_SCHEDULE. It is a new value on each call.
func HollowTaint() *troupev1.Taint {
	return &troupev1.Taint{Key: HollowLabel, Value: HollowValue, Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}
}

// HollowToleration tolerates HollowTaint: a job's tolerations with it may
// land on hollow machines. It is a new value on each call.
func HollowToleration() *troupev1.Toleration {
	return &troupev1.Toleration{Key: HollowLabel, Operator: troupev1.TolerationOperator_TOLERATION_OPERATOR_EQUAL, Value: HollowValue,
		Effect: troupev1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}
}
