package clientlib

import (
	"errors"
	"fmt"
	"strings"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// FieldError is one broken rule: which field, which rule, and why.
type FieldError struct {
	Field   string // path in the object, such as "spec.template.requests[cpu]"
	Rule    string // short rule name, such as "non-negative"
	Message string
}

// String writes "FIELD: MESSAGE (RULE)", without "FIELD: " when the
// error is about no one field.
func (e FieldError) String() string {
	if e.Field == "" {
		return fmt.Sprintf("%s (%s)", e.Message, e.Rule)
	}
	return fmt.Sprintf("%s: %s (%s)", e.Field, e.Message, e.Rule)
}

// ValidationError lists every broken rule of one object.
type ValidationError struct {
	Kind, Object string
	Errors       []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.String()
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, e.Object, strings.Join(parts, "; "))
}

// ErrInvalid matches every *ValidationError and *ManifestError with
// errors.Is.
var ErrInvalid = errors.New("invalid object")

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// checker collects field errors.
type checker struct{ errs []FieldError }

func (c *checker) add(field, rule, format string, args ...any) {
	c.errs = append(c.errs, FieldError{Field: field, Rule: rule, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) check(ok bool, field, rule, format string, args ...any) {
	if !ok {
		c.add(field, rule, format, args...)
	}
}

// The name rules, matched by hand (a regular expression costs several
// times as much, and every object written is checked): TestNameRules
// holds them to their regular expressions.
//
//	dnsLabel      ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$
//	dnsSubdomain  dnsLabel(\.dnsLabel)*
//	labelName     ^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$
//	userName      ^[a-z_][-a-z0-9_]*\$?$  (a portable host user name, Debian's useradd default)
func isDNSLabel(s string) bool {
	if s == "" || !isLowerAlnum(s[0]) || !isLowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ { // by byte: no byte of a multi-byte rune is allowed
		if b := s[i]; b != '-' && !isLowerAlnum(b) {
			return false
		}
	}
	return true
}

func isDNSSubdomain(s string) bool {
	for {
		label, rest, more := strings.Cut(s, ".")
		if !isDNSLabel(label) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

func isLabelName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if b := s[i]; b != '-' && b != '_' && b != '.' && !isAlnum(b) {
			return false
		}
	}
	return true
}

func isUserName(s string) bool {
	s = strings.TrimSuffix(s, "$")
	if s == "" || (s[0] != '_' && (s[0] < 'a' || s[0] > 'z')) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if b := s[i]; b != '-' && b != '_' && !isLowerAlnum(b) {
			return false
		}
	}
	return true
}

func isLowerAlnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

func isAlnum(b byte) bool { return isLowerAlnum(b) || b >= 'A' && b <= 'Z' }

// name checks an object name: a DNS subdomain of at most 253 characters.
func (c *checker) name(field, s string) {
	switch {
	case s == "":
		c.add(field, "required", "must not be empty")
	case len(s) > 253 || !isDNSSubdomain(s):
		c.add(field, "dns-subdomain", "%q must be lowercase letters, digits, '-' and '.', starting and ending alphanumeric, at most 253 characters", s)
	}
}

// label checks a label key ("[prefix/]name") and value.
func (c *checker) label(field, key, value string, checkValue bool) {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		name = rest
		if len(prefix) > 253 || !isDNSSubdomain(prefix) {
			c.add(field+"["+key+"]", "label-key", "prefix %q must be a DNS subdomain", prefix)
		}
	}
	if len(name) > 63 || !isLabelName(name) {
		c.add(field+"["+key+"]", "label-key", "name %q must be 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric", name)
	}
	if checkValue && value != "" && (len(value) > 63 || !isLabelName(value)) {
		c.add(field+"["+key+"]", "label-value", "value %q must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric", value)
	}
}

// namespace checks a namespace: a DNS label.
func (c *checker) namespace(field, s string) {
	switch {
	case s == "":
		c.add(field, "required", "must not be empty")
	case len(s) > 63 || !isDNSLabel(s):
		c.add(field, "dns-label", "%q must be lowercase letters, digits and '-', at most 63 characters", s)
	}
}

