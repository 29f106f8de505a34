package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// cliClient connects the CLI to a cell.
func cliClient(fs *flag.FlagSet, args []string) (*clientlib.Client, context.Context, context.CancelFunc, error) {
	c, _, ctx, cancel, err := cliClientCreds(fs, args)
	return c, ctx, cancel, err
}

// cliClientCreds connects the CLI to a cell, and returns its credentials
// too (nil with --insecure).
func cliClientCreds(fs *flag.FlagSet, args []string) (*clientlib.Client, *pki.Source, context.Context, context.CancelFunc, error) {
	cf := registerCLIFlags(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, nil, nil, err
	}
	creds, err := cf.source()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cc := clientlib.DefaultConfig(cf.endpoints()...)
	cc.TLS = creds
	c, err := clientlib.New(cc)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	return c, creds, ctx, cancel, nil
}

// runApply creates or updates the objects of manifest files so that the
// cell matches them; applying the same file twice changes nothing.
func runApply(args []string) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	var files []string
	fs.Func("f", "manifest file or directory (repeatable)", func(s string) error { files = append(files, s); return nil })
	c, ctx, cancel, err := cliClient(fs, args)
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	if len(files) == 0 {
		return errors.New("apply: give -f FILE|DIR")
	}
	return eachManifest(files, func(m clientlib.Manifest) (string, error) { return applyObject(ctx, c, m) })
}

// eachManifest calls do for every object of the manifest files (or
// directories) in files, in order, and prints what it did.
func eachManifest(files []string, do func(m clientlib.Manifest) (string, error)) error {
	paths, err := manifestPaths(files)
	if err != nil {
		return err
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		ms, err := clientlib.DecodeManifests(data)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, m := range ms {
			what, err := do(m)
			if err != nil {
				return fmt.Errorf("%s:%d: %w", p, m.Line, err)
			}
			fmt.Printf("%s/%s %s\n", strings.ToLower(m.Kind), displayName(m.Object), what)
		}
	}
	return nil
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
	default:
		return "", fmt.Errorf("apply: kind %s is written by Troupe itself, not applied", m.Kind)
	}
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
