package clientlib

import (
	"context"
	"fmt"
	"strings"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// JobLimitsPolicy names the ValidationPolicy that bounds what one job
// may ask for. A cell without a stored policy of that name is held to
// DefaultJobLimits by every client that loads the cell's policies (the
// CLI, when it applies or runs a job), and by the job controller, which
// creates no task of a job that breaks them (AdmissionRefused); storing
// one (`troupe apply`) replaces the defaults. Clients that only write
// what exists (the controllers' status writes) enforce the built-in
// rules alone, and the job controller checks a job only before its first
// tasks, so a limit lowered later never blocks a job already admitted.
const JobLimitsPolicy = "job-limits"

// AdmissionRefused begins a job's status.admission while the job
// controller creates none of its tasks because the job breaks rules of
// the cell's policies (job-limits among them, or the built-in ones); the
// rest lists the rules ("FIELD: MESSAGE (policy/NAME)", see FieldError).
// Editing the job or the policy so that it passes lets it proceed.
const AdmissionRefused = "refused: "

// JobRefused reports whether the job controller refuses j's tasks under
// the cell's policies (its status.admission begins with
// AdmissionRefused), rather than, say, holding them back for quota.
func JobRefused(j *troupev1.Job) bool {
	return strings.HasPrefix(j.GetStatus().GetAdmission(), AdmissionRefused)
}

// Default job limits: tasks per job, and requests per task.
const (
	DefaultMaxTasks  = 10_000
	DefaultMaxCPU    = 64_000    // millicores: 64 cores
	DefaultMaxMemory = 256 << 30 // bytes
)

// DefaultJobLimits returns the job limits a cell has until it stores its
// own: at most DefaultMaxTasks tasks, and DefaultMaxCPU cpu and
// DefaultMaxMemory memory per task.
func DefaultJobLimits() *troupev1.ValidationPolicy {
	request := func(r string, max int64) string {
		return fmt.Sprintf("!('%s' in object.spec.template.requests) || object.spec.template.requests['%s'] <= %d", r, r, max)
	}
	return &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: JobLimitsPolicy},
		Spec: &troupev1.ValidationPolicySpec{Kinds: []string{Jobs.Name}, Rules: []*troupev1.ValidationRule{
			{Expression: fmt.Sprintf("object.spec.count <= %d", DefaultMaxTasks), FieldPath: "spec.count",
				Message: fmt.Sprintf("a job has at most %d tasks (policy %s; store your own to change it)", DefaultMaxTasks, JobLimitsPolicy)},
			{Expression: request("cpu", DefaultMaxCPU), FieldPath: "spec.template.requests[cpu]",
				Message: fmt.Sprintf("a task asks for at most %s cpu (policy %s)", FormatQuantity("cpu", DefaultMaxCPU), JobLimitsPolicy)},
			{Expression: request("memory", DefaultMaxMemory), FieldPath: "spec.template.requests[memory]",
				Message: fmt.Sprintf("a task asks for at most %s memory (policy %s)", FormatQuantity("memory", DefaultMaxMemory), JobLimitsPolicy)},
		}}}
}

// withDefaultLimits returns ps with DefaultJobLimits unless one of them
// is the cell's own job limits.
func withDefaultLimits(ps []*troupev1.ValidationPolicy) []*troupev1.ValidationPolicy {
	for _, p := range ps {
		if p.GetMetadata().GetName() == JobLimitsPolicy {
			return ps
		}
	}
	return append(ps, DefaultJobLimits())
}

// LoadPolicies reads the cell's ValidationPolicies once and enforces them
// (with DefaultJobLimits unless the cell stores its own) on the typed
// writes through c from then on: what a one-shot client such as the CLI
// does before it writes; a long-running one follows them (StartPolicies).
func (c *Client) LoadPolicies(ctx context.Context) error {
	v, err := NewValidator()
	if err != nil {
		return err
	}
	if err := v.Load(ctx, c); err != nil {
		return fmt.Errorf("clientlib: load validation policies: %w", err)
	}
	c.validator.Store(v)
	return nil
}