// user checks the name of a host user a task may run as: never root.
func (c *checker) user(field, s string) {
	switch {
	case len(s) > 32 || !isUserName(s):
		c.add(field, "user-name", "%q must be a user name: lowercase letters, digits, '-' and '_', starting with a letter or '_', at most 32 characters", s)
	case s == "root":
		c.add(field, "not-root", "tasks never run as root")
	}
}

func (c *checker) meta(m *troupev1.ObjectMeta, namespaced bool, nameRule func(field, s string)) {
	if m == nil {
		c.add("metadata", "required", "must be set")
		return
	}
	nameRule("metadata.name", m.GetName())
	switch {
	case namespaced:
		c.namespace("metadata.namespace", m.GetNamespace())
	case m.GetNamespace() != "":
		c.add("metadata.namespace", "not-namespaced", "must be empty: the kind is not namespaced")
	}
	for k, v := range m.GetLabels() {
		c.label("metadata.labels", k, v, true)
	}
	for k := range m.GetAnnotations() {
		c.label("metadata.annotations", k, "", false)
	}
}

// Resource names: the built-in ones, or "<domain>/<name>" for extended
// resources.
var builtinResources = map[string]bool{"cpu": true, "memory": true, "gpu": true, "ephemeral-storage": true}

// resources checks a map of resources. Field paths are built only for
// an error: every task written is checked.
func (c *checker) resources(field string, r map[string]int64) {
	for name, v := range r {
		if !builtinResources[name] {
			domain, rest, ok := strings.Cut(name, "/")
			if !ok || !isDNSSubdomain(domain) || !isLabelName(rest) {
				c.add(field+"["+name+"]", "resource-name", "unknown resource %q: use cpu, memory, gpu, ephemeral-storage or <domain>/<name>", name)
			}
		}
		if v < 0 {
			c.add(field+"["+name+"]", "non-negative", "must not be negative, got %d", v)
		}
	}
}

func (c *checker) template(field string, t *troupev1.TaskTemplate) {
	if t == nil {
		c.add(field, "required", "must be set")
		return
	}
	if t.GetCommand() == "" {
		c.add(field+".command", "required", "must not be empty")
	}
	if r := t.GetRequests(); len(r) > 0 {
		c.resources(field+".requests", r)
	}
	if l := t.GetLimits(); len(l) > 0 {
		c.resources(field+".limits", l)
	}
	for name, limit := range t.GetLimits() {
		if req, ok := t.GetRequests()[name]; ok && req > limit {
			c.add(field+".requests["+name+"]", "requests-within-limits", "request %s exceeds limit %s", FormatQuantity(name, req), FormatQuantity(name, limit))
		}
	}
	for k := range t.GetEnv() {
		c.check(k != "" && !strings.ContainsAny(k, "=\x00"), field+".env["+k+"]", "env-name", "environment variable names must be non-empty, without '=' or NUL")
	}
	if t.GetSimDuration().AsDuration() < 0 {
		c.add(field+".sim_duration", "non-negative", "must not be negative")
	}
	if u := t.GetUser(); u != "" {
		c.user(field+".user", u)
	}
	if h := t.GetHealthCheck(); h != nil {
		f := field + ".health_check"
		c.check(h.GetCommand() != "", f+".command", "required", "must not be empty")
		c.check(h.GetInterval().AsDuration() >= 0, f+".interval", "non-negative", "must not be negative")
		c.check(h.GetTimeout().AsDuration() >= 0, f+".timeout", "non-negative", "must not be negative")
	}
}

// update checks a job's update strategy: counts and durations are never
// negative, canaries never outnumber the job, and only service jobs roll.
func (c *checker) update(s *troupev1.JobSpec) {
	u := s.GetUpdate()
	if u == nil {
		return
	}
	c.check(s.GetType() == troupev1.JobType_JOB_TYPE_SERVICE, "spec.update", "service-only", "only service jobs have rolling updates (a batch job's template change reaches its tasks not yet placed)")
	c.check(u.GetMaxUnavailable() >= 0, "spec.update.max_unavailable", "non-negative", "must not be negative, got %d", u.GetMaxUnavailable())
	c.check(u.GetMaxSurge() >= 0, "spec.update.max_surge", "non-negative", "must not be negative, got %d", u.GetMaxSurge())
	c.check(u.GetCanary() >= 0 && u.GetCanary() <= s.GetCount(), "spec.update.canary", "range", "must be in [0, count], got %d", u.GetCanary())
	c.check(u.GetMinHealthy().AsDuration() >= 0, "spec.update.min_healthy", "non-negative", "must not be negative")
	c.check(u.GetProgressDeadline().AsDuration() >= 0, "spec.update.progress_deadline", "non-negative", "must not be negative")
}

