package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/clientlib"
	"github.com/troupe-cluster/troupe/controllers/job"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// jobNameCommand is a `troupe job VERB NAME ...` command on one job,
// connected, with -n: run gets the job's key ("<namespace>/<name>") and
// the arguments after NAME.
func (a *app) jobNameCommand(use, short, long string, args cobra.PositionalArgs,
	run func(ctx context.Context, c *clientlib.Client, key string, rest []string) error) *cobra.Command {
	var (
		ns string
		cf *connFlags
	)
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, ctx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			key, _, _ := namespacedKey(ns)(args[0])
			return run(ctx, c, key, args[1:])
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", defaultNamespace, "namespace")
	cf = a.addConnFlags(cmd, 10*time.Second, "request timeout")
	return cmd
}

func (a *app) jobHistoryCommand() *cobra.Command {
	return a.jobNameCommand("history NAME", "List a job's versions: what changed, which is current and stable",
		`List the versions a job's status keeps (the last 10): when each began, why
(the job's troupe.io/change-cause annotation, "applied", or an automatic
revert), and which is current, stable (all its tasks were healthy) or
failed (its update failed). troupe get job NAME -o yaml shows each
version's template in status.history.`,
		exactArgs(1, "a job's NAME (or NAMESPACE/NAME)"),
		func(ctx context.Context, c *clientlib.Client, key string, _ []string) error {
			j, err := getJob(ctx, c, key)
			if err != nil {
				return err
			}
			writeHistory(a.out, j, time.Now())
			return nil
		})
}

// writeHistory prints j's versions as a table.
func writeHistory(out io.Writer, j *troupev1.Job, now time.Time) {
	st := j.GetStatus()
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "VERSION\tAGE\tSTATE\tCOMMAND\tCAUSE")
	for _, h := range st.GetHistory() {
		var state []string
		if h.GetVersion() == st.GetVersion() {
			state = append(state, "current")
		}
		if h.GetVersion() == st.GetStableVersion() {
			state = append(state, "stable")
		}
		if h.GetFailed() {
			state = append(state, "failed")
		}
		if len(state) == 0 {
			state = append(state, "-")
		}
		command := strings.Join(append([]string{h.GetTemplate().GetCommand()}, h.GetTemplate().GetArgs()...), " ")
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", h.GetVersion(), age(now, h.GetCreated()), strings.Join(state, ","), command, h.GetCause())
	}
	w.Flush()
	if r := st.GetRollout(); r != nil {
		fmt.Fprintf(out, "\nUpdate %d -> %d: %s", r.GetFromVersion(), r.GetToVersion(), rolloutSummary(j))
		fmt.Fprintln(out)
	}
}

// rolloutSummary is one line on j's update: its state, its new tasks
// and those healthy, and its message.
func rolloutSummary(j *troupev1.Job) string {
	r := j.GetStatus().GetRollout()
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%s, %d/%d new, %d healthy", strings.ToLower(strings.TrimPrefix(r.GetState().String(), "ROLLOUT_STATE_")),
		r.GetUpdated(), j.GetSpec().GetCount(), r.GetHealthy())
	if r.GetMessage() != "" {
		s += ": " + r.GetMessage()
	}
	return s
}

func (a *app) jobPromoteCommand() *cobra.Command {
	return a.jobNameCommand("promote NAME", "Let a service's update go on past its canaries",
		`Promote the canaries of a service job's update: the update, paused once
its canaries ran (update.canary), goes on replacing the old tasks.`,
		exactArgs(1, "a job's NAME (or NAMESPACE/NAME)"),
		func(ctx context.Context, c *clientlib.Client, key string, _ []string) error {
			return updateJob(ctx, c, a.out, key, func(j *troupev1.Job) (string, error) {
				r := j.GetStatus().GetRollout()
				switch {
				case r == nil || r.GetState() != troupev1.RolloutState_ROLLOUT_STATE_PAUSED && r.GetState() != troupev1.RolloutState_ROLLOUT_STATE_ROLLING:
					return "", fmt.Errorf("job %s has no update under way", key)
				case r.GetPromoted():
					return "", errUnchanged("already promoted")
				}
				r.Promoted = true
				return fmt.Sprintf("promoted: the update to version %d goes on", r.GetToVersion()), nil
			})
		})
}

