package clientlib

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/interpreter"

	"github.com/troupe-cluster/troupe/clientlib/cache"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// celCostLimit bounds one rule's evaluation (cel-go cost units, roughly
// operations).
const celCostLimit = 100000

// A rule is one compiled CEL expression over `object` that must be true.
type rule struct {
	source  string // "builtin" or "policy/<name>"
	expr    string
	message string
	field   string
	prg     cel.Program
}

// builtinRules are the CEL rules every client enforces, by kind.
var builtinRules = map[string][]*troupev1.ValidationRule{
	"Job": {
		{Expression: "object.spec.gang_min == 0 || object.spec.scheduler == 'gang'",
			Message: "jobs with gang_min > 0 go to the gang scheduler", FieldPath: "spec.scheduler"},
		{Expression: "object.spec.type != troupe.v1.JobType.JOB_TYPE_SERVICE || object.spec.restart_policy != troupe.v1.RestartPolicy.RESTART_POLICY_NEVER",
			Message: "a service's tasks are restarted: restart_policy NEVER is for batch jobs", FieldPath: "spec.restart_policy"},
	},
	// None for Task: that a binding names its machine is the structural
	// rule on binding.machine (a DNS subdomain), and a CEL evaluation per
	// task cost as much as the structural rules together (every task a
	// scheduler binds or a cache reads is checked).
}

// kindTypes maps kind names to their protobuf message names.
var kindTypes = map[string]string{
	"Machine": "troupe.v1.Machine", "Lease": "troupe.v1.Lease", "Job": "troupe.v1.Job", "Task": "troupe.v1.Task",
	"Binding": "troupe.v1.Binding", "Run": "troupe.v1.Run", "SchedulerInfo": "troupe.v1.SchedulerInfo",
	"ValidationPolicy": "troupe.v1.ValidationPolicy", "RunAsPolicy": "troupe.v1.RunAsPolicy", "Event": "troupe.v1.Event",
}

// Validator enforces CEL rules on writes: the built-in rules of each kind
// and the rules of the ValidationPolicy objects stored in the cell, so
// that every client applies the same rules. Programs are compiled once
// (per policy version) and evaluated optimized under a cost limit. It is
// safe for concurrent use.
type Validator struct {
	envs    map[string]*cel.Env // by kind: `object` of that kind
	machine *cel.Env            // `machine`, for job constraints
	builtin map[string][]rule

	mu       sync.RWMutex
	policies map[string][]rule // by kind
	loaded   map[string]uint64 // policy name → version compiled
}

// NewValidator compiles the built-in rules.
func NewValidator() (*Validator, error) {
	v := &Validator{envs: map[string]*cel.Env{}, builtin: map[string][]rule{}, policies: map[string][]rule{}, loaded: map[string]uint64{}}
	types := cel.Types(&troupev1.Machine{}, &troupev1.Lease{}, &troupev1.Job{}, &troupev1.Task{}, &troupev1.Binding{},
		&troupev1.Run{}, &troupev1.SchedulerInfo{}, &troupev1.ValidationPolicy{}, &troupev1.RunAsPolicy{}, &troupev1.Event{})
	for kind, msg := range kindTypes {
		env, err := cel.NewEnv(types, cel.Variable("object", cel.ObjectType(msg)))
		if err != nil {
			return nil, fmt.Errorf("cel environment for %s: %w", kind, err)
		}
		v.envs[kind] = env
	}
	env, err := cel.NewEnv(types, cel.Variable("machine", cel.ObjectType("troupe.v1.Machine")))
	if err != nil {
		return nil, err
	}
	v.machine = env
	for kind, rs := range builtinRules {
		for _, r := range rs {
			compiled, err := v.compile(kind, "builtin", r)
			if err != nil {
				return nil, err
			}
			v.builtin[kind] = append(v.builtin[kind], compiled)
		}
	}
	return v, nil
}

var defaultValidator = sync.OnceValues(NewValidator)

// compile compiles one rule for kind; it must yield a bool.
func (v *Validator) compile(kind, source string, r *troupev1.ValidationRule) (rule, error) {
	env, ok := v.envs[kind]
	if !ok {
		return rule{}, fmt.Errorf("%s: unknown kind %q", source, kind)
	}
	prg, err := compileBool(env, r.GetExpression())
	if err != nil {
		return rule{}, fmt.Errorf("%s: rule %q: %w", source, r.GetExpression(), err)
	}
	return rule{source: source, expr: r.GetExpression(), message: r.GetMessage(), field: r.GetFieldPath(), prg: prg}, nil
}

func compileBool(env *cel.Env, expr string) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("yields %v, not bool", ast.OutputType())
	}
	return env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(celCostLimit))
}

