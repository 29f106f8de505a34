package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
	"github.com/troupe-cluster/troupe/clientlib/clienttest/wait"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// Values that are not valid objects at their keys, written by a client
// bypassing clientlib, are left out by get, describe and watch, which say
// so on stderr (watch in its stream of changes) and show the rest.
func TestCLISkipsUnreadableObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cell := clienttest.Start(ctx, t)
	c := cell.Client()
	endpoint := append([]string{"-endpoint", cell.EndpointList()}, cell.AdminFlags()...)
	job := func(name string) *troupev1.Job {
		return &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &troupev1.JobSpec{Count: 2, Template: &troupev1.TaskTemplate{Command: "/bin/true", SimDuration: durationpb.New(time.Hour)}}}
	}
	for _, name := range []string{"good-a", "good-b"} {
		if _, err := clientlib.Create(ctx, c, clientlib.Jobs, job(name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := clientlib.Create(ctx, c, clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: "good-a-0", Namespace: "default"},
		Spec: &troupev1.TaskSpec{Job: "good-a", Template: &troupev1.TaskTemplate{Command: "/bin/true"}}}); err != nil {
		t.Fatal(err)
	}
	invalid := job("invalid")
	invalid.Spec.Count = -1
	clienttest.PutRaw(ctx, t, c, "/jobs/default/garbage", clienttest.Garbage)
	clienttest.PutRaw(ctx, t, c, "/jobs/default/invalid", clienttest.Encoded(t, invalid))
	clienttest.PutRaw(ctx, t, c, "/tasks/default/good-a/1", clienttest.Garbage)

	run := func(args ...string) (string, string, error) {
		out, errOut, code := cli{}.run(ctx, append(args, endpoint...)...)
		var err error
		if code != 0 {
			err = fmt.Errorf("exit status %d: %s", code, errOut)
		}
		return out, errOut, err
	}
	out, errOut, err := run("get", "jobs")
	if err != nil || !strings.Contains(out, "good-a") || !strings.Contains(out, "good-b") || strings.Contains(out, "invalid") ||
		!strings.Contains(errOut, "2 jobs could not be read") || !strings.Contains(errOut, "/jobs/default/garbage") ||
		!strings.Contains(errOut, "/jobs/default/invalid") {
		t.Fatalf("get jobs: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, _, err = run("get", "jobs", "-o", "yaml")
	if ms, derr := clientlib.DecodeManifests([]byte(out)); err != nil || derr != nil || len(ms) != 2 {
		t.Fatalf("get jobs -o yaml: %v %v\n%s", err, derr, out)
	}
	out, errOut, err = run("describe", "job", "good-a")
	if err != nil || !strings.Contains(out, "good-a-0") || !strings.Contains(errOut, "1 task could not be read") ||
		!strings.Contains(errOut, "/tasks/default/good-a/1") {
		t.Fatalf("describe job good-a: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if _, _, err := run("describe", "job", "garbage"); err == nil || !strings.Contains(err.Error(), "unreadable Job at /jobs/default/garbage") {
		t.Fatalf("describe job garbage: %v", err)
	}

	var watchOut, watchErr syncBuffer
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan int, 1)
	go func() {
		watched <- cli{}.runTo(watchCtx, &watchOut, &watchErr, append([]string{"watch", "jobs"}, endpoint...)...)
	}()
	wait.Until(ctx, t, "the watch to start", contains(func() (string, error) { return watchErr.String(), nil }, "Watching jobs"))
	clienttest.PutRaw(ctx, t, c, "/jobs/default/good-b", clienttest.Garbage)
	if _, err := clientlib.Create(ctx, c, clientlib.Jobs, job("good-c")); err != nil {
		t.Fatal(err)
	}
	wait.Until(ctx, t, "the watch to show the jobs", contains(func() (string, error) { return watchOut.String(), nil },
		"UNREADABLE job /jobs/default/garbage", "UNREADABLE job /jobs/default/invalid", "UNREADABLE job /jobs/default/good-b",
		"ADDED job default/good-c"))
	stopWatch()
	if code := <-watched; code != 0 {
		t.Fatalf("watch ended with exit status %d: %s", code, watchErr.String())
	}
	if s := watchOut.String(); strings.Count(s, "UNREADABLE") != 3 || strings.Contains(s, "DELETED") {
		t.Fatalf("watch:\n%s", s)
	}
}
