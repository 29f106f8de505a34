package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
)

// Prefill is what a workload's cell holds when it starts: jobs placed at
// time 0, before the first job arrives and without any scheduler's
// decision, until the cell's allocated CPU or memory would pass a target
// fraction of its capacity, or, without targets, a list of jobs placed
// whole as far as they fit (a trace's tasks running at its window's
// start, Trace.Running). The simulator places them (sim, prefill.go):
// each task on a machine chosen at random among those with room, as the
// Omega lightweight simulator prefills its cell.
type Prefill struct {
	// CPU and Memory are the target fractions of the cell's capacity,
	// in [0, 1]; 0 sets no target on that resource. Both 0: Jobs is a
	// list, every task of which is placed if it fits somewhere.
	CPU, Memory float64
	// Jobs are the jobs to place, in order, read until a target is
	// reached (they may never end: a synthetic config's do not) or, for
	// a list, to the end. Their Submit times are not read: they are
	// placed at 0; a task's Duration is how long it runs from 0.
	Jobs Source
}

// Prefiller is a Source whose cell starts full: a synthetic config with
// a prefill, or a source WithPrefill made. Prefill returns what the cell
// holds at the start (nil: nothing); like the Source, it is read once,
// by the one run that plays the source.
type Prefiller interface {
	Source
	Prefill() *Prefill
}

// PrefillOf returns src's prefill (nil if it has none). Window and
// ScaleArrivals keep their source's prefill; Compress divides its tasks'
// durations too.
func PrefillOf(src Source) *Prefill {
	if p, ok := src.(Prefiller); ok {
		return p.Prefill()
	}
	return nil
}

// WithPrefill returns src, whose cell starts with p.
func WithPrefill(src Source, p *Prefill) Prefiller { return &withPrefill{Source: src, p: p} }

type withPrefill struct {
	Source
	p *Prefill
}

func (w *withPrefill) Prefill() *Prefill { return w.p }

// PrefillConfig fills a synthetic workload's cell at time 0 (Prefill):
// until its allocated CPU (or memory) would pass CPUUtilisation (or
// MemoryUtilisation) of its capacity, with jobs drawn like the class Like
// (its tasks, CPU, memory, priority, distinct machines, selectors and
// type) save for the distributions given here, which take their place.
// Without Like, tasks, cpu_cores, memory_gib and priority are needed and
// the jobs are services. The jobs are named prefill-1, prefill-2, ...;
// their tasks run until the end unless duration_seconds is given (the
// class's durations are not taken: prefill stands for long-running
// work). The jobs draw from a random stream of their own, seeded by the
// config's seed: the classes' jobs are the same with or without a
// prefill.
type PrefillConfig struct {
	CPUUtilisation    float64 `yaml:"cpu_utilisation"`
	MemoryUtilisation float64 `yaml:"memory_utilisation"`
	Like              string  `yaml:"like"`
	// JobShape's Type is batch or service (default: Like's, or service).
	JobShape `yaml:",inline"`
}

// prefillName prefixes the prefill jobs' IDs; no class may take it.
const prefillName = "prefill"

// prefillStream is the prefill jobs' random stream (the classes' are
// their positions in the config).
const prefillStream = 1 << 62

func (p *PrefillConfig) validate(classes []ClassConfig, machines []Machine) error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"cpu_utilisation", p.CPUUtilisation}, {"memory_utilisation", p.MemoryUtilisation}} {
		if !(f.v >= 0 && f.v <= 1) {
			return fmt.Errorf("%s %v: must be a fraction in [0, 1]", f.name, f.v)
		}
	}
	if p.CPUUtilisation == 0 && p.MemoryUtilisation == 0 {
		return errors.New("cpu_utilisation or memory_utilisation: give the fraction of the cell to fill")
	}
	if p.Like != "" && !slices.ContainsFunc(classes, func(c ClassConfig) bool { return c.Name == p.Like }) {
		return fmt.Errorf("like %q: no class has that name", p.Like)
	}
	if p.Like == "" {
		for _, d := range []struct {
			f    field
			dist Dist
		}{{fieldTasks, p.Tasks}, {fieldCPU, p.CPUCores}, {fieldMemory, p.MemoryGiB}, {fieldPriority, p.Priority}} {
			if isZero(d.dist) {
				return fmt.Errorf("%s: give its distribution, or like: CLASS", d.f.name)
			}
		}
	}
	return p.class(classes).validate(machines)
}

// class is the class the prefill jobs are drawn as; p must name an
// existing class if any.
func (p *PrefillConfig) class(classes []ClassConfig) ClassConfig {
	c := ClassConfig{JobShape: JobShape{Type: Service.String()}}
	for _, cl := range classes {
		if cl.Name == p.Like && p.Like != "" {
			c = cl
		}
	}
	c.Name = prefillName
	c.Arrival = ArrivalConfig{Process: "fixed", IntervalSeconds: 1} // not used: every job is at 0
	if p.Type != "" {
		c.Type = p.Type
	}
	c.DurationSeconds, c.DurationPer = Dist{Dist: "fixed"}, p.DurationPer
	if !isZero(p.DurationSeconds) {
		c.DurationSeconds = p.DurationSeconds
	}
	for _, o := range []struct{ to, from *Dist }{{&c.Tasks, &p.Tasks}, {&c.CPUCores, &p.CPUCores},
		{&c.MemoryGiB, &p.MemoryGiB}, {&c.Priority, &p.Priority}} {
		if !isZero(*o.from) {
			*o.to = *o.from
		}
	}
	return c
}

func isZero(d Dist) bool { return reflect.ValueOf(d).IsZero() }

// prefill returns the prefill of c (valid, with a Prefill): an endless
// source of its jobs, all at time 0.
func (c Config) prefill() *Prefill {
	cl := c.Prefill.class(c.Classes)
	typ, _ := ParseType(cl.Type) // validated
	return &Prefill{CPU: c.Prefill.CPUUtilisation, Memory: c.Prefill.MemoryUtilisation,
		Jobs: &prefillJobs{c: classGen{cfg: cl, typ: typ, rng: rand.New(rand.NewPCG(c.Seed, prefillStream))}}}
}

// prefillJobs draws prefill jobs without end.
type prefillJobs struct{ c classGen }

func (p *prefillJobs) Next() (Job, error) { return p.c.job(), nil }
