// Package scripttest is what the controllers' data-driven script tests
// share (github.com/cockroachdb/datadriven, testdata/*.txt): reading a
// directive's arguments, a script's clock, and running the scripts.
//
// A directive's arguments are key=value or flags; values hold no spaces.
// A handler takes each argument it knows through Args, and Done fails the
// directive on any it did not take (a misspelt key is a mistake in the
// script, not a default).
package scripttest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Run runs every script in testdata/*.txt, each on a fresh state from
// newState, handing each directive to the command of its name; an
// unknown command, or an argument the command did not take, fails the
// directive, and an empty output reads "ok".
func Run[S any](t *testing.T, newState func() S, commands map[string]func(S, *Args) string) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a script", path)
		}
		s := newState()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			a := NewArgs(t, td)
			h, ok := commands[td.Cmd]
			if !ok {
				a.Fatalf("unknown command %q", td.Cmd)
			}
			out := h(s, a)
			a.Done()
			if out == "" {
				out = "ok"
			}
			return out
		})
	})
}

// Epoch is time zero of every script: times print as offsets from it.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// At formats t as its offset from Epoch ("+1m30s"), "-" for the zero or
// nil time.
func At(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return "+" + t.AsTime().Sub(Epoch).String()
}

// Args reads the arguments of one directive.
type Args struct {
	t    testing.TB
	td   *datadriven.TestData
	used map[string]bool
}

// NewArgs returns the arguments of td.
func NewArgs(t testing.TB, td *datadriven.TestData) *Args {
	return &Args{t: t, td: td, used: map[string]bool{}}
}

// Fatalf fails the directive: a mistake in the script.
func (a *Args) Fatalf(format string, args ...any) {
	a.t.Helper()
	a.td.Fatalf(a.t, format, args...)
}

func (a *Args) get(key string) (datadriven.CmdArg, bool) {
	arg, ok := a.td.Arg(key)
	if ok {
		a.used[key] = true
	}
	return arg, ok
}

// Has reports whether key is given (and takes it).
func (a *Args) Has(key string) bool {
	_, ok := a.get(key)
	return ok
}

// Flag reads key as a flag: true if given without a value, or as
// key=true; false if absent or key=false.
func (a *Args) Flag(key string) bool {
	arg, ok := a.get(key)
	switch {
	case !ok:
		return false
	case len(arg.Vals) == 0:
		return true
	case len(arg.Vals) == 1 && (arg.Vals[0] == "true" || arg.Vals[0] == "false"):
		return arg.Vals[0] == "true"
	}
	a.Fatalf("%s is a flag: give it alone, or =true or =false", key)
	return false
}

// Str reads key=value, def when key is absent.
func (a *Args) Str(key, def string) string {
	arg, ok := a.get(key)
	if !ok {
		return def
	}
	if len(arg.Vals) != 1 {
		a.Fatalf("%s wants one value", key)
	}
	return arg.Vals[0]
}

// Required reads key=value, which must be given.
func (a *Args) Required(key string) string {
	if !a.td.HasArg(key) {
		a.Fatalf("%s needs %s=", a.td.Cmd, key)
	}
	return a.Str(key, "")
}

// Int reads key=N.
func (a *Args) Int(key string, def int32) int32 {
	v := a.Str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		a.Fatalf("%s=%s: %v", key, v, err)
	}
	return int32(n)
}

// Duration reads key=DURATION (time.ParseDuration).
func (a *Args) Duration(key string, def time.Duration) time.Duration {
	v := a.Str(key, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.Fatalf("%s=%s: %v", key, v, err)
	}
	return d
}

// Enum reads key=value, one of values ("" and absent: def).
func (a *Args) Enum(key, def string, values ...string) string {
	v := a.Str(key, def)
	if v != def && !slices.Contains(values, v) {
		a.Fatalf("%s=%s: want one of %s", key, v, strings.Join(values, ", "))
	}
	return v
}

// Positional returns the directive's one argument given without a key
// or value ("advance 5s"), or fails.
func (a *Args) Positional() string {
	for _, arg := range a.td.CmdArgs {
		if len(arg.Vals) == 0 && !a.used[arg.Key] {
			a.used[arg.Key] = true
			return arg.Key
		}
	}
	a.Fatalf("%s needs an argument", a.td.Cmd)
	return ""
}

// Done fails the directive if it has arguments no handler took.
func (a *Args) Done() {
	a.t.Helper()
	var unknown []string
	for _, arg := range a.td.CmdArgs {
		if !a.used[arg.Key] {
			unknown = append(unknown, arg.String())
		}
	}
	if len(unknown) > 0 {
		a.Fatalf("%s: unknown arguments %s", a.td.Cmd, strings.Join(unknown, " "))
	}
}

// Clock is a script's clock: Epoch plus what advance directives added.
type Clock struct{ Now time.Time }

// NewClock starts at Epoch.
func NewClock() *Clock { return &Clock{Now: Epoch} }

// Advance handles "advance DURATION" and prints the new time.
func (c *Clock) Advance(a *Args) string {
	d, err := time.ParseDuration(a.Positional())
	if err != nil || d < 0 {
		a.Fatalf("advance wants a non-negative duration: %v", err)
	}
	c.Now = c.Now.Add(d)
	return fmt.Sprintf("now %s", At(timestamppb.New(c.Now)))
}
