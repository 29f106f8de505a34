package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// runAs returns the host user the task of b may run as: its template's
// user, or the agent's TaskUser, which every namespace may run as. Any
// other user needs the RunAsPolicy of the task's namespace to list it:
// without one, or with one that is not valid, the user is refused (an
// error wrapping runtime.ErrRefused); any other error means the policy
// could not be read. Only tasks of such users cost a read. Root is
// refused by the runtime, by uid, and is no valid policy's user.
func (a *Agent) runAs(ctx context.Context, b *troupev1.Binding) (string, error) {
	user := b.GetTask().GetTemplate().GetUser()
	if user == "" || user == a.cfg.TaskUser {
		return a.cfg.TaskUser, nil
	}
	ns, _, _ := strings.Cut(b.GetMetadata().GetName(), "/")
	p, err := clientlib.Get(ctx, a.s, clientlib.RunAsPolicies, clientlib.RunAsPolicies.Prefix+ns)
	switch {
	case errors.Is(err, clientlib.ErrNotFound):
		return "", fmt.Errorf("%w: namespace %q has no RunAsPolicy, so its tasks run only as %q, not as %q",
			runtime.ErrRefused, ns, a.cfg.TaskUser, user)
	case errors.Is(err, clientlib.ErrUnreadable):
		return "", fmt.Errorf("%w: the RunAsPolicy of namespace %q is not valid, so its tasks run only as %q, not as %q: %v",
			runtime.ErrRefused, ns, a.cfg.TaskUser, user, err)
	case err != nil:
		return "", fmt.Errorf("read the RunAsPolicy of namespace %q: %w", ns, err)
	case !slices.Contains(p.GetSpec().GetUsers(), user):
		return "", fmt.Errorf("%w: the RunAsPolicy of namespace %q does not list user %q (it lists %s)",
			runtime.ErrRefused, ns, user, strings.Join(p.GetSpec().GetUsers(), ", "))
	}
	return user, nil
}

// refused records that the task of b was not started, and why.
func (a *Agent) refused(b *troupev1.Binding, why error) {
	a.cfg.Events.Record(clientlib.Machines.Name, "", a.cfg.Machine, a.cfg.Machine, clientlib.EventWarning, "RunAsRefused",
		fmt.Sprintf("Task %s (attempt %d) not started: %v", b.GetMetadata().GetName(), b.GetTask().GetAttempt(), why))
}
