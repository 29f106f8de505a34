package clientlib_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func testJob(name string, count int32) *troupev1.Job {
	return &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: &troupev1.JobSpec{Count: count, Template: &troupev1.TaskTemplate{Command: "x"}}}
}

// What a client bypassing the library writes is read only if it is a
// valid object of the kind at its own key: Get refuses the rest with an
// *UnreadableError, and List leaves them out and names them.
func TestGetAndListSkipUnreadableValues(t *testing.T) {
	ctx := t.Context()
	s := newMem()
	if _, err := clientlib.Create(ctx, s, clientlib.Jobs, testJob("good", 1)); err != nil {
		t.Fatal(err)
	}
	why := map[string]string{
		"/jobs/ns/garbage":  "decode Job: unexpected EOF", // a field longer than the value
		"/jobs/ns/invalid":  `spec.count: must be in [1, 1000000], got 0`,
		"/jobs/ns/alias":    `Job "ns/other" belongs at /jobs/ns/other`,
		"/jobs/ns/nometa":   "decode Job: no metadata",
		"/jobs/other/other": `Job "ns/other" belongs at /jobs/ns/other`,
	}
	values := map[string][]byte{
		"/jobs/ns/garbage":  clienttest.Garbage,
		"/jobs/ns/invalid":  clienttest.Encoded(t, testJob("invalid", 0)),
		"/jobs/ns/alias":    clienttest.Encoded(t, testJob("other", 1)),
		"/jobs/ns/nometa":   clienttest.Encoded(t, &troupev1.Job{Spec: &troupev1.JobSpec{Count: 1}}),
		"/jobs/other/other": clienttest.Encoded(t, testJob("other", 1)),
	}
	versions := map[string]uint64{}
	for key, v := range values {
		versions[key] = clienttest.PutRaw(ctx, t, s, key, v)
	}

	for key, want := range why {
		_, err := clientlib.Get(ctx, s, clientlib.Jobs, key)
		var u *clientlib.UnreadableError
		if !errors.As(err, &u) || !errors.Is(err, clientlib.ErrUnreadable) || u.Key != key || u.Version != versions[key] ||
			!strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), fmt.Sprintf("unreadable Job at %s (version %d): ", key, versions[key])) {
			t.Errorf("Get %s: %v, want an *UnreadableError saying %q", key, err, want)
		}
	}
	if _, err := clientlib.Get(ctx, s, clientlib.Jobs, "/jobs/ns/invalid"); !errors.Is(err, clientlib.ErrInvalid) {
		t.Errorf("an invalid object's error does not match ErrInvalid: %v", err)
	}

	jobs, cursor, err := clientlib.List(ctx, s, clientlib.Jobs, "")
	var skipped clientlib.Unreadables
	if !errors.As(err, &skipped) || !errors.Is(err, clientlib.ErrUnreadable) || len(cursor) == 0 ||
		len(jobs) != 1 || jobs[0].GetMetadata().GetName() != "good" {
		t.Fatalf("List: %v, cursor %x, %v", jobs, cursor, err)
	}
	var keys []string
	for _, u := range skipped {
		keys = append(keys, u.Key)
	}
	if want := slices.Sorted(maps.Keys(why)); !slices.Equal(keys, want) || !strings.HasPrefix(err.Error(), "5 unreadable value(s) skipped: unreadable Job at /jobs/ns/alias") {
		t.Errorf("List skipped %v (%v), want %v", keys, err, want)
	}
	if jobs, _, err := clientlib.List(ctx, s, clientlib.Jobs, "ns/good"); err != nil || len(jobs) != 1 {
		t.Errorf("List of readable values only: %v %v", jobs, err)
	}
}

// RecordUnreadable records an event on what the key is kept with: the
// job of a job-scoped key, the machine of a machine-scoped one (the same
// error on the same one aggregates); nothing for other keys.
func TestRecordUnreadable(t *testing.T) {
	ctx, s, _, r := startRecorder(t, nil)
	for _, key := range []string{"/tasks/ns/web/3", "/jobs/ns/web", "/events/ns/web/x", "/runs/m1/ns/web/3", "/machines/m1",
		"/schedulers/batch-0", "/policies/p", "/jobs/ns", "/machines/"} {
		r.RecordUnreadable(key, errors.New("bad value"))
	}
	clienttest.Until(ctx, t, func() error {
		if st := r.Stats(); st.Written+st.Aggregated+st.Failed < 5 {
			return fmt.Errorf("recorder: %+v", st)
		}
		return nil
	})
	if st := r.Stats(); st.Written != 2 || st.Aggregated != 3 || st.Failed != 0 {
		t.Fatalf("recorder: %+v", st)
	}
	for _, c := range []struct {
		k    clientlib.Kind[*troupev1.Event]
		want string
	}{{clientlib.Events, "Job ns/web: bad value (x3)"}, {clientlib.MachineEvents, "Machine m1: bad value (x2)"}} {
		k, want := c.k, c.want
		es, _, err := clientlib.List(ctx, s, k, "")
		if err != nil || len(es) != 1 {
			t.Fatalf("%s: %v %v", k.Prefix, es, err)
		}
		e := es[0]
		got := fmt.Sprintf("%s %s: %s (x%d)", e.GetInvolvedKind(), strings.TrimPrefix(e.GetMetadata().GetNamespace()+"/"+e.GetInvolvedName(), "/"),
			e.GetMessage(), e.GetCount())
		if got != want || e.GetType() != clientlib.EventWarning || e.GetReason() != clientlib.ReasonUnreadable {
			t.Errorf("%s: %s %s, want %s", k.Prefix, got, e.GetReason(), want)
		}
	}
}
