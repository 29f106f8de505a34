package scheduler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/memstore"
	"github.com/troupe-cluster/troupe/clientlib"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
)

// BenchmarkIdleUnschedulable measures what a scheduler costs on an idle
// cell of 1,000 machines with 1,000 jobs whose tasks fit nowhere: the
// CPU it uses (user and system time of the process per second of wall
// time) and the writes it makes (commits per second: its jobs'
// JobSchedulings and events), over the in-memory store, for 20 s of
// wall time after the jobs' first decisions; and the writes per job
// from the scheduler's start to the end of those 20 s. Nothing in the
// cell changes, so no job is woken early; the back-off of a job that
// fits nowhere grows from 1 s to a minute (scheduler.DefaultPolicy), or
// stays at 1 s (constant, as before).
//
//	go test -run '^$' -bench IdleUnschedulable -benchtime 1x ./schedulers/scheduler
func BenchmarkIdleUnschedulable(b *testing.B) {
	growing := scheduler.DefaultPolicy(time.Second)
	constant := growing
	constant.MaxBackoff = constant.Backoff
	for _, c := range []struct {
		name   string
		policy scheduler.Policy
	}{{"growing", growing}, {"constant", constant}} {
		b.Run(c.name, func(b *testing.B) { idleUnschedulable(b, c.policy) })
	}
}

func idleUnschedulable(b *testing.B, policy scheduler.Policy) {
	for range b.N {
		ctx, cancel := context.WithCancel(b.Context())
		s := memstore.New(time.Now, time.Minute)
		var commits atomic.Int64
		s.Observe(func(*storev1.ChangeSet) { commits.Add(1) })
		tx := clientlib.NewTxn(s)
		for i := range 1000 {
			clientlib.PutObject(tx.Group(), clientlib.Machines, &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: fmt.Sprintf("m%04d", i)},
				Spec:   &troupev1.MachineSpec{Capacity: map[string]int64{"cpu": 4000, "memory": 8 << 30}},
				Status: &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}})
		}
		if _, err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		const jobs = 1000
		template := &troupev1.TaskTemplate{Command: "x", Requests: map[string]int64{"cpu": 64000}}
		for j := range jobs {
			name := fmt.Sprintf("j%04d", j)
			tx := clientlib.NewTxn(s)
			clientlib.CreateObject(tx.Group(), clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: "ns"},
				Spec: &troupev1.JobSpec{Count: 1, Scheduler: profiles.Batch, Template: template}})
			clientlib.CreateObject(tx.Group(), clientlib.Tasks, &troupev1.Task{
				Metadata: &troupev1.ObjectMeta{Name: clientlib.TaskName(name, 0), Namespace: "ns"},
				Spec:     &troupev1.TaskSpec{Job: name, Scheduler: profiles.Batch, Template: template},
				Status:   &troupev1.TaskStatus{Phase: troupev1.TaskPhase_TASK_PHASE_PENDING}})
			out, err := tx.Commit(ctx)
			if err == nil {
				err = out.Err()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		events, err := clientlib.NewEventRecorder(s, clientlib.DefaultEventRecorderConfig("batch-0"))
		if err != nil {
			b.Fatal(err)
		}
		go events.Run(ctx)
		prof, modes, err := profiles.New(profiles.Batch, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			b.Fatal(err)
		}
		var decisions atomic.Int64
		sched, err := scheduler.New(s, scheduler.Config{Name: "batch-0", Kind: profiles.Batch, Profile: prof, Modes: modes,
			Policy: policy, Events: events, Logger: zap.NewNop(),
			Observe: func(scheduler.Decision) { decisions.Add(1) }})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		start := commits.Load()
		go func() { defer close(done); sched.Run(ctx) }()
		for decisions.Load() < jobs { // every job decided once
			select {
			case <-ctx.Done():
				b.Fatal(ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
		const window = 20 * time.Second
		d0, c0, cpu0, t0 := decisions.Load(), commits.Load(), cpuTime(), time.Now()
		time.Sleep(window) // the measure is what happens in this wall time
		d1, c1, cpu1, el := decisions.Load(), commits.Load(), cpuTime(), time.Since(t0)
		cancel()
		<-done
		b.ReportMetric(float64(d1-d0)/el.Seconds(), "decisions/s")
		b.ReportMetric(float64(c1-c0)/el.Seconds(), "writes/s")
		b.ReportMetric((cpu1-cpu0).Seconds()/el.Seconds(), "cpu-cores")
		b.ReportMetric(float64(c1-start)/jobs, "writes/job")
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