func (c *checker) scheduling(field string, cons *troupev1.Constraints, tols []*troupev1.Toleration) {
	for k, v := range cons.GetMatchLabels() {
		c.label(field+".constraints.match_labels", k, v, true)
	}
	for i, r := range cons.GetMatchExpressions() {
		f := fmt.Sprintf("%s.constraints.match_expressions[%d]", field, i)
		c.label(f+".key", r.GetKey(), "", false)
		switch r.GetOperator() {
		case troupev1.LabelOperator_LABEL_OPERATOR_IN, troupev1.LabelOperator_LABEL_OPERATOR_NOT_IN:
			c.check(len(r.GetValues()) > 0, f+".values", "required", "In and NotIn need values")
		case troupev1.LabelOperator_LABEL_OPERATOR_EXISTS, troupev1.LabelOperator_LABEL_OPERATOR_DOES_NOT_EXIST:
			c.check(len(r.GetValues()) == 0, f+".values", "forbidden", "Exists and DoesNotExist take no values")
		default:
			c.add(f+".operator", "required", "must be In, NotIn, Exists or DoesNotExist")
		}
	}
	if l := cons.GetSpreadLabel(); l != "" {
		c.label(field+".constraints.spread_label", l, "", false)
	}
	for i, t := range tols {
		f := fmt.Sprintf("%s.tolerations[%d]", field, i)
		if t.GetOperator() == troupev1.TolerationOperator_TOLERATION_OPERATOR_EXISTS {
			c.check(t.GetValue() == "", f+".value", "forbidden", "Exists takes no value")
		} else {
			c.check(t.GetKey() != "", f+".key", "required", "must not be empty unless the operator is Exists")
		}
	}
}

// machineName checks a machine's name (not with check, whose boxed
// argument costs an allocation for every task bound and read).
func (c *checker) machineName(field, s string) {
	if s == "" || len(s) > 253 || !isDNSSubdomain(s) {
		c.add(field, "dns-subdomain", "machine %q must be a DNS subdomain", s)
	}
}

