package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// A job's JobScheduling (/scheduling/<namespace>/<job>, beside the job)
// is its scheduler's last word on its pending tasks, as kube-scheduler's
// PodScheduled condition: why the last decision left some of them
// unplaced (Unschedulable, with the machines each filter refused), or
// nothing (no object) once a decision places them all. It is an object
// of its own, not part of the job's status, because schedulers may not
// write jobs: a job's spec says what runs on machines. The instance
// writes it only when its word changes, time aside: a job that fits
// nowhere, tried again and again by its back-off, is written once, and
// so is its FailedScheduling event. The garbage collector deletes the
// JobScheduling of a job deleted meanwhile.
//
// The instance caches tasks, not JobSchedulings: what it last said of a
// job (the verdict it wrote, or found already written), and the object
// as it last read or wrote it, stay in the job's record; the object is
// read only when the instance does not know what it says and a decision
// may change that, or a write of it conflicts.

// Reasons of a JobScheduling.
const (
	// ReasonUnschedulable: tasks fit nowhere.
	ReasonUnschedulable = "Unschedulable"
	// ReasonSchedulingError: a filter could not decide about tasks.
	ReasonSchedulingError = "SchedulingError"
)

// unfit is the verdict on a job of a decision that left unplaced of its
// tasks pending, the first of them for why: st, whose reasons message
// gives in words.
func (s *Scheduler) unfit(st *framework.Status, unplaced int, message string) *troupev1.SchedulingStatus {
	reason := ReasonUnschedulable
	if st.Code == framework.Error {
		reason = ReasonSchedulingError
	}
	var refused map[string]int32
	if len(st.Refused) > 0 {
		refused = make(map[string]int32, len(st.Refused))
		for plugin, n := range st.Refused {
			refused[plugin] = int32(n)
		}
	}
	return &troupev1.SchedulingStatus{Scheduler: s.cfg.Name, Reason: reason, Message: message, Refused: refused,
		Machines: int32(st.Machines), Unplaced: int32(unplaced), Time: timestamppb.New(s.clock.Now())}
}

// explanation is st's reasons in words.
func explanation(st *framework.Status) string { return strings.Join(st.Explain(), "; ") }

// sameVerdict reports whether a and b (nil: no verdict) say the same,
// whenever they were reached.
func sameVerdict(a, b *troupev1.SchedulingStatus) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	a.Time, b.Time = nil, nil
	return proto.Equal(a, b)
}

// said returns what the instance last said of the job of rec, the
// job's JobScheduling as the instance last read or wrote it (nil: none,
// or unknown), and whether it may trust that the object still says so.
func (s *Scheduler) said(rec *jobRecord) (*troupev1.SchedulingStatus, *troupev1.JobScheduling, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rec.said, rec.stored, rec.sure
}

// say records that the job of rec says v, its JobScheduling being
// stored.
func (s *Scheduler) say(rec *jobRecord, v *troupev1.SchedulingStatus, stored *troupev1.JobScheduling) {
	s.mu.Lock()
	rec.said, rec.stored, rec.sure = v, stored, true
	s.mu.Unlock()
}

// doubt records that the instance does not know what the job of rec
// says.
func (s *Scheduler) doubt(rec *jobRecord) {
	s.mu.Lock()
	rec.sure = false
	s.mu.Unlock()
}

// tell makes v (nil: none) what job's JobScheduling says, unless it says
// so already, and reports whether v is news: the object said otherwise.
// The write is conditioned on the object's version as the instance last
// read or wrote it, without reading it when the instance is sure of it;
// when it changed meanwhile (or the instance was not sure), it is read,
// and the write tried once more, and then left to the next decision. A
// write that fails otherwise is logged, and v taken as said: the object
// is written again when the verdict changes (a write that went through
// after all then conflicts, and is tried again from a fresh read), not
// at every decision.
func (s *Scheduler) tell(ctx context.Context, job string, rec *jobRecord, v *troupev1.SchedulingStatus) bool {
	said, stored, sure := s.said(rec)
	if sure && sameVerdict(said, v) {
		return false
	}
	for range 2 {
		// A clear needs the object's version: after a failed first
		// write, it is not known.
		if !sure || (stored == nil && v == nil) {
			var err error
			if stored, err = s.readScheduling(ctx, job); err != nil {
				s.writeFailed(ctx, job, err)
				return false
			}
			sure = true
			if sameVerdict(stored.GetStatus(), v) {
				s.say(rec, v, stored)
				return false
			}
		}
		written, err := s.writeScheduling(ctx, job, stored, v)
		var conflict *clientlib.ConflictError
		if errors.As(err, &conflict) {
			sure = false
			continue
		}
		if err != nil {
			s.writeFailed(ctx, job, err)
			written = stored // its version, as far as the instance knows
		}
		s.say(rec, v, written)
		return true
	}
	s.doubt(rec)
	return false
}

// readScheduling reads job's JobScheduling: nil when there is none.
func (s *Scheduler) readScheduling(ctx context.Context, job string) (*troupev1.JobScheduling, error) {
	stored, err := clientlib.Get(ctx, s.c, clientlib.JobSchedulings, clientlib.JobSchedulings.Prefix+job)
	if errors.Is(err, clientlib.ErrNotFound) {
		return nil, nil
	}
	return stored, err
}

// writeScheduling makes job's JobScheduling, stored (nil: none), say v:
// it creates, updates or deletes (v nil) the object, on condition that
// it is still as stored, and returns it as written (nil: deleted).
func (s *Scheduler) writeScheduling(ctx context.Context, job string, stored *troupev1.JobScheduling, v *troupev1.SchedulingStatus) (*troupev1.JobScheduling, error) {
	switch {
	case v == nil:
		return nil, clientlib.Delete(ctx, s.c, clientlib.JobSchedulings, stored)
	case stored == nil:
		ns, name, _ := strings.Cut(job, "/")
		return clientlib.Create(ctx, s.c, clientlib.JobSchedulings,
			&troupev1.JobScheduling{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: ns}, Status: v})
	}
	u := proto.CloneOf(stored)
	u.Status = v
	return clientlib.Update(ctx, s.c, clientlib.JobSchedulings, u)
}

// settled is told that job has no task pending any more: tasks, which a
// decision placed, or none (placed by another instance, stopped or
// deleted). The job's JobScheduling is deleted if the instance said
// one, or, having said nothing of the job since it started, may find
// one that it or another instance wrote before (tasks submitted before
// the instance started, or at an unknown time).
func (s *Scheduler) settled(ctx context.Context, job string, rec *jobRecord, tasks []*framework.Task) {
	said, _, sure := s.said(rec)
	if said == nil && (sure || !slices.ContainsFunc(tasks, func(t *framework.Task) bool {
		sub := t.Task.GetSpec().GetSubmitted()
		return sub == nil || sub.AsTime().Before(s.started)
	})) {
		return
	}
	s.tell(ctx, job, rec, nil)
}

// writeFailed logs that job's JobScheduling could not be read or
// written.
func (s *Scheduler) writeFailed(ctx context.Context, job string, err error) {
	if ctx.Err() == nil {
		s.cfg.Logger.Warn("write JobScheduling", zap.String("job", job), zap.Error(err))
	}
}
