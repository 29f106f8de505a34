package workload

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// CellConfig is the simulated cell: machine shapes with their counts.
type CellConfig struct {
	// Zones, if positive, labels the machines zone=z0 ... z<Zones-1>,
	// round-robin over all machines (so every zone gets every shape).
	Zones  int           `yaml:"zones"`
	Shapes []ShapeConfig `yaml:"shapes"`
}

// ShapeConfig is Count machines of one size, with labels that job
// selectors can match.
type ShapeConfig struct {
	Name      string            `yaml:"name"`
	Count     int               `yaml:"count"`
	CPUCores  float64           `yaml:"cpu_cores"`
	MemoryGiB float64           `yaml:"memory_gib"`
	Labels    map[string]string `yaml:"labels"`
}

// Validate reports the first problem of c, naming the field.
func (c CellConfig) Validate() error {
	if c.Zones < 0 {
		return fmt.Errorf("zones %d: must not be negative", c.Zones)
	}
	if len(c.Shapes) == 0 {
		return errors.New("shapes: at least one machine shape is needed")
	}
	names := map[string]bool{}
	for i, s := range c.Shapes {
		if err := s.validate(); err != nil {
			return fmt.Errorf("shapes[%d] (%s): %w", i, s.Name, err)
		}
		if names[s.Name] {
			return fmt.Errorf("shapes[%d]: name %q is used twice", i, s.Name)
		}
		names[s.Name] = true
	}
	return nil
}

func (s ShapeConfig) validate() error {
	switch {
	case s.Name == "":
		return errors.New("name is empty")
	case s.Count <= 0:
		return fmt.Errorf("count %d: must be positive", s.Count)
	case s.Labels["zone"] != "":
		return errors.New(`label "zone" is set by the cell's zones`)
	}
	if v, err := toUnits(s.CPUCores, 1000); err != nil || v == 0 {
		return fmt.Errorf("cpu_cores %v: must be positive (at least 0.001)", s.CPUCores)
	}
	if v, err := toUnits(s.MemoryGiB, 1<<30); err != nil || v == 0 {
		return fmt.Errorf("memory_gib %v: must be positive", s.MemoryGiB)
	}
	return nil
}

// Machines lists the cell's machines, m00000, m00001, ..., in the order
// of the shapes. c must be valid. Each machine has its own Labels map.
func (c CellConfig) Machines() []Machine {
	var ms []Machine
	for _, s := range c.Shapes {
		cpu, mem := millicores(s.CPUCores), bytesOfGiB(s.MemoryGiB)
		for range s.Count {
			labels := make(map[string]string, len(s.Labels)+1)
			for k, v := range s.Labels {
				labels[k] = v
			}
			if c.Zones > 0 {
				labels["zone"] = "z" + strconv.Itoa(len(ms)%c.Zones)
			}
			ms = append(ms, Machine{Name: fmt.Sprintf("m%05d", len(ms)), CPU: cpu, Memory: mem, Labels: labels})
		}
	}
	return ms
}

// toUnits converts a non-negative, finite amount in a file's unit
// (seconds, cores, GiB) to integer units (ns, millicores, bytes).
func toUnits(v, unit float64) (int64, error) {
	u := math.Round(v * unit)
	if !(v >= 0) || u >= 1<<62 {
		return 0, fmt.Errorf("%v: must be a non-negative number below %.3g", v, (1<<62)/unit)
	}
	return int64(u), nil
}

// millicores and bytesOfGiB convert amounts already validated.
func millicores(cores float64) int64 { return int64(math.Round(cores * 1000)) }
func bytesOfGiB(gib float64) int64   { return int64(math.Round(gib * (1 << 30))) }
