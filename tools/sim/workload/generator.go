package workload

import (
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Generator is a Source of synthetic jobs drawn as a Config says. Each
// class draws from its own random stream (seeded by Config.Seed and the
// class's position), so a class's jobs do not change when another class
// is edited. Classes merge in time order; on a tie the earlier class in
// the config goes first.
type Generator struct {
	horizon time.Duration
	classes []classGen
	config  Config
}

var _ Prefiller = (*Generator)(nil)

type classGen struct {
	cfg  ClassConfig
	typ  Type
	rng  *rand.Rand
	next time.Duration // the next job's submit time
	seq  int
}

// Generate validates c and returns every job its generator makes.
func Generate(c Config) ([]Job, error) {
	g, err := NewGenerator(c)
	if err != nil {
		return nil, err
	}
	return Collect(g)
}

// NewGenerator validates c and returns its generator. The cell is
// c.Cell.Machines().
func NewGenerator(c Config) (*Generator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{horizon: time.Duration(c.HorizonSeconds * 1e9), config: c}
	for i, cl := range c.Classes {
		typ, _ := ParseType(cl.Type) // validated
		cg := classGen{cfg: cl, typ: typ, rng: rand.New(rand.NewPCG(c.Seed, uint64(i)))}
		cg.next = cg.gap()
		g.classes = append(g.classes, cg)
	}
	return g, nil
}

// Next returns the next job, or io.EOF once every class's next job would
// come at or after the horizon.
func (g *Generator) Next() (Job, error) {
	c := &g.classes[0]
	for i := range g.classes[1:] {
		if g.classes[i+1].next < c.next {
			c = &g.classes[i+1]
		}
	}
	if c.next >= g.horizon {
		return Job{}, io.EOF
	}
	j := c.job()
	c.next += c.gap()
	return j, nil
}

// Prefill returns the config's prefill, a fresh stream of its jobs each
// call (nil without one).
func (g *Generator) Prefill() *Prefill {
	if g.config.Prefill == nil {
		return nil
	}
	return g.config.prefill()
}

// gap draws the time to the class's next job.
func (c *classGen) gap() time.Duration {
	interval := c.cfg.Arrival.IntervalSeconds * 1e9
	if c.cfg.Arrival.Process == "poisson" {
		return time.Duration(interval * c.rng.ExpFloat64())
	}
	return time.Duration(interval)
}

// job draws the job submitted at c.next, always in the same order.
func (c *classGen) job() Job {
	c.seq++
	j := Job{ID: c.cfg.Name + "-" + strconv.Itoa(c.seq), Submit: c.next, Type: c.typ,
		Priority: int32(c.draw(c.cfg.Priority, fieldPriority))}
	tasks := max(c.draw(c.cfg.Tasks, fieldTasks), 1)
	cpu, memory := max(c.draw(c.cfg.CPUCores, fieldCPU), 1), max(c.draw(c.cfg.MemoryGiB, fieldMemory), 1)
	j.DistinctMachines = c.rng.Float64() < c.cfg.DistinctMachines
	x := c.rng.Float64()
	for _, s := range c.cfg.Selectors {
		if x -= s.Fraction; x < 0 {
			j.MatchLabels = s.Labels // shared: jobs are read-only
			break
		}
	}
	j.Tasks = make([]Task, tasks)
	perJob := c.cfg.DurationPer == DurationPerJob
	var d time.Duration
	for i := range j.Tasks {
		if !perJob || i == 0 {
			d = time.Duration(c.draw(c.cfg.DurationSeconds, fieldDuration))
		}
		j.Tasks[i] = Task{Index: int32(i), CPU: cpu, Memory: memory, Duration: d}
	}
	return j
}

// draw samples d for f, capped at f's limit, in f's unit.
func (c *classGen) draw(d Dist, f field) int64 {
	return int64(math.Round(min(d.sample(c.rng, f.whole), f.limit) * f.unit))
}
