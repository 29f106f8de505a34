package clientlib_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func validJob() *troupev1.Job {
	return &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: "web", Namespace: "prod"}, Spec: &troupev1.JobSpec{
		Count: 3, Priority: 100,
		Template: &troupev1.TaskTemplate{Command: "/bin/web",
			Requests: map[string]int64{"cpu": 500, "memory": 1 << 20},
			Limits:   map[string]int64{"cpu": 1000}},
	}}
}

func validMachine() *troupev1.Machine {
	return &troupev1.Machine{Metadata: &troupev1.ObjectMeta{Name: "m1.rack-a"}, Spec: &troupev1.MachineSpec{
		Capacity: map[string]int64{"cpu": 4000, "memory": 8 << 30, "example.com/fpga": 1}}}
}

// wantInvalid asserts that err is a *ValidationError with a field error on
// field for rule.
func wantInvalid(t *testing.T, what string, err error, field, rule string) {
	t.Helper()
	var ve *clientlib.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, clientlib.ErrInvalid) {
		t.Fatalf("%s: %v, want a validation error", what, err)
	}
	for _, fe := range ve.Errors {
		if fe.Field == field && fe.Rule == rule {
			if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), ve.Object) {
				t.Fatalf("%s: message %q does not name the object and field", what, err)
			}
			return
		}
	}
	t.Fatalf("%s: %v, want %s on %s", what, err, rule, field)
}

func TestValidationRules(t *testing.T) {
	if err := clientlib.Validate(clientlib.Jobs, validJob()); err != nil {
		t.Fatalf("valid job: %v", err)
	}
	if err := clientlib.Validate(clientlib.Machines, validMachine()); err != nil {
		t.Fatalf("valid machine: %v", err)
	}
	job := func(edit func(*troupev1.Job)) *troupev1.Job {
		j := validJob()
		edit(j)
		return j
	}
	service := func(u *troupev1.UpdateStrategy) *troupev1.Job {
		return job(func(j *troupev1.Job) { j.Spec.Type = troupev1.JobType_JOB_TYPE_SERVICE; j.Spec.Update = u })
	}
	machine := func(edit func(*troupev1.Machine)) *troupev1.Machine {
		m := validMachine()
		edit(m)
		return m
	}
	for _, tc := range []struct {
		name, field, rule string
		err               error
	}{
		{"bad name", "metadata.name", "dns-subdomain", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Metadata.Name = "Web_1" }))},
		{"no namespace", "metadata.namespace", "required", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Metadata.Namespace = "" }))},
		{"namespace on machine", "metadata.namespace", "not-namespaced", clientlib.Validate(clientlib.Machines, machine(func(m *troupev1.Machine) { m.Metadata.Namespace = "x" }))},
		{"label key", "metadata.labels[-bad]", "label-key", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Metadata.Labels = map[string]string{"-bad": "x"} }))},
		{"label value", "metadata.labels[team]", "label-value", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Metadata.Labels = map[string]string{"team": "a b"} }))},
		{"negative request", "spec.template.requests[cpu]", "non-negative", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Template.Requests["cpu"] = -1 }))},
		{"unknown resource", "spec.template.requests[gpus]", "resource-name", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Template.Requests["gpus"] = 1 }))},
		{"request over limit", "spec.template.requests[cpu]", "requests-within-limits", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Template.Requests["cpu"] = 2000 }))},
		{"command not UTF-8", "spec.template.command", "utf8", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Template.Command = "/bin/\xff" }))},
		{"no command", "spec.template.command", "required", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Template.Command = "" }))},
		{"count", "spec.count", "range", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Count = 0 }))},
		{"priority", "spec.priority", "range", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Priority = 5000 }))},
		{"gang", "spec.gang_min", "range", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.GangMin = 9 }))},
		{"update of a batch job", "spec.update", "service-only", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Update = &troupev1.UpdateStrategy{MaxSurge: 1} }))},
		{"negative surge", "spec.update.max_surge", "non-negative", clientlib.Validate(clientlib.Jobs, service(&troupev1.UpdateStrategy{MaxSurge: -1}))},
		{"negative unavailable", "spec.update.max_unavailable", "non-negative", clientlib.Validate(clientlib.Jobs, service(&troupev1.UpdateStrategy{MaxUnavailable: -2}))},
		{"canaries over count", "spec.update.canary", "range", clientlib.Validate(clientlib.Jobs, service(&troupev1.UpdateStrategy{Canary: 4}))},
		{"negative min healthy", "spec.update.min_healthy", "non-negative", clientlib.Validate(clientlib.Jobs, service(&troupev1.UpdateStrategy{MinHealthy: durationpb.New(-time.Second)}))},
		{"negative deadline", "spec.update.progress_deadline", "non-negative", clientlib.Validate(clientlib.Jobs, service(&troupev1.UpdateStrategy{ProgressDeadline: durationpb.New(-time.Minute)}))},
		{"empty health check", "spec.template.health_check.command", "required", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Template.HealthCheck = &troupev1.HealthCheck{} }))},
		{"negative check timeout", "spec.template.health_check.timeout", "non-negative", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) {
			j.Spec.Template.HealthCheck = &troupev1.HealthCheck{Command: "/bin/true", Timeout: durationpb.New(-time.Second)}
		}))},
		{"selector", "spec.constraints.match_expressions[0].values", "required", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) {
			j.Spec.Constraints = &troupev1.Constraints{MatchExpressions: []*troupev1.LabelRequirement{{Key: "zone", Operator: troupev1.LabelOperator_LABEL_OPERATOR_IN}}}
		}))},
		{"toleration", "spec.tolerations[0].key", "required", clientlib.Validate(clientlib.Jobs, job(func(j *troupev1.Job) { j.Spec.Tolerations = []*troupev1.Toleration{{Value: "x"}} }))},
		{"capacity", "spec.capacity[memory]", "required", clientlib.Validate(clientlib.Machines, machine(func(m *troupev1.Machine) { delete(m.Spec.Capacity, "memory") }))},
		{"taint effect", "spec.taints[0].effect", "required", clientlib.Validate(clientlib.Machines, machine(func(m *troupev1.Machine) { m.Spec.Taints = []*troupev1.Taint{{Key: "dedicated"}} }))},
		{"task bound to no machine", "binding.machine", "dns-subdomain", clientlib.Validate(clientlib.Tasks, &troupev1.Task{Metadata: &troupev1.ObjectMeta{Name: "web-0", Namespace: "prod"},
			Spec: &troupev1.TaskSpec{Job: "web", Template: &troupev1.TaskTemplate{Command: "x"}}, Binding: &troupev1.TaskBinding{Scheduler: "batch-0"}})},
		{"run phase", "phase", "required", clientlib.Validate(clientlib.Runs, &troupev1.Run{Metadata: &troupev1.ObjectMeta{Name: "prod/web/0"}, Machine: "m1"})},
		{"binding name", "metadata.name", "task-ref", clientlib.Validate(clientlib.Bindings, &troupev1.Binding{Metadata: &troupev1.ObjectMeta{Name: "web"}, Machine: "m1", Task: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: "x"}}})},
		{"policy kind", "spec.kinds[0]", "known-kind", clientlib.Validate(clientlib.ValidationPolicies, &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: "p"},
			Spec: &troupev1.ValidationPolicySpec{Kinds: []string{"Jobz"}, Rules: []*troupev1.ValidationRule{{Expression: "true"}}}})},
	} {
		wantInvalid(t, tc.name, tc.err, tc.field, tc.rule)
	}
}

