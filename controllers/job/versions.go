package job

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// ChangeCauseAnnotation on a job names why its tasks' spec changed; the
// version it starts records it (troupe job rollback sets it).
const ChangeCauseAnnotation = "troupe.io/change-cause"

// maxHistory bounds the versions a job's status keeps; the current and
// the stable one are always kept.
const maxHistory = 10

// autoRevertCause starts the cause of a version an automatic revert made.
const autoRevertCause = "auto-revert"

// versions is what a sync knows of a job's versions: its status's, with
// the version its spec asks for added when that is new.
type versions struct {
	cur     *troupev1.JobVersion
	stable  int32
	history []*troupev1.JobVersion
	rollout *troupev1.Rollout
	events  []Event
}

// content is the part of a job's spec its tasks run, as a version
// (without number, time or cause).
func content(spec *troupev1.JobSpec) *troupev1.JobVersion {
	return &troupev1.JobVersion{Template: spec.GetTemplate(), Constraints: spec.GetConstraints(), Tolerations: spec.GetTolerations()}
}

// sameContent reports whether two versions' tasks run the same.
func sameContent(a, b *troupev1.JobVersion) bool {
	return proto.Equal(a.GetTemplate(), b.GetTemplate()) && proto.Equal(a.GetConstraints(), b.GetConstraints()) &&
		slices.EqualFunc(a.GetTolerations(), b.GetTolerations(), func(x, y *troupev1.Toleration) bool { return proto.Equal(x, y) })
}

// versionsOf reads job's versions from its status and, when its spec's
// tasks differ from the current version's, starts the next version: an
// update, rolled out over a service's tasks. A spec that still asks for
// the version whose update last failed starts nothing (the job stays on
// the version it reverted or halted at): change the spec, or roll back.
func versionsOf(job *troupev1.Job, now time.Time) *versions {
	st := job.GetStatus()
	v := &versions{stable: st.GetStableVersion()}
	if r := st.GetRollout(); r != nil {
		v.rollout = proto.Clone(r).(*troupev1.Rollout)
	}
	for _, h := range st.GetHistory() {
		v.history = append(v.history, proto.Clone(h).(*troupev1.JobVersion))
	}
	v.cur = v.find(st.GetVersion())
	want := content(job.GetSpec())
	if v.cur == nil { // the job's first sync
		want.Version, want.Created, want.Cause = max(1, st.GetVersion()), timestamppb.New(now), "created"
		v.history = append(v.history, want)
		v.cur = want
		return v
	}
	if sameContent(v.cur, want) || v.failedAsked(want) {
		return v
	}
	from := v.cur
	want.Version, want.Created, want.Cause = v.last()+1, timestamppb.New(now), changeCause(job)
	v.add(want)
	v.events = append(v.events, jobEvent(job, clientlib.EventNormal, "Updating", "Version %d (%s) replaces version %d", want.Version, want.Cause, from.Version))
	if job.GetSpec().GetType() == troupev1.JobType_JOB_TYPE_SERVICE {
		v.rollout = &troupev1.Rollout{State: troupev1.RolloutState_ROLLOUT_STATE_ROLLING, FromVersion: from.Version, ToVersion: want.Version,
			Started: timestamppb.New(now)}
	}
	return v
}

func changeCause(job *troupev1.Job) string {
	if c := job.GetMetadata().GetAnnotations()[ChangeCauseAnnotation]; c != "" {
		return c
	}
	return "applied"
}

func (v *versions) find(n int32) *troupev1.JobVersion {
	for _, h := range v.history {
		if h.GetVersion() == n {
			return h
		}
	}
	return nil
}

func (v *versions) last() int32 { return v.history[len(v.history)-1].GetVersion() }

// failedAsked reports whether want is the content of the last version
// that came from the spec (not from an automatic revert), and its update
// failed.
func (v *versions) failedAsked(want *troupev1.JobVersion) bool {
	for _, h := range slices.Backward(v.history) {
		if !strings.HasPrefix(h.GetCause(), autoRevertCause) {
			return h.GetFailed() && sameContent(h, want)
		}
	}
	return false
}

// add makes version n the current one, dropping the oldest versions
// beyond maxHistory (never the stable one).
func (v *versions) add(n *troupev1.JobVersion) {
	v.history = append(v.history, n)
	v.cur = n
	for len(v.history) > maxHistory {
		i := 0
		if v.history[0].GetVersion() == v.stable {
			i = 1
		}
		v.history = slices.Delete(v.history, i, i+1)
	}
}

// fail ends the rollout to the current version with why. With
// auto_revert, and a stable version to go back to that is not itself
// the result of a revert, the job gets a new version with the stable
// one's tasks, rolled out at once (no canaries); otherwise the rollout
// halts where it is.
func (v *versions) fail(job *troupev1.Job, why string, now time.Time) {
	failed := v.cur
	failed.Failed = true
	v.events = append(v.events, jobEvent(job, clientlib.EventWarning, "UpdateFailed", "Update to version %d failed: %s", failed.Version, why))
	stable := v.find(v.stable)
	if !job.GetSpec().GetUpdate().GetAutoRevert() || stable == nil || stable == failed || strings.HasPrefix(failed.GetCause(), autoRevertCause) {
		v.rollout.State, v.rollout.Message = troupev1.RolloutState_ROLLOUT_STATE_FAILED, why
		return
	}
	back := &troupev1.JobVersion{Version: v.last() + 1, Template: stable.Template, Constraints: stable.Constraints, Tolerations: stable.Tolerations,
		Created: timestamppb.New(now), Cause: fmt.Sprintf("%s to version %d", autoRevertCause, stable.Version)}
	v.add(back)
	v.events = append(v.events, jobEvent(job, clientlib.EventNormal, "Reverting", "Version %d returns to version %d's tasks", back.Version, stable.Version))
	v.rollout = &troupev1.Rollout{State: troupev1.RolloutState_ROLLOUT_STATE_ROLLING, FromVersion: failed.Version, ToVersion: back.Version,
		Started: timestamppb.New(now), Promoted: true, Message: fmt.Sprintf("version %d failed: %s", failed.Version, why)}
}

// taskVersion is the job version task t is of; tasks written before
// versions existed are of version 1.
func taskVersion(t *troupev1.Task) int32 { return max(1, t.GetSpec().GetJobVersion()) }

// setVersion makes t's spec run version v.
func setVersion(t *troupev1.TaskSpec, v *troupev1.JobVersion) {
	t.Template, t.Constraints, t.Tolerations, t.JobVersion = v.GetTemplate(), v.GetConstraints(), v.GetTolerations(), v.GetVersion()
}
