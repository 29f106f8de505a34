package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/agents/runtime"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// agentCommand is `troupe agent`: the node agent of this machine against
// a cell's store, or --hollow N simulated machines in one process sharing
// one client. It stops its tasks and returns on SIGINT or SIGTERM.
func (a *app) agentCommand() *cobra.Command {
	var (
		endpoint, machine, capacity, labels, rtName, dir, logAddr, taskUser, level string
		lease, grace                                                               time.Duration
		hollow                                                                     int
		tf                                                                         tlsFlags
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a machine's node agent (or --hollow simulated ones)",
		Long: `Run the node agent of this machine against a cell's store: it registers the
machine, holds its lease, and runs the tasks bound to it (the exec runtime:
real processes; sim: simulated ones). --hollow N runs N simulated machines
in one process instead, each labelled and tainted troupe.io/hollow=true:
only jobs that tolerate the taint land on them. It stops its tasks and
returns on SIGINT or SIGTERM.`,
		Example: `  troupe agent --endpoint 10.0.0.1:7000 --capacity cpu=4000m,memory=8Gi --ca ca.crt --cert agent-m1.crt --key agent-m1.key
  troupe agent --endpoint 10.0.0.1:7000 --machine rack1 --hollow 100 --ca ... --cert ... --key ...`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if machine == "" {
				return usagef("give --machine (the hostname is unknown)")
			}
			lbls, err := parsePairs(labels)
			if err != nil {
				return fmt.Errorf("--labels: %w", err)
			}
			cpcty := agent.HostCapacity()
			if capacity != "" {
				if cpcty, err = parseResources(capacity); err != nil {
					return fmt.Errorf("--capacity: %w", err)
				}
			}
			log, err := newLogger(level)
			if err != nil {
				return err
			}
			defer log.Sync()
			creds, err := tf.source("agent", a.errOut)
			if err != nil {
				return err
			}
			if err := agentIdentityCovers(creds, machine, hollow > 0); err != nil {
				return err
			}
			cc := clientlib.DefaultConfig(strings.Split(endpoint, ",")...)
			cc.Logger, cc.TLS = log, creds
			c, err := clientlib.New(cc)
			if err != nil {
				return err
			}
			defer c.Close()
			ecfg := clientlib.DefaultEventRecorderConfig("agent/" + machine)
			ecfg.Logger = log
			events, err := clientlib.NewEventRecorder(c, ecfg)
			if err != nil {
				return err
			}
			base := agent.Config{Machine: machine, Capacity: cpcty, Labels: lbls, TaskUser: taskUser, Events: events,
				LeaseDuration: lease, RenewInterval: lease / 5, StopGrace: grace, Now: time.Now, Logger: log}
			var cfgs []agent.Config
			switch {
			case hollow > 0:
				sim := &runtime.Sim{DefaultDuration: 10 * time.Second}
				for i := range hollow {
					cfg := base
					cfg.Machine, cfg.Runtime = fmt.Sprintf("%s-hollow-%04d", machine, i), sim
					cfg.Labels = maps.Clone(lbls)
					cfg.Labels[agent.HollowLabel] = agent.HollowValue
					// Only jobs that tolerate it land on a hollow machine.
					cfg.Taints = []*troupev1.Taint{agent.HollowTaint()}
					cfgs = append(cfgs, cfg)
				}
			case rtName == "sim":
				base.Runtime = &runtime.Sim{DefaultDuration: 10 * time.Second}
				cfgs = append(cfgs, base)
			case rtName == "exec":
				if dir == "" {
					if dir, err = os.MkdirTemp("", "troupe-agent-"); err != nil {
						return err
					}
					// Task users pass through it to their working directories.
					if err := os.Chmod(dir, 0o711); err != nil {
						return err
					}
				}
				if creds != nil && logAddr != "" && len(creds.Leaf().DNSNames)+len(creds.Leaf().IPAddresses) == 0 {
					return fmt.Errorf("the certificate names no host, so it cannot serve task logs at %s over TLS: issue it with --hosts (the names and addresses troupe logs dials), or give --log-addr ''", logAddr)
				}
				base.Runtime, base.LogAddr, base.TLS = runtime.NewExec(dir, log), logAddr, creds
				cfgs = append(cfgs, base)
			default:
				return fmt.Errorf("--runtime is exec or sim, not %q", rtName)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go events.Run(ctx)
			fmt.Fprintf(a.out, "troupe agent: %d machine(s) from %s, store at %s; stop with Ctrl-C\n", len(cfgs), cfgs[0].Machine, endpoint)
			return runAgents(ctx, c, cfgs)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&endpoint, "endpoint", defaultEndpoint, "store gRPC address(es), comma-separated")
	addAlias(fs, "endpoint", "store")
	host, _ := agent.HostMachine()
	fs.StringVar(&machine, "machine", host, "machine name (hollow machines: <machine>-hollow-NNNN)")
	fs.StringVar(&capacity, "capacity", "", "capacity, as cpu=4000m,memory=8Gi (cpu in millicores, the m optional; default: this host's)")
	fs.StringVar(&labels, "labels", "", "machine labels, as k=v,...")
	fs.StringVar(&rtName, "runtime", "exec", "exec (real processes) or sim (simulated tasks)")
	fs.StringVar(&dir, "dir", "", "task directories and logs of the exec runtime, <dir>/<namespace>/<job>/<index> (default: a new temporary directory)")
	fs.StringVar(&logAddr, "log-addr", "127.0.0.1:0", "where the exec runtime's task logs are served (empty: not served)")
	fs.DurationVar(&lease, "lease", 10*time.Second, "lease duration; renewed five times per lease")
	fs.DurationVar(&grace, "stop-grace", 10*time.Second, "time between SIGTERM and SIGKILL of a stopped task")
	fs.StringVar(&taskUser, "task-user", runtime.DefaultTaskUser(), taskUserUsage)
	fs.IntVar(&hollow, "hollow", 0, "host this many simulated machines instead of this one (sim runtime), labelled and tainted troupe.io/hollow=true; the certificate must name agent <machine>-hollow-*")
	fs.StringVar(&level, "log-level", "warn", "log level: debug, info, warn, error")
	tf.register(fs)
	return cmd
}

// agentIdentityCovers checks, before anything starts, that the
// certificate speaks for the machines the agent will run (the store
// would refuse their writes one by one otherwise).
func agentIdentityCovers(creds *pki.Source, machine string, hollow bool) error {
	if creds == nil {
		return nil
	}
	id := creds.Identity()
	want := pki.Identity{Role: pki.RoleAgent, Name: machine}
	if hollow {
		want.Name = machine + "-hollow-*"
	}
	if id.Role != pki.RoleAgent || (id.Name != want.Name && !id.Covers(want.Name)) {
		return fmt.Errorf("agent: the certificate names %s; this agent needs %s (troupe certs issue --role agent --name %s)", id, want, want.Name)
	}
	return nil
}

// taskUserUsage describes --task-user of `troupe agent` and `troupe up`.
const taskUserUsage = "host user tasks run as when their template names none, which every namespace may run as; " +
	"never root (the default is nobody for an agent running as root, else the agent's own user, the only one it can run tasks as)"

// runAgents runs an agent per configuration until ctx ends (nil then) or
// one of them fails (the others are stopped).
func runAgents(ctx context.Context, c *clientlib.Client, cfgs []agent.Config) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, cfg := range cfgs {
		a, err := agent.New(c, cfg)
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := a.Run(ctx); ctx.Err() == nil {
				cancel(fmt.Errorf("agent %s: %w", cfg.Machine, err))
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// parsePairs parses "k=v,k=v".
func parsePairs(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not k=v", kv)
		}
		out[k] = v
	}
	return out, nil
}

// quantitySuffixes are the multipliers of resource amounts.
var quantitySuffixes = []struct {
	suffix string
	mult   int64
}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}

// parseResources parses "cpu=4000m,memory=8Gi": whole amounts, with an
// optional binary (Ki, Mi, Gi, Ti) or decimal (k, M, G, T) suffix; cpu is
// in millicores, with or without the "m" the CLI writes it with.
func parseResources(s string) (map[string]int64, error) {
	pairs, err := parsePairs(s)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for k, v := range pairs {
		num, mult := v, int64(1)
		if n, ok := strings.CutSuffix(v, "m"); ok && k == "cpu" {
			num = n // millicores, as the CLI writes them
		} else {
			for _, q := range quantitySuffixes {
				if n, ok := strings.CutSuffix(v, q.suffix); ok {
					num, mult = n, q.mult
					break
				}
			}
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s=%s: want a non-negative whole amount, such as 4000 or 8Gi", k, v)
		}
		out[k] = n * mult
	}
	return out, nil
}
