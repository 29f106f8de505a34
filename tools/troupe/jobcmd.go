package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// deleteCommand is `troupe delete -f FILE|DIR...` (the objects of
// manifests) and `troupe delete job NAME...`. An object that does not
// exist is an error (exit status 1), after the others are deleted.
func (a *app) deleteCommand() *cobra.Command {
	var (
		files []string
		ns    string
		cf    *connFlags
	)
	cmd := &cobra.Command{
		Use:   "delete (-f FILE|DIR... | job NAME...)",
		Short: "Delete the objects of manifests, or jobs by name",
		Long: `Delete the objects of manifest files (-f), or jobs by name (in -n's
namespace, or written NAMESPACE/NAME). The job controller then removes a
deleted job's tasks. An object that does not exist is reported as not found
and the command exits with status 1, after deleting the others.`,
		Example: `  troupe delete job web
  troupe delete -f deploy/examples/batch.yaml`,
		ValidArgsFunction: completeKinds([]string{"job"}),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(files) > 0 && len(args) > 0:
				return usagef("give -f FILE|DIR or job NAME, not both")
			case len(files) == 0 && len(args) < 2:
				return usagef("give -f FILE|DIR or job NAME")
			case len(args) > 0 && args[0] != "job" && args[0] != "jobs":
				return usagef("only jobs are deleted by name (got %q)", args[0])
			}
			c, _, ctx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			if len(args) > 0 {
				var errs []error
				for _, name := range args[1:] {
					key, display, _ := namespacedKey(ns)(name)
					if err := deleteJob(ctx, c, key); err != nil {
						errs = append(errs, err)
						continue
					}
					fmt.Fprintf(a.out, "job/%s deleted\n", display)
				}
				return errors.Join(errs...)
			}
			return eachManifest(a.out, files, ns, func(m clientlib.Manifest) (string, error) {
				switch o := m.Object.(type) {
				case *troupev1.Job:
					return "deleted", deleteObject(ctx, c, clientlib.Jobs, "job", o)
				case *troupev1.Machine:
					return "deleted", deleteObject(ctx, c, clientlib.Machines, "machine", o)
				case *troupev1.ValidationPolicy:
					return "deleted", deleteObject(ctx, c, clientlib.ValidationPolicies, "validationpolicy", o)
				case *troupev1.RunAsPolicy:
					return "deleted", deleteObject(ctx, c, clientlib.RunAsPolicies, "runaspolicy", o)
				case *troupev1.Quota:
					return "deleted", deleteObject(ctx, c, clientlib.Quotas, "quota", o)
				default:
					return "", fmt.Errorf("kind %s is not deleted from manifests", m.Kind)
				}
			})
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVarP(&files, "filename", "f", nil, "manifest file or directory (repeatable)")
	fs.StringVarP(&ns, "namespace", "n", defaultNamespace, "namespace of named jobs, and of jobs whose manifests name none")
	cf = a.addConnFlags(cmd, 10*time.Second, "request timeout")
	return cmd
}

// deleteJob deletes the job at key below clientlib.Jobs.Prefix
// ("<namespace>/<name>").
func deleteJob(ctx context.Context, c *clientlib.Client, key string) error {
	j, err := clientlib.Get(ctx, c, clientlib.Jobs, clientlib.Jobs.Prefix+key)
	if errors.Is(err, clientlib.ErrNotFound) {
		return errNotFound("job " + key)
	}
	if err != nil {
		return err
	}
	return deleteObject(ctx, c, clientlib.Jobs, "job", j)
}

// deleteObject deletes obj of kind k (noun in messages) as it is now: it
// reads it and deletes that version, again if it changes meanwhile, so
// that an object that does not exist is an error (errNotFound), and the
// kind's deletion hooks see the object (a deleted job is marked stopped).
func deleteObject[T clientlib.Object](ctx context.Context, c *clientlib.Client, k clientlib.Kind[T], noun string, obj T) error {
	key, err := k.Key(obj)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(key, k.Prefix)
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := clientlib.Get(ctx, c, k, key)
		if errors.Is(err, clientlib.ErrNotFound) {
			return errNotFound(noun + " " + name)
		}
		if err != nil {
			return err
		}
		err = clientlib.Delete(ctx, c, k, cur)
		var ce *clientlib.ConflictError
		if errors.As(err, &ce) {
			continue // changed meanwhile (a controller wrote its status): read again
		}
		return err
	}
	return fmt.Errorf("delete %s %s: the object keeps changing; try again", noun, name)
}

// jobCommand is `troupe job run FILE` (apply) and `troupe job stop NAME`.
func (a *app) jobCommand() *cobra.Command {
	run := a.applyCommand()
	run.Use = "run FILE"
	run.Short = "Create or update the job of a manifest file (troupe apply -f FILE)"
	run.Long = run.Short + "."
	run.Example = "  troupe job run deploy/examples/batch.yaml"
	run.Args = exactArgs(1, "a job file")
	apply := run.RunE
	run.RunE = func(cmd *cobra.Command, args []string) error {
		if err := cmd.Flags().Set("filename", args[0]); err != nil {
			return err
		}
		return apply(cmd, nil)
	}
	return group(&cobra.Command{
		Use:   "job",
		Short: "Run a job file; stop, promote or roll back a job; list its versions",
	}, run, a.jobStopCommand(), a.jobPromoteCommand(), a.jobRollbackCommand(), a.jobHistoryCommand())
}

// jobStopCommand is `troupe job stop NAME`: the job's tasks are stopped,
// the job kept.
func (a *app) jobStopCommand() *cobra.Command {
	return a.jobNameCommand("stop NAME", "Stop a job: its tasks stop, the job stays (delete removes it)", "",
		exactArgs(1, "a job's NAME (or NAMESPACE/NAME)"),
		func(ctx context.Context, c *clientlib.Client, key string, _ []string) error {
			return stopJob(ctx, c, a.out, key)
		})
}

// stopJob marks the job at key ("<namespace>/<name>") stopped.
func stopJob(ctx context.Context, c *clientlib.Client, out io.Writer, key string) error {
	return updateJob(ctx, c, out, key, func(j *troupev1.Job) (string, error) {
		if j.GetSpec().GetStopped() {
			return "", errUnchanged("already stopped")
		}
		j.Spec.Stopped = true
		return "stopped", nil
	})
}