func (a *app) jobRollbackCommand() *cobra.Command {
	return a.jobNameCommand("rollback NAME [VERSION]", "Return a job's tasks to an earlier version",
		`Write the job's task template, constraints and tolerations back to those of
VERSION (by default the stable version, or the one before the current if
that is the stable one): a new version, rolled out as any update is, with
the change-cause "rollback to version N".`,
		cobra.RangeArgs(1, 2),
		func(ctx context.Context, c *clientlib.Client, key string, rest []string) error {
			want := int64(0)
			if len(rest) == 1 {
				n, err := strconv.ParseInt(strings.TrimPrefix(rest[0], "v"), 10, 32)
				if err != nil || n < 1 {
					return usagef("VERSION %q is not a version number", rest[0])
				}
				want = n
			}
			return updateJob(ctx, c, a.out, key, func(j *troupev1.Job) (string, error) {
				to, err := rollbackTarget(j, int32(want))
				if err != nil {
					return "", err
				}
				j.Spec.Template, j.Spec.Constraints, j.Spec.Tolerations = to.GetTemplate(), to.GetConstraints(), to.GetTolerations()
				if j.Metadata.Annotations == nil {
					j.Metadata.Annotations = map[string]string{}
				}
				j.Metadata.Annotations[job.ChangeCauseAnnotation] = fmt.Sprintf("rollback to version %d", to.GetVersion())
				return fmt.Sprintf("rolled back to version %d's tasks", to.GetVersion()), nil
			})
		})
}

// rollbackTarget is the version of j to roll back to: want, or (0) the
// stable version, or the one before the current if that is stable.
func rollbackTarget(j *troupev1.Job, want int32) (*troupev1.JobVersion, error) {
	st := j.GetStatus()
	hist := st.GetHistory()
	if want == 0 {
		want = st.GetStableVersion()
		if want == st.GetVersion() || want == 0 {
			want = 0
			for _, h := range hist {
				if h.GetVersion() < st.GetVersion() && !h.GetFailed() {
					want = h.GetVersion()
				}
			}
		}
		if want == 0 {
			return nil, fmt.Errorf("job %s has no earlier version to roll back to", j.GetMetadata().GetName())
		}
	}
	if want == st.GetVersion() {
		return nil, errUnchanged(fmt.Sprintf("version %d is current", want))
	}
	for _, h := range hist {
		if h.GetVersion() == want {
			return h, nil
		}
	}
	return nil, fmt.Errorf("job %s keeps no version %d (troupe job history %s lists those it keeps)", j.GetMetadata().GetName(), want,
		j.GetMetadata().GetName())
}

// errUnchanged says a job command had nothing to change: it succeeds,
// saying so.
type errUnchanged string

func (e errUnchanged) Error() string { return string(e) }

// getJob reads the job at key ("<namespace>/<name>").
func getJob(ctx context.Context, c *clientlib.Client, key string) (*troupev1.Job, error) {
	j, err := clientlib.Get(ctx, c, clientlib.Jobs, clientlib.Jobs.Prefix+key)
	if errors.Is(err, clientlib.ErrNotFound) {
		return nil, errNotFound("job " + key)
	}
	return j, err
}

// updateJob reads the job at key, changes it with change (which says
// what it did, or errUnchanged) and writes it back, again from a fresh
// read when the job changed meanwhile (its controller writes its
// status).
func updateJob(ctx context.Context, c *clientlib.Client, out io.Writer, key string, change func(*troupev1.Job) (string, error)) error {
	for range 5 {
		j, err := getJob(ctx, c, key)
		if err != nil {
			return err
		}
		did, err := change(j)
		var same errUnchanged
		if errors.As(err, &same) {
			fmt.Fprintf(out, "job/%s %s\n", key, same)
			return nil
		}
		if err != nil {
			return err
		}
		_, err = clientlib.Update(ctx, c, clientlib.Jobs, j)
		var ce *clientlib.ConflictError
		if errors.As(err, &ce) {
			continue
		}
		if err == nil {
			fmt.Fprintf(out, "job/%s %s\n", key, did)
		}
		return err
	}
	return fmt.Errorf("job %s keeps changing; try again", key)
}
