package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// configCommand is `troupe config`: the contexts of the CLI's
// configuration (clientconfig.go).
func (a *app) configCommand() *cobra.Command {
	return group(&cobra.Command{
		Use:   "config",
		Short: "List, switch and set the CLI's contexts (cells and credentials)",
		Long: `List, switch and set the contexts of the CLI's configuration file (--config,
TROUPE_CONFIG, default ~/.troupe/config.yaml): each names a cell's store
addresses and the credentials to reach it with. The commands that reach a
cell use the current context unless --context names another, and
--endpoint, --ca, --cert, --key and --insecure (or their TROUPE_
variables) override its fields. troupe up writes the context "` + upContext + `".`,
		Example: `  troupe config set-context prod --endpoint 10.0.0.1:7000,10.0.0.2:7000 --ca ca.crt --cert admin.crt --key admin.key
  troupe config use-context prod
  troupe config get-contexts
  troupe get jobs --context local`,
	}, a.getContextsCommand(), a.currentContextCommand(), a.useContextCommand(), a.setContextCommand(), a.deleteContextCommand())
}

// configSubcommand is a `troupe config` subcommand reading (and, through
// write, writing) the configuration file.
func (a *app) configSubcommand(cmd *cobra.Command, run func(cmd *cobra.Command, args []string, cc *clientConfig, path string) (write bool, err error)) *cobra.Command {
	var config string
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		path := a.configPath(config)
		cc, err := readClientConfig(path)
		if err != nil {
			return err
		}
		write, err := run(cmd, args, &cc, path)
		if err != nil || !write {
			return err
		}
		return writeClientConfig(path, cc)
	}
	a.addConfigFlags(cmd, &config, nil)
	cmd.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.contextNames(config), cobra.ShellCompDirectiveNoFileComp
	}
	return cmd
}

func (a *app) getContextsCommand() *cobra.Command {
	return a.configSubcommand(&cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Args:  noArgs,
	}, func(_ *cobra.Command, _ []string, cc *clientConfig, path string) (bool, error) {
		if len(cc.Contexts) == 0 {
			fmt.Fprintf(a.out, "No contexts in %s: troupe up writes one, troupe config set-context adds one.\n", path)
			return false, nil
		}
		w := tabwriter.NewWriter(a.out, 0, 4, 3, ' ', 0)
		fmt.Fprintln(w, "CURRENT\tNAME\tENDPOINT\tCREDENTIALS")
		for _, c := range cc.Contexts {
			current := ""
			if c.Name == cc.CurrentContext {
				current = "*"
			}
			creds := dash(c.Cert)
			if c.Insecure {
				creds = "insecure"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", current, c.Name, dash(strings.Join(c.Endpoints, ",")), creds)
		}
		return false, w.Flush()
	})
}

func (a *app) currentContextCommand() *cobra.Command {
	return a.configSubcommand(&cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  noArgs,
	}, func(_ *cobra.Command, _ []string, cc *clientConfig, path string) (bool, error) {
		if cc.CurrentContext == "" {
			return false, fmt.Errorf("no current context in %s", path)
		}
		fmt.Fprintln(a.out, cc.CurrentContext)
		return false, nil
	})
}

func (a *app) useContextCommand() *cobra.Command {
	return a.configSubcommand(&cobra.Command{
		Use:   "use-context NAME",
		Short: "Make a context the current one",
		Args:  exactArgs(1, "a context's NAME"),
	}, func(_ *cobra.Command, args []string, cc *clientConfig, path string) (bool, error) {
		if cc.context(args[0]) == nil {
			return false, fmt.Errorf("no context %q in %s (troupe config get-contexts lists them)", args[0], path)
		}
		cc.CurrentContext = args[0]
		fmt.Fprintf(a.out, "Switched to context %q.\n", args[0])
		return true, nil
	})
}

func (a *app) setContextCommand() *cobra.Command {
	var (
		endpoint string
		tf       tlsFlags
	)
	cmd := a.configSubcommand(&cobra.Command{
		Use:   "set-context NAME [--endpoint ADDRS] [--ca CA --cert CERT --key KEY | --insecure]",
		Short: "Add a context, or change the fields of one given",
		Long: `Add a context, or change the fields of one that are given: --endpoint (the
store's gRPC addresses, comma-separated), --ca, --cert and --key (files,
kept by absolute path), or --insecure (no TLS) instead of the certificates.
The first context of a configuration becomes the current one; use-context
switches. These flags are never taken from the environment.`,
		Example: "  troupe config set-context prod --endpoint 10.0.0.1:7000,10.0.0.2:7000 --ca ca.crt --cert admin.crt --key admin.key",
		Args:    exactArgs(1, "a context's NAME"),
	}, func(cmd *cobra.Command, args []string, cc *clientConfig, path string) (bool, error) {
		fs := cmd.Flags()
		name := args[0]
		c := cellContext{Name: name}
		if cur := cc.context(name); cur != nil {
			c = *cur
		}
		if fs.Changed("endpoint") {
			c.Endpoints = strings.Split(endpoint, ",")
		}
		for _, f := range []struct {
			flag  string
			value string
			field *string
		}{{"ca", tf.ca, &c.CA}, {"cert", tf.cert, &c.Cert}, {"key", tf.key, &c.Key}} {
			if !fs.Changed(f.flag) {
				continue
			}
			abs, err := filepath.Abs(f.value)
			if err != nil {
				return false, err
			}
			if _, err := os.Stat(abs); err != nil {
				return false, fmt.Errorf("--%s: %w", f.flag, err)
			}
			*f.field, c.Insecure = abs, false
		}
		if fs.Changed("insecure") {
			if tf.insecure && (fs.Changed("ca") || fs.Changed("cert") || fs.Changed("key")) {
				return false, usagef("--insecure and --ca/--cert/--key exclude each other")
			}
			c.Insecure = tf.insecure
			if c.Insecure {
				c.CA, c.Cert, c.Key = "", "", ""
			}
		}
		verb := "modified"
		if cc.setContext(c) {
			verb = "created"
		}
		fmt.Fprintf(a.out, "Context %q %s in %s.\n", name, verb, path)
		if cc.CurrentContext == "" {
			cc.CurrentContext = name
			fmt.Fprintf(a.out, "Switched to context %q.\n", name)
		}
		return true, nil
	})
	fs := cmd.Flags()
	fs.StringVar(&endpoint, "endpoint", "", "the store's gRPC address(es), comma-separated")
	tf.register(fs)
	noEnv(fs, "endpoint", "ca", "cert", "key", "insecure")
	return cmd
}

func (a *app) deleteContextCommand() *cobra.Command {
	return a.configSubcommand(&cobra.Command{
		Use:   "delete-context NAME",
		Short: "Delete a context",
		Args:  exactArgs(1, "a context's NAME"),
	}, func(_ *cobra.Command, args []string, cc *clientConfig, path string) (bool, error) {
		c := cc.context(args[0])
		if c == nil {
			return false, fmt.Errorf("no context %q in %s", args[0], path)
		}
		for i := range cc.Contexts {
			if cc.Contexts[i].Name == args[0] {
				cc.Contexts = append(cc.Contexts[:i], cc.Contexts[i+1:]...)
				break
			}
		}
		if cc.CurrentContext == args[0] {
			cc.CurrentContext = ""
		}
		fmt.Fprintf(a.out, "Context %q deleted from %s.\n", args[0], path)
		return true, nil
	})
}
