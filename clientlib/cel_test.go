package clientlib_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

func TestBuiltinCELRules(t *testing.T) {
	gang := validJob()
	gang.Spec.GangMin, gang.Spec.Scheduler = 2, "batch"
	wantInvalid(t, "gang on batch", clientlib.Validate(clientlib.Jobs, gang), "spec.scheduler", "builtin")
	svc := validJob()
	svc.Spec.Type, svc.Spec.RestartPolicy = troupev1.JobType_JOB_TYPE_SERVICE, troupev1.RestartPolicy_RESTART_POLICY_NEVER
	wantInvalid(t, "service never restarted", clientlib.Validate(clientlib.Jobs, svc), "spec.restart_policy", "builtin")
	cons := validJob()
	cons.Spec.Constraints = &troupev1.Constraints{Cel: "machine.spec.capacity['cpu'] >"}
	wantInvalid(t, "constraint syntax", clientlib.Validate(clientlib.Jobs, cons), "spec.constraints.cel", "cel-compiles")
	cons.Spec.Constraints.Cel = "machine.metadata.name"
	wantInvalid(t, "constraint type", clientlib.Validate(clientlib.Jobs, cons), "spec.constraints.cel", "cel-compiles")
	cons.Spec.Constraints.Cel = "machine.spec.capacity['cpu'] >= 4000 && machine.metadata.labels['zone'] == 'a'"
	if err := clientlib.Validate(clientlib.Jobs, cons); err != nil {
		t.Fatalf("valid constraint: %v", err)
	}
}

// A policy stored by one client is loaded and enforced by another,
// independent one.
func TestStoredPolicyEnforcedByAnotherClient(t *testing.T) {
	ctx := context.Background()
	store := newMem()
	policy := &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: "job-size"}, Spec: &troupev1.ValidationPolicySpec{
		Kinds: []string{"Job"},
		Rules: []*troupev1.ValidationRule{{Expression: "object.spec.count <= 10", Message: "at most 10 tasks per job", FieldPath: "spec.count"}},
	}}
	if _, err := clientlib.Create(ctx, store, clientlib.ValidationPolicies, policy); err != nil {
		t.Fatal(err)
	}

	other, err := clientlib.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Load(ctx, store); err != nil {
		t.Fatal(err)
	}
	client := clientlib.WithValidator(store, other)
	big := validJob()
	big.Spec.Count = 20
	_, err = clientlib.Create(ctx, client, clientlib.Jobs, big)
	wantInvalid(t, "job over the policy", err, "spec.count", "policy/job-size")
	if !strings.Contains(err.Error(), "at most 10 tasks per job") {
		t.Fatalf("error %q lacks the policy's message", err)
	}
	if _, err := clientlib.Get(ctx, store, clientlib.Jobs, "/jobs/prod/web"); !errors.Is(err, clientlib.ErrNotFound) {
		t.Fatal("the refused job was written")
	}
	big.Spec.Count = 5
	if _, err := clientlib.Create(ctx, client, clientlib.Jobs, big); err != nil {
		t.Fatalf("job within the policy: %v", err)
	}
	// Reloading an unchanged policy keeps it; removing it stops enforcing.
	if err := other.Load(ctx, store); err != nil {
		t.Fatal(err)
	}
	if err := other.SetPolicies(nil); err != nil {
		t.Fatal(err)
	}
	big.Metadata.Name, big.Spec.Count = "bigger", 50
	if _, err := clientlib.Create(ctx, client, clientlib.Jobs, big); err != nil {
		t.Fatalf("after the policy was dropped: %v", err)
	}
}

func TestPolicyRulesMustCompile(t *testing.T) {
	ctx := context.Background()
	bad := &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: "broken"}, Spec: &troupev1.ValidationPolicySpec{
		Kinds: []string{"Machine"}, Rules: []*troupev1.ValidationRule{{Expression: "object.spec.no_such_field > 1"}},
	}}
	_, err := clientlib.Create(ctx, newMem(), clientlib.ValidationPolicies, bad)
	wantInvalid(t, "policy with a bad rule", err, "spec.rules", "cel-compiles")
	v, _ := clientlib.NewValidator()
	if err := v.SetPolicies([]*troupev1.ValidationPolicy{bad}); err == nil {
		t.Fatal("SetPolicies accepted a rule that does not compile")
	}
}

func TestPolicyCostLimit(t *testing.T) {
	list := "[" + strings.TrimSuffix(strings.Repeat("1,", 60), ",") + "]"
	expensive := &troupev1.ValidationPolicy{Metadata: &troupev1.ObjectMeta{Name: "slow", Version: 1}, Spec: &troupev1.ValidationPolicySpec{
		Kinds: []string{"Job"},
		Rules: []*troupev1.ValidationRule{{Expression: list + ".all(x, " + list + ".all(y, " + list + ".all(z, x + y + z > 0)))"}},
	}}
	v, _ := clientlib.NewValidator()
	if err := v.SetPolicies([]*troupev1.ValidationPolicy{expensive}); err != nil {
		t.Fatal(err)
	}
	err := clientlib.ValidateWith(v, clientlib.Jobs, validJob())
	var ve *clientlib.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("expensive rule: %v, want a cost-limit error", err)
	}
}
