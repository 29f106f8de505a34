package runtime

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func TestSimRunsForItsDurationOrUntilStopped(t *testing.T) {
	fire := make(chan time.Time)
	var asked time.Duration
	s := &Sim{DefaultDuration: time.Minute, After: func(d time.Duration) <-chan time.Time { asked = d; return fire }}
	b := &troupev1.Binding{Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{SimDuration: durationpb.New(3 * time.Second)}}}
	p, err := s.Start(context.Background(), b, "")
	if err != nil {
		t.Fatal(err)
	}
	fire <- time.Time{} // the virtual clock reaches the end of the run
	<-p.Done()
	if e := p.Exit(); e.Code != 0 || e.Killed || asked != 3*time.Second {
		t.Fatalf("exit %+v after %v", e, asked)
	}
	p, _ = s.Start(context.Background(), &troupev1.Binding{}, "")
	if asked != time.Minute {
		t.Fatalf("default duration: asked %v", asked)
	}
	p.Stop(0)
	<-p.Done()
	if e := p.Exit(); !e.Killed {
		t.Fatalf("stopped sim task: %+v", e)
	}
}

func TestSimExitsWithItsExitCode(t *testing.T) {
	fire := make(chan time.Time, 1)
	fire <- time.Time{}
	s := &Sim{After: func(time.Duration) <-chan time.Time { return fire }}
	p, err := s.Start(context.Background(), &troupev1.Binding{Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{SimExitCode: 3}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if e := p.Exit(); e.Code != 3 || e.Killed || e.Reason != "exit status 3" {
		t.Fatalf("exit %+v", e)
	}
}