func TestDefaultsAndCreateValidates(t *testing.T) {
	ctx := context.Background()
	s := newMem()
	j := validJob()
	j.Spec.Count = 0 // defaults to 1
	created, err := clientlib.Create(ctx, s, clientlib.Jobs, j)
	if err != nil {
		t.Fatal(err)
	}
	sp := created.GetSpec()
	if sp.GetCount() != 1 || sp.GetType() != troupev1.JobType_JOB_TYPE_BATCH || sp.GetScheduler() != "batch" ||
		sp.GetRestartPolicy() != troupev1.RestartPolicy_RESTART_POLICY_ON_FAILURE {
		t.Fatalf("defaults: %v", sp)
	}
	bad := proto.Clone(validJob()).(*troupev1.Job)
	bad.Metadata.Name = "other"
	bad.Spec.Template.Command = ""
	if _, err := clientlib.Create(ctx, s, clientlib.Jobs, bad); !errors.Is(err, clientlib.ErrInvalid) {
		t.Fatalf("create of an invalid job: %v", err)
	}
	if _, err := clientlib.Get(ctx, s, clientlib.Jobs, "/jobs/prod/other"); !errors.Is(err, clientlib.ErrNotFound) {
		t.Fatalf("invalid job was written: %v", err)
	}
	created.Spec.Priority = -1
	if _, err := clientlib.Update(ctx, s, clientlib.Jobs, created); !errors.Is(err, clientlib.ErrInvalid) {
		t.Fatalf("update to an invalid job: %v", err)
	}
}

// A task's user and a RunAsPolicy's users are host user names, never
// root; a policy is named after the namespace it governs, is not
// namespaced itself, and lists at least one user.
func TestRunAsValidation(t *testing.T) {
	policy := func(edit func(*troupev1.RunAsPolicy), users ...string) error {
		p := &troupev1.RunAsPolicy{Metadata: &troupev1.ObjectMeta{Name: "team-a"}, Spec: &troupev1.RunAsPolicySpec{Users: users}}
		edit(p)
		return clientlib.Validate(clientlib.RunAsPolicies, p)
	}
	keep := func(*troupev1.RunAsPolicy) {}
	withUser := func(u string) error {
		j := validJob()
		j.Spec.Template.User = u
		return clientlib.Validate(clientlib.Jobs, j)
	}
	for what, err := range map[string]error{"policy": policy(keep, "alice", "_svc", "build-bot$"), "no user": withUser(""), "user": withUser("alice")} {
		if err != nil {
			t.Fatalf("valid %s: %v", what, err)
		}
	}
	for _, tc := range []struct {
		name, field, rule string
		err               error
	}{
		{"task as root", "spec.template.user", "not-root", withUser("root")},
		{"task as a uid", "spec.template.user", "user-name", withUser("0")},
		{"policy of root", "spec.users[1]", "not-root", policy(keep, "alice", "root")},
		{"policy user", "spec.users[0]", "user-name", policy(keep, "Alice")},
		{"empty policy", "spec.users", "required", policy(keep)},
		{"policy name", "metadata.name", "dns-label", policy(func(p *troupev1.RunAsPolicy) { p.Metadata.Name = "team.a" }, "alice")},
		{"namespaced policy", "metadata.namespace", "not-namespaced", policy(func(p *troupev1.RunAsPolicy) { p.Metadata.Namespace = "team-a" }, "alice")},
	} {
		wantInvalid(t, tc.name, tc.err, tc.field, tc.rule)
	}
}
