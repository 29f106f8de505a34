package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// applyCommand is `troupe apply -f FILE|DIR...`: it creates or updates
// the objects of manifest files so that the cell matches them; applying
// the same file twice changes nothing.
func (a *app) applyCommand() *cobra.Command {
	var (
		files  []string
		ns     string
		dryRun bool
		cf     *connFlags
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR [-f ...]",
		Short: "Create or update objects from manifest files",
		Long: `Create or update the objects of manifest files (YAML or JSON; a directory's
*.yaml, *.yml and *.json files) so that the cell matches them; applying the
same file twice changes nothing. A job without metadata.namespace goes to
--namespace (default "default"). Objects are checked against the cell's
validation policies, the job limits among them (policy job-limits: at most
10,000 tasks, 64 cores and 256Gi per task unless the cell stores its own);
a job none of whose tasks any machine takes now is accepted with a
warning. That check is a decision of the job's scheduler on the cell as
it is (its filters: cordons, label and CEL constraints, taints, free
room; for a gang job, gang_min tasks at once, without preemption): the
warning says how many machines the job's constraints and tolerations
admit and the one of them with the most room, or which filter refused
how many machines. --dry-run does the checks and writes nothing.

An invalid object is not written, and every problem of it is listed at
once, each on the line of its field (FILE:LINE: FIELD: MESSAGE (RULE)):
fields its kind does not have, values of the wrong type, broken
validation rules. As kubectl apply does, the valid objects of the same
files are applied all the same, and the command then exits with status
1; --dry-run lists the same problems. YAML that does not parse ends its
file there (the documents before it are applied).`,
		Example: `  troupe apply -f deploy/examples/batch.yaml
  troupe apply -f deploy/examples -n team-a
  troupe apply -f job.yaml --dry-run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef("give -f FILE|DIR")
			}
			c, _, ctx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			if err := c.LoadPolicies(ctx); err != nil {
				return err
			}
			var room *cellRoom
			warn := func(m clientlib.Manifest) error {
				job, ok := m.Object.(*troupev1.Job)
				if !ok {
					return nil
				}
				if room == nil {
					if room, err = readRoom(ctx, c); err != nil {
						return err
					}
				}
				w, err := room.unfit(job)
				if err != nil {
					return err
				}
				if w != "" {
					fmt.Fprintln(a.errOut, w)
				}
				return nil
			}
			check := func(m clientlib.Manifest) error { return checkObject(c, m) }
			return eachCheckedManifest(a.out, files, ns, check, func(m clientlib.Manifest) (string, error) {
				if dryRun {
					return "valid (dry run)", warn(m)
				}
				what, err := applyObject(ctx, c, m)
				if err != nil {
					return "", err
				}
				return what, warn(m)
			})
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&dryRun, "dry-run", false, "check the objects against the cell (validation, job limits, room) and write nothing")
	fs.StringArrayVarP(&files, "filename", "f", nil, "manifest file or directory (repeatable)")
	fs.StringVarP(&ns, "namespace", "n", defaultNamespace, "namespace of the jobs whose manifests name none")
	cf = a.addConnFlags(cmd, 10*time.Second, "request timeout")
	return cmd
}

// eachManifest calls do for every object of the manifest files (or
// directories) in files, in order, and prints what it did. Objects of
// namespaced kinds without a namespace get ns. A document the decoder
// finds problems in is not passed to do. It goes on past an object that
// has problems or do fails for, and returns the failures, joined, at the
// end: an object's problems each on its line (clientlib.ManifestError).
func eachManifest(out io.Writer, files []string, ns string, do func(m clientlib.Manifest) (string, error)) error {
	return eachCheckedManifest(out, files, ns, func(m clientlib.Manifest) error { return m.Err }, do)
}

// eachCheckedManifest is eachManifest with check saying what is wrong
// with each document instead of the decoder alone (it lists the
// decoder's problems, m.Err, with its own): do is called for the objects
// check passes.
func eachCheckedManifest(out io.Writer, files []string, ns string, check func(m clientlib.Manifest) error, do func(m clientlib.Manifest) (string, error)) error {
	paths, err := manifestPaths(files)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		ms, _ := clientlib.DecodeManifestFile(p, data) // each document's problems are its Err
		for _, m := range ms {
			if job, ok := m.Object.(*troupev1.Job); ok && job.GetMetadata() != nil && job.GetMetadata().GetNamespace() == "" {
				job.Metadata.Namespace = ns
			}
			var what string
			err := check(m)
			if err == nil {
				what, err = do(m)
			}
			if err != nil {
				err = m.Locate(err)
				var me *clientlib.ManifestError
				if !errors.As(err, &me) {
					err = fmt.Errorf("%s:%d: %w", p, m.Line, err)
				}
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(out, "%s/%s %s\n", strings.ToLower(m.Kind), displayName(m.Object), what)
		}
	}
	return errors.Join(errs...)
}

func manifestPaths(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		for _, pat := range []string{"*.yaml", "*.yml", "*.json"} {
			m, _ := filepath.Glob(filepath.Join(a, pat))
			out = append(out, m...)
		}
	}
	sort.Strings(out)
	return out, nil
}

func displayName(o clientlib.Object) string {
	if ns := o.GetMetadata().GetNamespace(); ns != "" {
		return ns + "/" + o.GetMetadata().GetName()
	}
	return o.GetMetadata().GetName()
}

// applyObject creates or updates one object.
func applyObject(ctx context.Context, c *clientlib.Client, m clientlib.Manifest) (string, error) {
	switch o := m.Object.(type) {
	case *troupev1.Job:
		return apply(ctx, c, clientlib.Jobs, o, func(cur, want *troupev1.Job) { want.Status = cur.GetStatus() })
	case *troupev1.Machine:
		return apply(ctx, c, clientlib.Machines, o, func(cur, want *troupev1.Machine) { want.Status = cur.GetStatus() })
	case *troupev1.ValidationPolicy:
		return apply(ctx, c, clientlib.ValidationPolicies, o, nil)
	case *troupev1.RunAsPolicy:
		return apply(ctx, c, clientlib.RunAsPolicies, o, nil)
	case *troupev1.Quota:
		return apply(ctx, c, clientlib.Quotas, o, nil)
	default:
		return "", notApplied(m.Kind)
	}
}

func notApplied(kind string) error {
	return fmt.Errorf("apply: kind %s is written by Troupe itself, not applied", kind)
}

// apply makes the stored object of kind k match want, keeping what the
// cell owns (keep copies it from the current object).
func apply[T clientlib.Object](ctx context.Context, c *clientlib.Client, k clientlib.Kind[T], want T, keep func(cur, want T)) (string, error) {
	key, err := k.Key(want)
	if err != nil {
		return "", err
	}
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := clientlib.Get(ctx, c, k, key)
		if errors.Is(err, clientlib.ErrNotFound) {
			if _, err := clientlib.Create(ctx, c, k, want); err != nil {
				return "", err
			}
			return "created", nil
		}
		if err != nil {
			return "", err
		}
		next := proto.Clone(want).(T)
		meta := proto.Clone(cur.GetMetadata()).(*troupev1.ObjectMeta)
		meta.Labels, meta.Annotations = want.GetMetadata().GetLabels(), want.GetMetadata().GetAnnotations()
		proto.Reset(next.GetMetadata())
		proto.Merge(next.GetMetadata(), meta)
		if keep != nil {
			keep(cur, next)
		}
		clientlib.Default(next)
		if proto.Equal(cur, next) {
			return "unchanged", nil
		}
		_, err = clientlib.Update(ctx, c, k, next)
		var ce *clientlib.ConflictError
		if errors.As(err, &ce) {
			continue // changed meanwhile (a controller wrote its status): read again
		}
		if err != nil {
			return "", err
		}
		return "configured", nil
	}
	return "", errors.New("apply: the object keeps changing; try again")
}

// defaultNamespace is the namespace of jobs and tasks when none is named
// (-n, a manifest's metadata.namespace).
const defaultNamespace = "default"

// checkObject lists every problem of one manifest's object, as a write
// of it would find them (with the cell's validation policies c loaded)
// and the decoder's, and writes nothing. Kinds apply does not write
// (applyObject's) are refused.
func checkObject(c *clientlib.Client, m clientlib.Manifest) error {
	switch m.Object.(type) {
	case nil, *troupev1.Job, *troupev1.Machine, *troupev1.ValidationPolicy, *troupev1.RunAsPolicy, *troupev1.Quota:
		return m.Check(c.Validator())
	default:
		return notApplied(m.Kind)
	}
}
