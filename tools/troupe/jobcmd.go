package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// runDelete deletes the objects of manifest files (-f) or a named job.
func runDelete(args []string) error {
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	var files []string
	fs.Func("f", "manifest file or directory (repeatable)", func(s string) error { files = append(files, s); return nil })
	ns := fs.String("n", "default", "namespace of a named job")
	kind, name := "", ""
	if len(args) >= 2 && !strings.HasPrefix(args[0], "-") {
		kind, name, args = args[0], args[1], args[2:]
	}
	c, ctx, cancel, err := cliClient(fs, args)
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	if kind != "" {
		if kind != "job" {
			return fmt.Errorf("delete: only jobs are deleted by name (got %q)", kind)
		}
		err := clientlib.Delete(ctx, c, clientlib.Jobs, &troupev1.Job{Metadata: &troupev1.ObjectMeta{Name: name, Namespace: *ns}})
		if err == nil {
			fmt.Printf("job/%s/%s deleted\n", *ns, name)
		}
		return err
	}
	if len(files) == 0 {
		return errors.New("delete: give -f FILE|DIR or job NAME")
	}
	return eachManifest(files, func(m clientlib.Manifest) (string, error) {
		var err error
		switch o := m.Object.(type) {
		case *troupev1.Job:
			err = clientlib.Delete(ctx, c, clientlib.Jobs, o)
		case *troupev1.Machine:
			err = clientlib.Delete(ctx, c, clientlib.Machines, o)
		case *troupev1.ValidationPolicy:
			err = clientlib.Delete(ctx, c, clientlib.ValidationPolicies, o)
		case *troupev1.RunAsPolicy:
			err = clientlib.Delete(ctx, c, clientlib.RunAsPolicies, o)
		default:
			err = fmt.Errorf("kind %s is not deleted from manifests", m.Kind)
		}
		return "deleted", err
	})
}

// runJob is `troupe job run FILE` (apply) and `troupe job stop NAME`.
func runJob(args []string) error {
	if len(args) < 2 {
		return errors.New("job: use `troupe job run FILE` or `troupe job stop NAME`")
	}
	switch args[0] {
	case "run":
		return runApply(append([]string{"-f", args[1]}, args[2:]...))
	case "stop":
		fs := flag.NewFlagSet("job stop", flag.ContinueOnError)
		ns := fs.String("n", "default", "namespace")
		c, ctx, cancel, err := cliClient(fs, args[2:])
		if err != nil {
			return err
		}
		defer cancel()
		defer c.Close()
		key := clientlib.Jobs.Prefix + *ns + "/" + args[1]
		for attempt := 0; attempt < 5; attempt++ {
			j, err := clientlib.Get(ctx, c, clientlib.Jobs, key)
			if err != nil {
				return err
			}
			if j.GetSpec().GetStopped() {
				fmt.Printf("job/%s/%s already stopped\n", *ns, args[1])
				return nil
			}
			j.Spec.Stopped = true
			_, err = clientlib.Update(ctx, c, clientlib.Jobs, j)
			var ce *clientlib.ConflictError
			if errors.As(err, &ce) {
				continue // the controller updated the job's status: read again
			}
			if err == nil {
				fmt.Printf("job/%s/%s stopped\n", *ns, args[1])
			}
			return err
		}
		return errors.New("job stop: the job keeps changing; try again")
	default:
		return fmt.Errorf("job: unknown subcommand %q (run, stop)", args[0])
	}
}
