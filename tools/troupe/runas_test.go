package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/clientlib/clienttest"
)

// `troupe apply` creates, keeps and changes a namespace's RunAsPolicy,
// and refuses one that lists root.
func TestApplyRunAsPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := clienttest.Start(ctx, t).Client()
	apply := func(users string) (string, error) {
		t.Helper()
		ms, err := clientlib.DecodeManifests([]byte("apiVersion: troupe/v1\nkind: RunAsPolicy\nmetadata: {name: team-a}\nspec: {users: " + users + "}\n"))
		if err != nil || len(ms) != 1 {
			t.Fatalf("decode: %v %v", ms, err)
		}
		return applyObject(ctx, c, ms[0])
	}
	for _, step := range []struct{ users, want string }{{"[alice]", "created"}, {"[alice]", "unchanged"}, {"[alice, bob]", "configured"}} {
		if got, err := apply(step.users); err != nil || got != step.want {
			t.Fatalf("apply users %s: %q %v, want %s", step.users, got, err, step.want)
		}
	}
	if _, err := apply("[alice, root]"); !errors.Is(err, clientlib.ErrInvalid) {
		t.Fatalf("apply a policy of root: %v, want invalid", err)
	}
	p, err := clientlib.Get(ctx, c, clientlib.RunAsPolicies, "/runas/team-a")
	if err != nil || !slices.Equal(p.GetSpec().GetUsers(), []string{"alice", "bob"}) {
		t.Fatalf("stored policy %v (%v), want users alice, bob", p, err)
	}
}