// validateKind runs the built-in structural rules of one kind.
func validateKind(obj Object) []FieldError {
	c := &checker{}
	switch o := obj.(type) {
	case *troupev1.Machine:
		c.meta(o.GetMetadata(), false, c.name)
		caps := o.GetSpec().GetCapacity()
		c.resources("spec.capacity", caps)
		for _, r := range []string{"cpu", "memory"} {
			c.check(caps[r] > 0, "spec.capacity["+r+"]", "required", "must be positive")
		}
		for i, t := range o.GetSpec().GetTaints() {
			f := fmt.Sprintf("spec.taints[%d]", i)
			c.label(f+".key", t.GetKey(), t.GetValue(), true)
			c.check(t.GetEffect() != troupev1.TaintEffect_TAINT_EFFECT_UNSPECIFIED, f+".effect", "required", "must be set")
		}
	case *troupev1.Lease:
		c.meta(o.GetMetadata(), false, c.name)
		c.check(o.GetHolder() != "", "holder", "required", "must not be empty")
		c.check(o.GetDuration().AsDuration() > 0, "duration", "positive", "must be positive")
	case *troupev1.Job:
		c.meta(o.GetMetadata(), true, c.name)
		s := o.GetSpec()
		c.check(s.GetCount() >= 1 && s.GetCount() <= 1_000_000, "spec.count", "range", "must be in [1, 1000000], got %d", s.GetCount())
		c.check(s.GetPriority() >= 0 && s.GetPriority() <= 1000, "spec.priority", "range", "must be in [0, 1000], got %d", s.GetPriority())
		c.check(s.GetGangMin() >= 0 && s.GetGangMin() <= s.GetCount(), "spec.gang_min", "range", "must be in [0, count], got %d", s.GetGangMin())
		c.check(s.GetMaxRetries() >= 0, "spec.max_retries", "non-negative", "must not be negative")
		c.check(s.GetRetryBackoff().AsDuration() >= 0, "spec.retry_backoff", "non-negative", "must not be negative")
		c.template("spec.template", s.GetTemplate())
		c.update(s)
		c.scheduling("spec", s.GetConstraints(), s.GetTolerations())
	case *troupev1.Task:
		c.meta(o.GetMetadata(), true, c.name)
		s := o.GetSpec()
		c.name("spec.job", s.GetJob())
		c.check(s.GetIndex() >= 0, "spec.index", "non-negative", "must not be negative")
		c.template("spec.template", s.GetTemplate())
		c.scheduling("spec", s.GetConstraints(), s.GetTolerations())
		if b := o.GetBinding(); b != nil {
			c.machineName("binding.machine", b.GetMachine())
		}
	case *troupev1.Binding:
		c.meta(o.GetMetadata(), false, func(field, s string) {
			_, err := taskRef(s)
			c.check(err == nil, field, "task-ref", "must be <namespace>/<job>/<index>")
		})
		c.machineName("machine", o.GetMachine())
		c.template("task.template", o.GetTask().GetTemplate())
	case *troupev1.Run:
		c.meta(o.GetMetadata(), false, func(field, s string) {
			_, err := taskRef(s)
			c.check(err == nil, field, "task-ref", "must be <namespace>/<job>/<index>")
		})
		c.machineName("machine", o.GetMachine())
		c.check(o.GetPhase() != troupev1.RunPhase_RUN_PHASE_UNSPECIFIED, "phase", "required", "must be set")
		c.check(o.GetRestarts() >= 0, "restarts", "non-negative", "must not be negative")
	case *troupev1.SchedulerInfo:
		c.meta(o.GetMetadata(), false, c.name)
		c.check(o.GetKind() != "", "kind", "required", "must not be empty")
	case *troupev1.ValidationPolicy:
		c.meta(o.GetMetadata(), false, c.name)
		c.check(len(o.GetSpec().GetKinds()) > 0, "spec.kinds", "required", "must name at least one kind")
		for i, k := range o.GetSpec().GetKinds() {
			c.check(kindNames[k], fmt.Sprintf("spec.kinds[%d]", i), "known-kind", "unknown kind %q", k)
		}
		c.check(len(o.GetSpec().GetRules()) > 0, "spec.rules", "required", "must have at least one rule")
		for i, r := range o.GetSpec().GetRules() {
			c.check(r.GetExpression() != "", fmt.Sprintf("spec.rules[%d].expression", i), "required", "must not be empty")
		}
	case *troupev1.RunAsPolicy:
		c.meta(o.GetMetadata(), false, c.namespace)
		c.check(len(o.GetSpec().GetUsers()) > 0, "spec.users", "required", "must list at least one user (delete the policy to allow only the default task user)")
		for i, u := range o.GetSpec().GetUsers() {
			c.user(fmt.Sprintf("spec.users[%d]", i), u)
		}
	case *troupev1.Quota:
		c.quota(o)
	case *troupev1.JobScheduling:
		c.meta(o.GetMetadata(), true, c.name)
	case *troupev1.Event:
		c.event(o)
	default:
		c.add("", "known-kind", "unknown kind %T", obj)
	}
	return c.errs
}

