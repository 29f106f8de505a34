package clientlib

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// EventRecorderConfig configures an EventRecorder.
type EventRecorderConfig struct {
	// Source names the writer in its events ("job-controller", "batch-0").
	Source string
	// QueueSize bounds the events waiting to be written; Record drops
	// (and counts) what does not fit.
	QueueSize int
	// Window: an event that repeats one recorded at most Window before
	// (same involved object, reason and message) bumps that one's count
	// and last_seen instead of adding an event.
	Window time.Duration
	// MaxRecent bounds the events remembered for aggregation.
	MaxRecent int
	Now       func() time.Time
	Logger    *zap.Logger
}

// DefaultEventRecorderConfig returns the configuration of a recorder for
// source with every knob at its default.
func DefaultEventRecorderConfig(source string) EventRecorderConfig {
	return EventRecorderConfig{Source: source, QueueSize: 1024, Window: 10 * time.Minute, MaxRecent: 1024,
		Now: time.Now, Logger: zap.NewNop()}
}

// Validate says precisely what is wrong with c, if anything.
func (c EventRecorderConfig) Validate() error {
	var errs []error
	if c.Source == "" {
		errs = append(errs, errors.New("clientlib: EventRecorderConfig.Source is empty: name the writer (\"job-controller\")"))
	}
	if c.QueueSize <= 0 || c.MaxRecent <= 0 || c.Window < 0 {
		errs = append(errs, fmt.Errorf("clientlib: EventRecorderConfig: QueueSize (%d) and MaxRecent (%d) must be positive, Window (%v) not negative",
			c.QueueSize, c.MaxRecent, c.Window))
	}
	if c.Now == nil || c.Logger == nil {
		errs = append(errs, errors.New("clientlib: EventRecorderConfig: Now and Logger are required"))
	}
	return errors.Join(errs...)
}

// EventRecorder writes Events, best effort, for people to read with
// `troupe describe` and `troupe watch`. Record never blocks: events wait in
// a bounded queue that Run writes in the background, and are dropped (and
// counted) when it is full or Run has ended. Record is safe for
// concurrent use, and does nothing on a nil *EventRecorder, so a
// component may run without events.
//
//	rec, _ := clientlib.NewEventRecorder(c, clientlib.DefaultEventRecorderConfig("batch-0"))
//	go rec.Run(ctx)
//	rec.Record("Task", "default", "web", "web-3", clientlib.EventNormal, "Scheduled", "bound to m1 after 2 attempts (1 conflict)")
type EventRecorder struct {
	cfg   EventRecorderConfig
	s     Store
	queue chan *troupev1.Event
	ended atomic.Bool

	written, aggregated, dropped, failed atomic.Uint64

	// recent are the events written last, by aggKey; only Run uses it.
	recent map[string]*troupev1.Event
}

// NewEventRecorder returns a recorder writing to s; start it with Run.
func NewEventRecorder(s Store, cfg EventRecorderConfig) (*EventRecorder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &EventRecorder{cfg: cfg, s: s, queue: make(chan *troupev1.Event, cfg.QueueSize), recent: map[string]*troupev1.Event{}}, nil
}

// Record notes that something happened to an object, now:
//
//   - involvedKind is "Job", "Task" or "Machine" (Jobs.Name, Tasks.Name,
//     Machines.Name);
//   - namespace is the job's or task's (empty for a machine);
//   - scope is what the event is stored with: the job of a Job or Task
//     event (the job itself, or the task's job); for a Machine event, the
//     machine (its name again);
//   - name is the object's metadata.name ("web", "web-3", "m1");
//   - eventType is EventNormal or EventWarning; reason a short CamelCase
//     cause ("Scheduled"); message says what happened, for people.
//
// Record one event per change of state, not per pass of a loop: repeats
// are aggregated, but each still costs a write.
func (r *EventRecorder) Record(involvedKind, namespace, scope, name, eventType, reason, message string) {
	if r == nil {
		return
	}
	if r.ended.Load() {
		r.dropped.Add(1)
		return
	}
	now := timestamppb.New(r.cfg.Now())
	e := &troupev1.Event{Metadata: &troupev1.ObjectMeta{Namespace: namespace}, InvolvedKind: involvedKind, InvolvedName: name,
		Type: eventType, Reason: reason, Message: message, Count: 1, FirstSeen: now, LastSeen: now, Source: r.cfg.Source}
	if involvedKind != Machines.Name {
		e.Job = scope
	}
	select {
	case r.queue <- e:
	default:
		r.dropped.Add(1)
	}
}

