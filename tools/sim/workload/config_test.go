package workload

import (
	"strings"
	"testing"
)

// TestExampleConfig loads deploy/sim/omega-cluster-c.yaml and checks that
// it is the cell of the trace's cluster C.
func TestExampleConfig(t *testing.T) {
	c, err := LoadConfig("../../../deploy/sim/omega-cluster-c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	machines := c.Cell.Machines()
	want := GoogleCell(DefaultGoogleOptions()).Machines()
	if len(machines) != len(want) {
		t.Fatalf("%d machines, the Google cell has %d", len(machines), len(want))
	}
	for i := range want {
		if machines[i].CPU != want[i].CPU || machines[i].Memory != want[i].Memory {
			t.Fatalf("machine %d: %+v, the Google cell's is %+v", i, machines[i], want[i])
		}
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "empty file"},
		{"unknown field", "seed: 1\nhorizon: 10\n", "line 2: field horizon not found"},
		{"wrong type", "seed: one\n", "line 1: cannot unmarshal"},
		{"invalid", "horizon_seconds: 0\n", "horizon_seconds 0: must be in (0, 1e+08)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "c.yaml", tc.text)
			_, err := LoadConfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want the path and %q", err, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no shapes", func(c *Config) { c.Cell.Shapes = nil }, "cell: shapes: at least one machine shape"},
		{"shape count", func(c *Config) { c.Cell.Shapes[1].Count = 0 }, "cell: shapes[1] (big): count 0: must be positive"},
		{"shape cpu", func(c *Config) { c.Cell.Shapes[0].CPUCores = -2 }, "cell: shapes[0] (small): cpu_cores -2: must be positive"},
		{"shape twice", func(c *Config) { c.Cell.Shapes[1].Name = "small" }, `shapes[1]: name "small" is used twice`},
		{"zone label", func(c *Config) { c.Cell.Shapes[0].Labels = map[string]string{"zone": "a"} }, `label "zone" is set by the cell's zones`},
		{"no classes", func(c *Config) { c.Classes = nil }, "classes: at least one class"},
		{"class type", func(c *Config) { c.Classes[0].Type = "cron" }, `classes[0] (batch): type "cron" is neither batch nor service`},
		{"class twice", func(c *Config) { c.Classes[1].Name = "batch" }, `classes[1]: name "batch" is used twice`},
		{"process", func(c *Config) { c.Classes[0].Arrival.Process = "bursty" }, `arrival: process "bursty" is not poisson or fixed`},
		{"interval", func(c *Config) { c.Classes[1].Arrival.IntervalSeconds = 0 }, "classes[1] (service): arrival: interval_seconds 0"},
		{"no dist", func(c *Config) { c.Classes[0].Tasks = Dist{} }, "tasks: dist is missing"},
		{"dist kind", func(c *Config) { c.Classes[0].Tasks.Dist = "zipf" }, `tasks: dist "zipf" is not fixed`},
		{"whole tasks", func(c *Config) { c.Classes[1].Tasks.Value = 2.5 }, "tasks: value 2.5: must be a whole number"},
		{"uniform order", func(c *Config) { c.Classes[0].Tasks.Min = 20 }, "tasks: uniform: min 20 is above max 10"},
		{"lognormal median", func(c *Config) { c.Classes[0].DurationSeconds.Median = 0 }, "duration_seconds: lognormal: median 0: must be in (0, 1e+08)"},
		{"lognormal sigma", func(c *Config) { c.Classes[0].DurationSeconds.Sigma = -1 }, "sigma -1: must be a non-negative number"},
		{"exponential mean", func(c *Config) { c.Classes[0].CPUCores.Mean = -1 }, "cpu_cores: exponential: mean -1"},
		{"cap", func(c *Config) { c.Classes[0].CPUCores.Max = -1 }, "cpu_cores: max -1: must be in [0, 1e+06)"},
		{"choice weights", func(c *Config) { c.Classes[0].MemoryGiB.Weights = []float64{1} }, "memory_gib: choice: 1 weights for 2 values"},
		{"choice zero weights", func(c *Config) { c.Classes[0].MemoryGiB.Weights = []float64{0, 0} }, "weights sum to 0"},
		{"choice empty", func(c *Config) { c.Classes[0].MemoryGiB.Values = nil }, "memory_gib: choice: values are empty"},
		{"priority", func(c *Config) { c.Classes[1].Priority.Value = -5 }, "priority: value -5: must be in [0, 2.14748e+09)"},
		{"distinct", func(c *Config) { c.Classes[0].DistinctMachines = 1.5 }, "distinct_machines 1.5: must be a fraction"},
		{"selector fraction", func(c *Config) { c.Classes[0].Selectors[0].Fraction = 0 }, "selectors[0]: fraction 0: must be in (0, 1]"},
		{"selector sum", func(c *Config) {
			c.Classes[0].Selectors = append(c.Classes[0].Selectors, SelectorConfig{Fraction: 0.95, Labels: map[string]string{"zone": "z1"}})
		}, "selectors[1]: the fractions add up to 1.05, above 1"},
		{"selector matches nothing", func(c *Config) { c.Classes[0].Selectors[0].Labels = map[string]string{"gpu": "true"} }, "selectors[0]: no machine of the cell has labels map[gpu:true]"},
		{"round kind", func(c *Config) { c.Classes[0].Tasks.Round = "up" }, `tasks: round "up" is not nearest, floor or ceil`},
		{"round fraction", func(c *Config) { c.Classes[0].CPUCores.Round = "ceil" }, `cpu_cores: round "ceil": only fields of whole numbers (tasks, priority) are rounded`},
		{"duration per", func(c *Config) { c.Classes[0].DurationPer = "class" }, `classes[0] (batch): duration_per "class" is not task or job`},
		{"prefill target", func(c *Config) { c.Prefill = &PrefillConfig{CPUUtilisation: 1.5, Like: "service"} }, "prefill: cpu_utilisation 1.5: must be a fraction in [0, 1]"},
		{"prefill no target", func(c *Config) { c.Prefill = &PrefillConfig{Like: "service"} }, "prefill: cpu_utilisation or memory_utilisation: give the fraction"},
		{"prefill like", func(c *Config) { c.Prefill = &PrefillConfig{CPUUtilisation: 0.5, Like: "web"} }, `prefill: like "web": no class has that name`},
		{"prefill without like", func(c *Config) {
			c.Prefill = &PrefillConfig{CPUUtilisation: 0.5, JobShape: JobShape{Tasks: Dist{Dist: "fixed", Value: 1}, CPUCores: Dist{Dist: "fixed", Value: 1}}}
		}, "prefill: memory_gib: give its distribution, or like: CLASS"},
		{"prefill dist", func(c *Config) {
			c.Prefill = &PrefillConfig{CPUUtilisation: 0.5, Like: "service", JobShape: JobShape{Tasks: Dist{Dist: "exponential", Mean: 10, Round: "down"}}}
		}, `prefill: tasks: round "down" is not nearest, floor or ceil`},
		{"prefill type", func(c *Config) {
			c.Prefill = &PrefillConfig{CPUUtilisation: 0.5, Like: "service", JobShape: JobShape{Type: "cron"}}
		}, `prefill: type "cron" is neither`},
		{"prefill name", func(c *Config) {
			c.Prefill = &PrefillConfig{CPUUtilisation: 0.5, Like: "prefill"}
			c.Classes[1].Name = "prefill"
		}, `classes: name "prefill" is the prefill's jobs'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if _, err := NewGenerator(c); err == nil {
				t.Error("NewGenerator took an invalid config")
			}
		})
	}
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
}

func TestCellMachines(t *testing.T) {
	ms := testConfig().Cell.Machines()
	if len(ms) != 10 {
		t.Fatalf("%d machines, want 10", len(ms))
	}
	first, last := ms[0], ms[9]
	if first.Name != "m00000" || first.CPU != 8000 || first.Memory != 32<<30 || first.Labels["zone"] != "z0" {
		t.Errorf("first machine %+v", first)
	}
	if last.Name != "m00009" || last.CPU != 32000 || last.Labels["zone"] != "z1" || last.Labels["ssd"] != "true" {
		t.Errorf("last machine %+v", last)
	}
	ms[9].Labels["ssd"] = "false"
	if ms[8].Labels["ssd"] != "true" {
		t.Error("machines share a Labels map")
	}
}
