// Package celconstraint is the CELConstraint filter: a task's
// constraints.cel is a CEL expression over `machine` (the machine's
// troupe.v1.Machine object) that must be true for the task to run there,
// for example
//
//	machine.metadata.labels['arch'] == 'arm64' && machine.spec.capacity['gpu'] >= 2
//
// Each distinct expression is compiled once and cached (by its text, up
// to Config.MaxPrograms of them); evaluation is optimized and bounded by
// Config.CostLimit. An expression that does not compile, does not yield a
// bool, fails at run time (a missing map key, say: write
// `'k' in machine.metadata.labels && ...`) or exceeds the cost limit gives
// an Error status naming it: the job is wrong, not the cell. Clients
// already reject jobs whose expression does not compile (clientlib's
// Validator), so compile errors here are a backstop.
package celconstraint

import (
	"errors"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// Name is the plugin's name in statuses.
const Name = "CELConstraint"

// Config sets the plugin's limits.
type Config struct {
	// CostLimit bounds one evaluation, in cel-go cost units (roughly
	// operations).
	CostLimit uint64
	// MaxPrograms bounds the cache of compiled expressions; when it is
	// full an arbitrary entry is dropped to make room.
	MaxPrograms int
}

// DefaultConfig returns the limits the schedulers use: clientlib's cost
// limit for validation rules, and room for a thousand distinct
// expressions.
func DefaultConfig() Config {
	return Config{CostLimit: 100000, MaxPrograms: 1024}
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.CostLimit == 0 {
		errs = append(errs, errors.New("celconstraint: CostLimit must be > 0"))
	}
	if c.MaxPrograms <= 0 {
		errs = append(errs, fmt.Errorf("celconstraint: MaxPrograms must be > 0, got %d", c.MaxPrograms))
	}
	return errors.Join(errs...)
}

// CELConstraint refuses machines on which the task's constraints.cel is
// false. It is Static (the expression sees only the machine object) and
// safe for concurrent use.
type CELConstraint struct {
	cfg Config
	env *cel.Env

	mu       sync.Mutex
	programs map[string]*program

	compiles int // expressions compiled, for tests; guarded by mu
}

// program is one cached expression, compiled once by whoever asks first.
type program struct {
	once sync.Once
	prg  cel.Program
	err  error
}

var (
	_ framework.FilterPlugin = (*CELConstraint)(nil)
	_ framework.Static       = (*CELConstraint)(nil)
)

// New returns the plugin with the CEL environment of job constraints: one
// variable, `machine`, of type troupe.v1.Machine.
func New(cfg Config) (*CELConstraint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	env, err := cel.NewEnv(cel.Types(&troupev1.Machine{}), cel.Variable("machine", cel.ObjectType("troupe.v1.Machine")))
	if err != nil {
		return nil, fmt.Errorf("celconstraint: environment: %w", err)
	}
	return &CELConstraint{cfg: cfg, env: env, programs: map[string]*program{}}, nil
}

// Name returns "CELConstraint".
func (*CELConstraint) Name() string { return Name }

// Static marks the verdict as depending only on the task's constraints and
// the machine object.
func (*CELConstraint) Static() {}

// Filter evaluates the task's constraints.cel on m.Object. A task without
// an expression fits every machine.
func (p *CELConstraint) Filter(t *framework.Task, m *framework.Machine) *framework.Status {
	expr := t.Task.GetSpec().GetConstraints().GetCel()
	if expr == "" {
		return nil
	}
	prg, err := p.program(expr)
	if err != nil {
		return framework.NewStatus(framework.Error, Name, fmt.Sprintf("constraint %q does not compile: %v", expr, err))
	}
	if m.Object == nil {
		return framework.NewStatus(framework.Error, Name, fmt.Sprintf("constraint %q: machine %s has no object to evaluate it on", expr, m.Name))
	}
	out, _, err := prg.Eval(map[string]any{"machine": m.Object})
	if err != nil {
		return framework.NewStatus(framework.Error, Name, fmt.Sprintf("constraint %q could not be evaluated on machine %s: %v", expr, m.Name, err))
	}
	switch out {
	case types.True:
		return nil
	case types.False:
		return framework.NewStatus(framework.Unschedulable, Name, fmt.Sprintf("constraint %q is false", expr))
	default: // the compiler checked for bool; a backstop
		return framework.NewStatus(framework.Error, Name, fmt.Sprintf("constraint %q yields %v, not a bool", expr, out))
	}
}

// program returns the compiled expr, compiling it on first use. Callers
// asking for the same expression concurrently wait for one compilation.
func (p *CELConstraint) program(expr string) (cel.Program, error) {
	p.mu.Lock()
	e, ok := p.programs[expr]
	if !ok {
		if len(p.programs) >= p.cfg.MaxPrograms {
			for k := range p.programs {
				delete(p.programs, k)
				break
			}
		}
		e = &program{}
		p.programs[expr] = e
	}
	p.mu.Unlock()
	e.once.Do(func() {
		e.prg, e.err = p.compile(expr)
		p.mu.Lock()
		p.compiles++
		p.mu.Unlock()
	})
	return e.prg, e.err
}

func (p *CELConstraint) compile(expr string) (cel.Program, error) {
	ast, iss := p.env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("yields %v, not bool", ast.OutputType())
	}
	return p.env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(p.cfg.CostLimit))
}