// SetPolicies replaces the policies the validator enforces: ps, and
// DefaultJobLimits unless ps holds the cell's own (JobLimitsPolicy).
// Policies it already compiled at the same version are not compiled
// again. A policy whose rules do not compile is left out and reported in
// the error; the others are enforced.
func (v *Validator) SetPolicies(ps []*troupev1.ValidationPolicy) error {
	ps = withDefaultLimits(ps)
	v.mu.RLock()
	prev, prevLoaded := v.policies, v.loaded
	v.mu.RUnlock()
	policies, loaded := map[string][]rule{}, map[string]uint64{}
	var errs []error
	sort.Slice(ps, func(i, j int) bool { return ps[i].GetMetadata().GetName() < ps[j].GetMetadata().GetName() })
	for _, p := range ps {
		name := p.GetMetadata().GetName()
		source := "policy/" + name
		if prevLoaded[name] == p.GetMetadata().GetVersion() && p.GetMetadata().GetVersion() != 0 {
			for kind, rs := range prev {
				for _, r := range rs {
					if r.source == source {
						policies[kind] = append(policies[kind], r)
					}
				}
			}
			loaded[name] = p.GetMetadata().GetVersion()
			continue
		}
		compiled, err := v.compilePolicy(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for kind, rs := range compiled {
			policies[kind] = append(policies[kind], rs...)
		}
		loaded[name] = p.GetMetadata().GetVersion()
	}
	v.mu.Lock()
	v.policies, v.loaded = policies, loaded
	v.mu.Unlock()
	return errors.Join(errs...)
}

func (v *Validator) compilePolicy(p *troupev1.ValidationPolicy) (map[string][]rule, error) {
	source := "policy/" + p.GetMetadata().GetName()
	out := map[string][]rule{}
	var errs []error
	for _, kind := range p.GetSpec().GetKinds() {
		for _, r := range p.GetSpec().GetRules() {
			compiled, err := v.compile(kind, source, r)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[kind] = append(out[kind], compiled)
		}
	}
	return out, errors.Join(errs...)
}

// Loaded returns the policies enforced, by name, with the version
// compiled.
func (v *Validator) Loaded() map[string]uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return maps.Clone(v.loaded)
}

// Load reads the ValidationPolicy objects stored in s and enforces them.
func (v *Validator) Load(ctx context.Context, s Store) error {
	ps, _, err := List(ctx, s, ValidationPolicies, "")
	if err != nil {
		return err
	}
	return v.SetPolicies(ps)
}

// Follow keeps v enforcing the ValidationPolicies inf holds, inf being
// an informer of them (NewInformer(s, ValidationPolicies, "", nil)): at
// once (before inf has listed anything: DefaultJobLimits alone), then
// each time inf adds, changes or drops one, before the handlers added to
// inf after Follow run. changed, if set, is called after each of these
// with what SetPolicies returned (the policies left out as they do not
// compile): a long-running component that judges with v re-judges what
// it held back.
func (v *Validator) Follow(inf *cache.Informer[*troupev1.ValidationPolicy], changed func(error)) {
	reload := func() {
		err := v.SetPolicies(inf.Indexer().List())
		if changed != nil {
			changed(err)
		}
	}
	reload()
	inf.AddHandler(cache.Handler[*troupev1.ValidationPolicy]{
		OnAdd:    func(string, *troupev1.ValidationPolicy) { reload() },
		OnUpdate: func(string, *troupev1.ValidationPolicy, *troupev1.ValidationPolicy) { reload() },
		OnDelete: func(string, *troupev1.ValidationPolicy) { reload() },
	})
}

// check evaluates the CEL rules of kind on obj, and the rules that are CEL
// about CEL: a policy's expressions and a job's constraint must compile.
func (v *Validator) check(kind string, obj Object) []FieldError {
	v.mu.RLock()
	builtin, policies := v.builtin[kind], v.policies[kind] // never changed once published: policies are replaced whole
	v.mu.RUnlock()
	var errs []FieldError
	var vars interpreter.Activation // made for the first rule: a kind may have none
	for _, rules := range [2][]rule{builtin, policies} {
		for _, r := range rules {
			if vars == nil {
				vars = objectVar{obj}
			}
			out, _, err := r.prg.Eval(vars)
			switch {
			case err != nil:
				errs = append(errs, FieldError{Field: r.field, Rule: r.source, Message: fmt.Sprintf("rule %q could not be evaluated: %v", r.expr, err)})
			case out.Value() != true:
				msg := r.message
				if msg == "" {
					msg = fmt.Sprintf("rule %q is false", r.expr)
				}
				errs = append(errs, FieldError{Field: r.field, Rule: r.source, Message: msg})
			}
		}
	}
	switch o := obj.(type) {
	case *troupev1.ValidationPolicy:
		if _, err := v.compilePolicy(o); err != nil {
			errs = append(errs, FieldError{Field: "spec.rules", Rule: "cel-compiles", Message: err.Error()})
		}
	case *troupev1.Job:
		if expr := o.GetSpec().GetConstraints().GetCel(); expr != "" {
			if _, err := compileBool(v.machine, expr); err != nil {
				errs = append(errs, FieldError{Field: "spec.constraints.cel", Rule: "cel-compiles", Message: err.Error()})
			}
		}
	}
	return errs
}

// objectVar binds the rules' one variable, `object`, without the map an
// activation of several takes (every object written is checked).
type objectVar struct{ obj Object }

func (a objectVar) ResolveName(name string) (any, bool) {
	if name == "object" {
		return a.obj, true
	}
	return nil, false
}

func (objectVar) Parent() interpreter.Activation { return nil }

// validatorOf returns the validator a Store carries (see WithValidator),
// or the built-in one.
func validatorOf(s Store) (*Validator, error) {
	if vs, ok := s.(interface{ Validator() *Validator }); ok && vs.Validator() != nil {
		return vs.Validator(), nil
	}
	return defaultValidator()
}

// WithValidator returns s with v as the validator its typed writes use.
func WithValidator(s Store, v *Validator) Store { return validatedStore{s, v} }

type validatedStore struct {
	Store
	v *Validator
}

func (s validatedStore) Validator() *Validator { return s.v }