// event checks an Event: what it involves decides where it is stored.
func (c *checker) event(e *troupev1.Event) {
	kind, name, job := e.GetInvolvedKind(), e.GetInvolvedName(), e.GetJob()
	c.meta(e.GetMetadata(), kind != Machines.Name, c.name)
	switch kind {
	case Jobs.Name:
		c.name("involved_name", name)
		c.check(job == name, "job", "involved-job", "must be the involved job %q, got %q", name, job)
	case Tasks.Name:
		c.name("involved_name", name)
		c.name("job", job)
		c.check(strings.HasPrefix(name, job+"-"), "involved_name", "task-name", "task %q is not one of job %q (<job>-<index>)", name, job)
	case Machines.Name:
		c.machineName("involved_name", name)
		c.check(job == "", "job", "forbidden", "must be empty for a machine's event")
	default:
		c.add("involved_kind", "known-kind", "must be Job, Task or Machine, got %q", kind)
	}
	c.check(e.GetType() == EventNormal || e.GetType() == EventWarning, "type", "event-type", "must be %s or %s, got %q", EventNormal, EventWarning, e.GetType())
	c.check(e.GetReason() != "", "reason", "required", "must not be empty")
	c.check(e.GetCount() >= 1, "count", "positive", "must be at least 1, got %d", e.GetCount())
}

var kindNames = map[string]bool{
	Machines.Name: true, Leases.Name: true, Jobs.Name: true, Tasks.Name: true, Bindings.Name: true,
	Runs.Name: true, Schedulers.Name: true, ValidationPolicies.Name: true, RunAsPolicies.Name: true, Events.Name: true,
}

// Default fills in the defaults of obj, in place.
func Default(obj Object) {
	switch o := obj.(type) {
	case *troupev1.Job:
		if o.Spec == nil {
			o.Spec = &troupev1.JobSpec{}
		}
		s := o.Spec
		if s.Type == troupev1.JobType_JOB_TYPE_UNSPECIFIED {
			s.Type = troupev1.JobType_JOB_TYPE_BATCH
		}
		if s.Count == 0 {
			s.Count = 1
		}
		if s.Scheduler == "" {
			s.Scheduler = map[troupev1.JobType]string{troupev1.JobType_JOB_TYPE_BATCH: "batch", troupev1.JobType_JOB_TYPE_SERVICE: "service"}[s.Type]
			if s.GangMin > 0 {
				s.Scheduler = "gang"
			}
		}
		if s.RestartPolicy == troupev1.RestartPolicy_RESTART_POLICY_UNSPECIFIED {
			s.RestartPolicy = troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE
			if s.Type == troupev1.JobType_JOB_TYPE_SERVICE {
				s.RestartPolicy = troupev1.RestartPolicy_RESTART_POLICY_ALWAYS
			}
		}
	case *troupev1.Machine:
		if o.Status == nil {
			o.Status = &troupev1.MachineStatus{Phase: troupev1.MachinePhase_MACHINE_PHASE_READY}
		}
	}
}

// hasDefaults reports whether Default may change obj: only the kinds it
// fills in (a write of any other kind need not copy the object first).
func hasDefaults(obj Object) bool {
	switch obj.(type) {
	case *troupev1.Job, *troupev1.Machine:
		return true
	}
	return false
}

// Validate checks obj against the built-in rules of its kind, structural
// and CEL.
func Validate[T Object](k Kind[T], obj T) error {
	v, err := defaultValidator()
	if err != nil {
		return err
	}
	return ValidateWith(v, k, obj)
}

// ValidateWith checks obj against the structural rules of its kind and
// the CEL rules v enforces (built-in and from policies), and lists every
// rule it breaks.
func ValidateWith[T Object](v *Validator, k Kind[T], obj T) error {
	if errs := v.validate(k.Name, obj); len(errs) > 0 {
		return &ValidationError{Kind: k.Name, Object: objectName(obj), Errors: errs}
	}
	return nil
}

// validate returns the rules obj, of the kind named kind, breaks: the
// structural ones of its kind, then the CEL ones.
func (v *Validator) validate(kind string, obj Object) []FieldError {
	errs := validateKind(obj)
	// Protobuf strings are UTF-8: the encoding the library uses does not
	// check, and readers that do (protojson, protobuf-go) would fail on
	// the stored object.
	if p := obj.InvalidUTF8(); p != "" {
		errs = append(errs, FieldError{Field: p, Rule: "utf8", Message: "must be valid UTF-8"})
	}
	return append(errs, v.check(kind, obj)...)
}

func objectName(obj Object) string {
	m := obj.GetMetadata()
	if m.GetNamespace() != "" {
		return m.GetNamespace() + "/" + m.GetName()
	}
	return m.GetName()
}
