package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
)

// logsCommand is `troupe logs TASK`: a task's output, fetched from the
// agent of the machine it runs (or last ran) on.
func (a *app) logsCommand() *cobra.Command {
	var (
		ns     string
		stderr bool
		cf     *connFlags
	)
	cmd := &cobra.Command{
		Use:   "logs TASK",
		Short: "Print a task's output",
		Long: `Print a task's output (stdout, or stderr with --stderr), fetched from the
agent of the machine it runs or last ran on. TASK is <job>-<index> (in -n's
namespace), NAMESPACE/<job>-<index> or <namespace>/<job>/<index>.`,
		Example: "  troupe logs web-0 --stderr",
		Args:    exactArgs(1, "a task: <job>-<index> (with -n NAMESPACE) or <namespace>/<job>/<index>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, display, err := taskKey(ns)(args[0])
			if err != nil {
				return err
			}
			c, t, ctx, cancel, err := a.connect(cmd, cf)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			return logs(ctx, c, t.creds, a.out, ref, display, stderr)
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", defaultNamespace, "namespace")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	cf = a.addConnFlags(cmd, 10*time.Second, "request timeout")
	return cmd
}

// logs copies the output of the task ref ("<namespace>/<job>/<index>",
// display in messages) to out.
func logs(ctx context.Context, c *clientlib.Client, creds *pki.Source, out io.Writer, ref, display string, stderr bool) error {
	task, err := clientlib.Get(ctx, c, clientlib.Tasks, clientlib.Tasks.Prefix+ref)
	if errors.Is(err, clientlib.ErrNotFound) {
		return errNotFound("task " + display)
	}
	if err != nil {
		return err
	}
	machine := task.GetBinding().GetMachine()
	if machine == "" {
		machine = task.GetStatus().GetMachine()
	}
	if machine == "" {
		return fmt.Errorf("task %s has not run yet", display)
	}
	m, err := clientlib.Get(ctx, c, clientlib.Machines, clientlib.Machines.Prefix+machine)
	if err != nil {
		return err
	}
	addr := m.GetSpec().GetAgentAddress()
	if addr == "" {
		return fmt.Errorf("machine %s serves no logs (a simulated machine?)", machine)
	}
	stream := "stdout"
	if stderr {
		stream = "stderr"
	}
	scheme, client := "http", http.DefaultClient
	if creds != nil {
		// The agent of machine, no other, serves its logs.
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("machine %s's agent address %q: %w", machine, addr, err)
		}
		tlsCfg := creds.ClientConfig(host, func(id pki.Identity) error {
			if id.Role != pki.RoleAgent || !id.Covers(machine) {
				return fmt.Errorf("%s is not the agent of %s", id, machine)
			}
			return nil
		})
		scheme, client = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/logs/"+ref+"?stream="+stream, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("agent of %s: %w", machine, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("agent of %s: %s", machine, strings.TrimSpace(string(b)))
	}
	_, err = io.Copy(out, resp.Body)
	return err
}