// Run writes recorded events until ctx ends; what is still queued then is
// dropped, as is everything recorded afterwards. It returns ctx's error.
func (r *EventRecorder) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			r.ended.Store(true)
			r.dropped.Add(uint64(len(r.queue)))
			return ctx.Err()
		case e := <-r.queue:
			r.write(ctx, e)
		}
	}
}

// write stores e, or folds it into the recent event it repeats.
func (r *EventRecorder) write(ctx context.Context, e *troupev1.Event) {
	k := EventsOf(e)
	agg := aggKey(e)
	if prev, ok := r.recent[agg]; ok && !e.GetFirstSeen().AsTime().After(prev.GetLastSeen().AsTime().Add(r.cfg.Window)) {
		u := proto.Clone(prev).(*troupev1.Event)
		u.Count++
		u.LastSeen = e.GetLastSeen()
		stored, err := Update(ctx, r.s, k, u)
		if err == nil {
			r.recent[agg] = stored
			r.aggregated.Add(1)
			return
		}
		// Collected or changed meanwhile (a conflict): write a new event;
		// anything else fails like a new event would.
		delete(r.recent, agg)
	}
	e.Metadata.Name = eventName(e.GetFirstSeen().AsTime())
	stored, err := Create(ctx, r.s, k, e)
	if err != nil {
		r.failed.Add(1)
		if ctx.Err() == nil {
			r.cfg.Logger.Info("event not written", zap.String("source", r.cfg.Source), zap.String("reason", e.GetReason()),
				zap.String("involved", e.GetInvolvedKind()+" "+e.GetMetadata().GetNamespace()+"/"+e.GetInvolvedName()), zap.Error(err))
		}
		return
	}
	r.written.Add(1)
	r.remember(agg, stored)
}

// remember keeps stored for aggregation, first making room: events last
// seen more than a window ago go, then, if still full, the oldest.
func (r *EventRecorder) remember(agg string, stored *troupev1.Event) {
	if len(r.recent) >= r.cfg.MaxRecent {
		cutoff := stored.GetLastSeen().AsTime().Add(-r.cfg.Window)
		oldest := ""
		for k, e := range r.recent {
			seen := e.GetLastSeen().AsTime()
			if seen.Before(cutoff) {
				delete(r.recent, k)
			} else if oldest == "" || seen.Before(r.recent[oldest].GetLastSeen().AsTime()) {
				oldest = k
			}
		}
		if len(r.recent) >= r.cfg.MaxRecent {
			delete(r.recent, oldest)
		}
	}
	r.recent[agg] = stored
}

// aggKey is what makes two events the same: the involved object, reason
// and message.
func aggKey(e *troupev1.Event) string {
	return strings.Join([]string{e.GetInvolvedKind(), e.GetMetadata().GetNamespace(), e.GetJob(), e.GetInvolvedName(),
		e.GetType(), e.GetReason(), e.GetMessage()}, "\x00")
}

// eventName is a new event's metadata.name: names sort by time (unix
// nanoseconds, zero-padded), and a random suffix keeps them apart.
func eventName(t time.Time) string { return fmt.Sprintf("%020d-%s", t.UnixNano(), newUID()[:6]) }

// EventStats counts a recorder's events: Written as new events,
// Aggregated into an earlier one, Dropped (queue full, or after Run
// ended) and Failed (the write failed).
type EventStats struct {
	Written, Aggregated, Dropped, Failed uint64
}

// Stats returns the recorder's counts so far.
func (r *EventRecorder) Stats() EventStats {
	return EventStats{Written: r.written.Load(), Aggregated: r.aggregated.Load(), Dropped: r.dropped.Load(), Failed: r.failed.Load()}
}

var descEvents = prometheus.NewDesc("troupe_events_total",
	"Events recorded, by source and result: written, aggregated (into an earlier event), dropped (queue full or stopped), failed.",
	[]string{"source", "result"}, nil)

// Collector exports Stats in Prometheus format; register it with the
// process's registry.
func (r *EventRecorder) Collector() prometheus.Collector { return eventCollector{r} }

type eventCollector struct{ r *EventRecorder }

func (c eventCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descEvents }

func (c eventCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.Stats()
	for result, v := range map[string]uint64{"written": st.Written, "aggregated": st.Aggregated, "dropped": st.Dropped, "failed": st.Failed} {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(v), c.r.cfg.Source, result)
	}
}
