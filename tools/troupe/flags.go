package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flags: every command parses its flags with pflag (through cobra), so
// flags go anywhere on the line, before or after arguments; "--" ends
// them. Three rules come on top:
//
//   - The environment: every flag the command line leaves out is taken
//     from TROUPE_<FLAG> when set (TROUPE_ and the flag's name in
//     capitals, '-' as '_': --data-dir from TROUPE_DATA_DIR); a flag with
//     a one-letter shorthand also from TROUPE_<SHORTHAND> (-n from
//     TROUPE_N), the name it had before it had a long one. A container or
//     a systemd unit configures a role by environment alone; a flag given
//     wins. Flags marked noEnv (help, troupe config set-context's) are
//     never taken from it.
//   - Deprecated aliases: an old name of a flag (--store and --endpoints
//     for --endpoint) sets the same value, says it is deprecated, and is
//     read from its own variable (TROUPE_STORE) only when neither the flag
//     nor its variable is set.
//   - One dash: -endpoint is read as --endpoint, as Go's flag package
//     read it, when the command has a long flag of that name
//     (normalizeArgs); -o, -n, -l, -f stay shorthands (-owide too).

const (
	// annotationAliasOf marks a deprecated alias with its flag's name.
	annotationAliasOf = "troupe/alias-of"
	// annotationNoEnv marks a flag the environment never sets.
	annotationNoEnv = "troupe/no-env"
)

// envName is the environment variable of flag name.
func envName(name string) string {
	return "TROUPE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// addAlias defines alias as a deprecated name of fs's flag name: it sets
// the same value.
func addAlias(fs *pflag.FlagSet, name, alias string) {
	f := fs.Lookup(name)
	fs.AddFlag(&pflag.Flag{Name: alias, Value: f.Value, DefValue: f.DefValue, NoOptDefVal: f.NoOptDefVal,
		Usage: "deprecated name of --" + name})
	_ = fs.SetAnnotation(alias, annotationAliasOf, []string{name})
	_ = fs.MarkDeprecated(alias, "use --"+name)
}

// noEnv marks flags of fs that the environment does not set.
func noEnv(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		_ = fs.SetAnnotation(n, annotationNoEnv, []string{"true"})
	}
}

// given reports whether any of the flags names was set (on the command
// line or from the environment).
func given(fs *pflag.FlagSet, names ...string) bool {
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Changed {
			return true
		}
	}
	return false
}

// fillFromEnv sets every flag of fs the command line left out from the
// environment (lookup), as the rules above say, and returns the names of
// the flags it set. Deprecated variables are warned about on warn.
func fillFromEnv(fs *pflag.FlagSet, lookup func(string) (string, bool), warn io.Writer) (map[string]bool, error) {
	fromEnv := map[string]bool{}
	var flags, aliases []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		switch {
		case f.Name == "help" || len(f.Annotations[annotationNoEnv]) > 0 || f.Changed:
		case len(f.Annotations[annotationAliasOf]) > 0:
			aliases = append(aliases, f)
		default:
			flags = append(flags, f)
		}
	})
	set := func(f *pflag.Flag, name, v string) error {
		if err := fs.Set(f.Name, v); err != nil {
			return fmt.Errorf("%s=%q: %w", name, v, err)
		}
		fromEnv[f.Name] = true
		return nil
	}
	for _, f := range flags {
		if given(fs, aliasesOf(fs, f.Name)...) {
			continue // given on the command line by its old name
		}
		names := []string{envName(f.Name)}
		if f.Shorthand != "" {
			names = append(names, envName(f.Shorthand))
		}
		for _, name := range names {
			if v, ok := lookup(name); ok {
				if err := set(f, name, v); err != nil {
					return nil, err
				}
				break
			}
		}
	}
	for _, a := range aliases {
		target := a.Annotations[annotationAliasOf][0]
		name := envName(a.Name)
		v, ok := lookup(name)
		if !ok || given(fs, target) || given(fs, aliasesOf(fs, target)...) {
			continue
		}
		fmt.Fprintf(warn, "%s is deprecated: use %s\n", name, envName(target))
		if err := set(a, name, v); err != nil {
			return nil, err
		}
	}
	return fromEnv, nil
}

// aliasesOf are the deprecated aliases of fs's flag name.
func aliasesOf(fs *pflag.FlagSet, name string) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if a := f.Annotations[annotationAliasOf]; len(a) > 0 && a[0] == name {
			out = append(out, f.Name)
		}
	})
	return out
}

// normalizeArgs rewrites the arguments of the command root runs for args
// so that a long flag written with one dash (-endpoint X, -node-id=3, as
// Go's flag package took them and older scripts, units and docs write
// them) has two. Only names the command defines as long flags are
// rewritten: -o wide, -owide and -n default stay shorthands. Values are
// skipped (a flag that takes one and has no "=" consumes the next
// argument), and nothing after "--" changes. Commands that parse their
// own arguments (troupe sim) get them as they are.
func normalizeArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args
	}
	long := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		for c := cmd; c != nil; c = c.Parent() {
			if f := c.PersistentFlags().Lookup(name); f != nil {
				return f
			}
		}
		return nil
	}
	short := func(name string) *pflag.Flag {
		if f := cmd.Flags().ShorthandLookup(name); f != nil {
			return f
		}
		for c := cmd; c != nil; c = c.Parent() {
			if f := c.PersistentFlags().ShorthandLookup(name); f != nil {
				return f
			}
		}
		return nil
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		var f *pflag.Flag
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case strings.HasPrefix(a, "--"):
			f = long(name)
		case len(name) > 1 && (long(name) != nil || name == "help"):
			out[len(out)-1] = "-" + a
			f = long(name)
		case len(name) == 1:
			f = short(name)
		default:
			continue // shorthands with a value attached (-owide), or unknown
		}
		if f != nil && !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// flagVars is what both flag packages offer to define string and bool
// flags: the credentials' flags (tlsFlags) go on either.
type flagVars interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

var (
	_ flagVars = (*pflag.FlagSet)(nil)
	_ flagVars = (*flag.FlagSet)(nil)
)
