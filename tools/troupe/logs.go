package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
)

// runLogs prints a task's output, fetched from the agent of the machine it
// runs (or last ran) on.
func runLogs(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("logs: give a task: <job>-<index> (with -n NAMESPACE) or <namespace>/<job>/<index>")
	}
	name := args[0]
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	ns := fs.String("n", "default", "namespace")
	stderr := fs.Bool("stderr", false, "print stderr instead of stdout")
	c, creds, ctx, cancel, err := cliClientCreds(fs, args[1:])
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	ref := name
	if !strings.Contains(name, "/") {
		job, index, err := clientlib.ParseTaskName(name)
		if err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		ref = clientlib.TaskRef(*ns, job, index)
	}
	task, err := clientlib.Get(ctx, c, clientlib.Tasks, clientlib.Tasks.Prefix+ref)
	if err != nil {
		return err
	}
	machine := task.GetBinding().GetMachine()
	if machine == "" {
		machine = task.GetStatus().GetMachine()
	}
	if machine == "" {
		return fmt.Errorf("logs: task %s has not run yet", ref)
	}
	m, err := clientlib.Get(ctx, c, clientlib.Machines, clientlib.Machines.Prefix+machine)
	if err != nil {
		return err
	}
	addr := m.GetSpec().GetAgentAddress()
	if addr == "" {
		return fmt.Errorf("logs: machine %s serves no logs (a simulated machine?)", machine)
	}
	stream := "stdout"
	if *stderr {
		stream = "stderr"
	}
	scheme, client := "http", http.DefaultClient
	if creds != nil {
		// The agent of machine, no other, serves its logs.
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("logs: machine %s's agent address %q: %w", machine, addr, err)
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
		return fmt.Errorf("logs: agent of %s: %w", machine, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("logs: agent of %s: %s", machine, strings.TrimSpace(string(b)))
	}
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}
