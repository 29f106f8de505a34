package workload

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"go.yaml.in/yaml/v3"
)

// Config is a synthetic workload: a cell, and classes of jobs, each with
// its own arrival process (so the batch/service mix is set by their
// rates). The same Config gives the same jobs.
type Config struct {
	Seed uint64 `yaml:"seed"`
	// HorizonSeconds: jobs are submitted in [0, horizon).
	HorizonSeconds float64    `yaml:"horizon_seconds"`
	Cell           CellConfig `yaml:"cell"`
	// Prefill, if set, fills the cell at time 0, before the first job
	// arrives (see PrefillConfig).
	Prefill *PrefillConfig `yaml:"prefill"`
	Classes []ClassConfig  `yaml:"classes"`
}

// ClassConfig is one class of jobs. Each job draws its number of tasks,
// its tasks' CPU and memory (the same for all, as one TaskTemplate),
// priority and constraints; each task draws its duration, or the job
// draws one for all its tasks (DurationPer).
type ClassConfig struct {
	// Name prefixes the jobs' IDs: <name>-1, <name>-2, ...
	Name     string        `yaml:"name"`
	Arrival  ArrivalConfig `yaml:"arrival"`
	JobShape `yaml:",inline"`
	// DistinctMachines is the fraction of jobs whose tasks must run on
	// distinct machines.
	DistinctMachines float64 `yaml:"distinct_machines"`
	// Selectors: a job gets at most one, each with its fraction of jobs
	// (the fractions add up to at most 1).
	Selectors []SelectorConfig `yaml:"selectors"`
}

// JobShape is what a class's (or the prefill's) jobs draw: their type,
// tasks, durations, requests and priority.
type JobShape struct {
	Type  string `yaml:"type"` // batch or service
	Tasks Dist   `yaml:"tasks"`
	// DurationSeconds: a task that draws 0 runs until the end.
	DurationSeconds Dist `yaml:"duration_seconds"`
	// DurationPer says what draws a duration: "task" (the default), each
	// task its own, or "job", one that all the job's tasks run for (as
	// the Omega lightweight simulator does).
	DurationPer string `yaml:"duration_per"`
	CPUCores    Dist   `yaml:"cpu_cores"`
	MemoryGiB   Dist   `yaml:"memory_gib"`
	// Priority is on Troupe's scale (100 and up is production).
	Priority Dist `yaml:"priority"`
}

// Values of ClassConfig.DurationPer.
const (
	DurationPerTask = "task"
	DurationPerJob  = "job"
)

// ArrivalConfig is a class's arrival process: "poisson" (exponential
// gaps of mean interval_seconds) or "fixed" (one job every
// interval_seconds). The first job comes one gap after 0.
type ArrivalConfig struct {
	Process         string  `yaml:"process"`
	IntervalSeconds float64 `yaml:"interval_seconds"`
}

// SelectorConfig gives a fraction of a class's jobs machine labels to
// match (Job.MatchLabels).
type SelectorConfig struct {
	Fraction float64           `yaml:"fraction"`
	Labels   map[string]string `yaml:"labels"`
}

// field is what a Dist fills: its name in the config, whether it takes
// whole numbers, the bound of its values (larger draws are capped) and
// its unit in Job's terms.
type field struct {
	name  string
	whole bool
	limit float64
	unit  float64
}

var (
	fieldTasks    = field{"tasks", true, 1e6, 1}
	fieldDuration = field{"duration_seconds", false, 1e8, 1e9}
	fieldCPU      = field{"cpu_cores", false, 1e6, 1000}
	fieldMemory   = field{"memory_gib", false, 1e6, 1 << 30}
	fieldPriority = field{"priority", true, math.MaxInt32, 1}
)

// LoadConfig reads a Config from a YAML (or JSON) file and validates it.
// Unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	var c Config
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("empty file")
		}
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports the first problem of c, with the path to the field.
func (c Config) Validate() error {
	if !(c.HorizonSeconds > 0) || c.HorizonSeconds >= fieldDuration.limit {
		return fmt.Errorf("horizon_seconds %v: must be in (0, %.6g)", c.HorizonSeconds, fieldDuration.limit)
	}
	if err := c.Cell.Validate(); err != nil {
		return fmt.Errorf("cell: %w", err)
	}
	if len(c.Classes) == 0 {
		return errors.New("classes: at least one class of jobs is needed")
	}
	machines := c.Cell.Machines()
	names := map[string]bool{}
	for i, cl := range c.Classes {
		if err := cl.validate(machines); err != nil {
			return fmt.Errorf("classes[%d] (%s): %w", i, cl.Name, err)
		}
		if names[cl.Name] {
			return fmt.Errorf("classes[%d]: name %q is used twice", i, cl.Name)
		}
		names[cl.Name] = true
	}
	if c.Prefill != nil {
		if names[prefillName] {
			return fmt.Errorf("classes: name %q is the prefill's jobs' (prefill-1, ...)", prefillName)
		}
		if err := c.Prefill.validate(c.Classes, machines); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return nil
}

func (c ClassConfig) validate(machines []Machine) error {
	if c.Name == "" {
		return errors.New("name is empty")
	}
	if _, err := ParseType(c.Type); err != nil {
		return err
	}
	a := c.Arrival
	if a.Process != "poisson" && a.Process != "fixed" {
		return fmt.Errorf("arrival: process %q is not poisson or fixed", a.Process)
	}
	if !(a.IntervalSeconds > 0) || a.IntervalSeconds >= fieldDuration.limit {
		return fmt.Errorf("arrival: interval_seconds %v: must be in (0, %.6g)", a.IntervalSeconds, fieldDuration.limit)
	}
	for _, d := range []struct {
		f    field
		dist Dist
	}{{fieldTasks, c.Tasks}, {fieldDuration, c.DurationSeconds}, {fieldCPU, c.CPUCores}, {fieldMemory, c.MemoryGiB}, {fieldPriority, c.Priority}} {
		if err := d.dist.validate(d.f.whole, d.f.limit); err != nil {
			return fmt.Errorf("%s: %w", d.f.name, err)
		}
	}
	if c.DurationPer != "" && c.DurationPer != DurationPerTask && c.DurationPer != DurationPerJob {
		return fmt.Errorf("duration_per %q is not task or job", c.DurationPer)
	}
	if !(c.DistinctMachines >= 0 && c.DistinctMachines <= 1) {
		return fmt.Errorf("distinct_machines %v: must be a fraction in [0, 1]", c.DistinctMachines)
	}
	sum := 0.0
	for i, s := range c.Selectors {
		if !(s.Fraction > 0 && s.Fraction <= 1) {
			return fmt.Errorf("selectors[%d]: fraction %v: must be in (0, 1]", i, s.Fraction)
		}
		if sum += s.Fraction; sum > 1+1e-9 {
			return fmt.Errorf("selectors[%d]: the fractions add up to %v, above 1", i, sum)
		}
		if len(s.Labels) == 0 {
			return fmt.Errorf("selectors[%d]: labels are empty", i)
		}
		if !anyMachineHas(machines, s.Labels) {
			return fmt.Errorf("selectors[%d]: no machine of the cell has labels %v", i, s.Labels)
		}
	}
	return nil
}

func anyMachineHas(machines []Machine, labels map[string]string) bool {
	for _, m := range machines {
		has := true
		for k, v := range labels {
			if mv, ok := m.Labels[k]; !ok || mv != v {
				has = false
				break
			}
		}
		if has {
			return true
		}
	}
	return false
}
