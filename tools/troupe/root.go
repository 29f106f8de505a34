package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// app is one run of the troupe command: its streams and its environment,
// which tests replace to run commands as a user types them.
type app struct {
	in          io.Reader
	out, errOut io.Writer
	// lookupEnv reads the environment (os.LookupEnv).
	lookupEnv func(string) (string, bool)
	// home is the user's home directory (os.UserHomeDir), where the CLI's
	// configuration is by default.
	home func() (string, error)
	// dialTimeout bounds the CLI's first contact with a cell (probe).
	dialTimeout time.Duration
	// fromEnv are the flags of the running command that the environment
	// set (fillFromEnv).
	fromEnv map[string]bool
}

// newApp is the app of the process: its standard streams and environment.
func newApp() *app {
	return &app{in: os.Stdin, out: os.Stdout, errOut: os.Stderr, lookupEnv: os.LookupEnv, home: os.UserHomeDir, dialTimeout: dialTimeout}
}

// usageError is an error in how a command was called (an unknown flag or
// subcommand, missing arguments): exit status 2 and a pointer to -h.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// execute runs the command args name and returns the exit status: 0, 1
// when the command failed (its error on errOut, "troupe get: ..."), 2
// when it was called wrongly.
func (a *app) execute(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(normalizeArgs(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if cmd == root && strings.HasPrefix(err.Error(), "unknown command") {
		err = usageError{err}
	}
	fmt.Fprintf(a.errOut, "%s: %v\n", cmd.CommandPath(), err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(a.errOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return 2
	}
	return 1
}

// rootCommand is `troupe` and every command below it.
func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "troupe",
		Short: "Troupe, an Omega-style cluster manager: every role and the CLI in one binary",
		Long: `Troupe, an Omega-style cluster manager: every role and the CLI in one binary.

Flags go anywhere on the line, before or after arguments ("--" ends them).
Every flag can come from the environment as TROUPE_<FLAG> ('-' as '_':
--endpoint from TROUPE_ENDPOINT, --data-dir from TROUPE_DATA_DIR); a flag
on the command line wins. A long flag may be written with one dash as well
(-endpoint is --endpoint); -o, -n, -l and -f are shorthands.

The CLI reaches a cell at --endpoint (TROUPE_ENDPOINT), else at the
current context of its configuration file (--config, TROUPE_CONFIG,
default ~/.troupe/config.yaml), which troupe up writes and troupe config
edits; --context picks another context.`,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			a.fromEnv, err = fillFromEnv(cmd.Flags(), a.lookupEnv, a.errOut)
			return err
		},
	}
	root.SetIn(a.in)
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	root.SetVersionTemplate("troupe {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddGroup(&cobra.Group{ID: "cli", Title: "Using a cell:"}, &cobra.Group{ID: "roles", Title: "Running a cell:"},
		&cobra.Group{ID: "tools", Title: "Tools:"})
	for _, c := range []*cobra.Command{a.applyCommand(), a.getCommand(), a.describeCommand(), a.watchCommand(), a.deleteCommand(),
		a.jobCommand(), a.logsCommand(), a.statusCommand(), a.configCommand()} {
		c.GroupID = "cli"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.upCommand(), a.storeCommand(), a.agentCommand(), a.schedulerCommand(),
		a.controllerCommand(), a.uiCommand(), a.certsCommand()} {
		c.GroupID = "roles"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.benchCommand(), a.simCommand(), a.traceCommand(), a.versionCommand()} {
		c.GroupID = "tools"
		root.AddCommand(c)
	}
	root.SetHelpCommandGroupID("tools")
	root.SetCompletionCommandGroupID("tools")
	return root
}

// Argument checks that fail as usage errors.

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("give %s", what)
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("give %s", what)
		}
		return nil
	}
}

// group makes cmd a command of subcommands only: run without one, or
// with an unknown one, it fails as a usage error naming them.
func group(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	var names []string
	for _, s := range subs {
		cmd.AddCommand(s)
		names = append(names, s.Name())
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("give a subcommand: %s", strings.Join(names, ", "))
		}
		return usagef("unknown subcommand %q (%s)", args[0], strings.Join(names, ", "))
	}
	return cmd
}
