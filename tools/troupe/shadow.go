package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/schedulers/profiles"
	"github.com/troupe-cluster/troupe/schedulers/scheduler"
	"github.com/troupe-cluster/troupe/tools/cell"
)

// shadowOptions are the flags of `troupe scheduler --shadow`: the report
// file ("": none), how often it is rewritten, and how many of the latest
// decisions it lists.
type shadowOptions struct {
	report   string
	interval time.Duration
	keep     int
}

// shadowReportFile is what --shadow-report holds: when it was written,
// and each shadow's report (scheduler.ShadowReport).
type shadowReportFile struct {
	Written time.Time                `json:"written"`
	Shadows []scheduler.ShadowReport `json:"shadows"`
}

// runShadow is `troupe scheduler --shadow`: shadows of specs against the
// cell (scheduler.Shadow), sharing one cell cache and one read-only
// client, serving their metrics, until a signal or a failure; the report
// file is rewritten every o.interval and at the end, and each shadow's
// summary printed then.
func (a *app) runShadow(ctx context.Context, rf *roleFlags, specs []cell.SchedulerSpec, backoff time.Duration, o shadowOptions) error {
	const what = "scheduler --shadow"
	log, creds, reg, err := a.roleProcess(rf, what, pki.RoleViewer,
		": a shadow only reads the cell, and runs with a viewer's certificate (troupe certs issue --role viewer)")
	if err != nil {
		return err
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := rf.client(creds, log)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The shadows get the client as a scheduler.Reader: they list and
	// watch, and hold nothing that writes.
	cc := scheduler.NewCellCache(cl, log)
	var shadows []*scheduler.Shadow
	for _, spec := range specs {
		prof, modes, err := profiles.New(spec.Kind, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
		if err != nil {
			return err
		}
		s, err := scheduler.NewShadow(cl, scheduler.ShadowConfig{Name: spec.Name, Kind: spec.Kind, Partition: spec.Partition,
			Partitions: spec.Partitions, Profile: prof, Modes: modes, Policy: scheduler.DefaultPolicy(backoff), Cache: cc,
			Keep: o.keep, Logger: log.With(zap.String("shadow", spec.Name))})
		if err != nil {
			return err
		}
		shadows = append(shadows, s)
	}
	reg.MustRegister(scheduler.ShadowCollector(shadows...))
	errc := make(chan error, len(shadows)+1)
	run := func(f func(context.Context) error) {
		go func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errc <- err
			}
		}()
	}
	for _, s := range shadows {
		run(s.Run)
	}
	run(cc.Run)
	addr, srv, err := serveMetrics(rf.httpAddr, what, reg, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(a.out, "troupe %s: store at %s, metrics http://%s/metrics; writes nothing; stop with Ctrl-C\n", what, rf.endpoint, addr)

	write := func() {
		if o.report == "" {
			return
		}
		if err := writeShadowReport(o.report, shadows); err != nil {
			fmt.Fprintf(a.errOut, "troupe %s: %v\n", what, err)
		}
	}
	var tick <-chan time.Time
	if o.report != "" {
		t := time.NewTicker(o.interval)
		defer t.Stop()
		tick = t.C
	}
	var failed error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case failed = <-errc:
			break wait
		case <-tick:
			write()
		}
	}
	write()
	for _, s := range shadows {
		fmt.Fprint(a.out, s.Report().Summary())
	}
	return failed
}

// writeShadowReport writes the shadows' reports to path as JSON, whole or
// not at all: to a temporary file beside it, renamed over it.
func writeShadowReport(path string, shadows []*scheduler.Shadow) error {
	f := shadowReportFile{Written: time.Now(), Shadows: make([]scheduler.ShadowReport, 0, len(shadows))}
	for _, s := range shadows {
		f.Shadows = append(f.Shadows, s.Report())
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("shadow report: %w", err)
	}
	return nil
}
