package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// env is an environment for fillFromEnv.
func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

// A flag left out of the command line comes from TROUPE_<FLAG>; a flag
// given wins; a bad value in the environment names its variable.
func TestFillFromEnvironment(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	dir := fs.String("data-dir", "d", "")
	id := fs.Uint64("node-id", 1, "")
	raft := fs.String("raft-addr", "", "")
	ns := fs.StringP("namespace", "n", "default", "")
	if err := fs.Parse([]string{"--node-id", "3"}); err != nil {
		t.Fatal(err)
	}
	set, err := fillFromEnv(fs, env(map[string]string{"TROUPE_DATA_DIR": "/from/env", "TROUPE_NODE_ID": "7",
		"TROUPE_RAFT_ADDR": "store-1.store:7100", "TROUPE_N": "team-a"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if *dir != "/from/env" || *id != 3 || *raft != "store-1.store:7100" || *ns != "team-a" {
		t.Fatalf("data-dir %q node-id %d raft-addr %q namespace %q: a flag given wins, the environment fills the rest (a shorthand's too)", *dir, *id, *raft, *ns)
	}
	if !set["data-dir"] || set["node-id"] {
		t.Fatalf("set from the environment: %v", set)
	}

	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Uint64("node-id", 1, "")
	if _, err := fillFromEnv(fs, env(map[string]string{"TROUPE_NODE_ID": "seven"}), nil); err == nil || !strings.Contains(err.Error(), `TROUPE_NODE_ID="seven"`) {
		t.Fatalf("a bad value in the environment: %v", err)
	}
}

// A deprecated alias (--store of --endpoint) sets its flag, from the
// command line or from its own variable, which the flag's variable beats.
func TestDeprecatedAlias(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "default"},
		{[]string{"--store", "a:1"}, nil, "a:1"},
		{nil, map[string]string{"TROUPE_STORE": "b:1"}, "b:1"},
		{nil, map[string]string{"TROUPE_STORE": "b:1", "TROUPE_ENDPOINT": "c:1"}, "c:1"},
		{[]string{"--endpoint", "d:1"}, map[string]string{"TROUPE_STORE": "b:1"}, "d:1"},
		{[]string{"--store", "a:1"}, map[string]string{"TROUPE_ENDPOINT": "c:1"}, "a:1"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var warn bytes.Buffer
		fs.SetOutput(&warn)
		ep := fs.String("endpoint", "default", "")
		addAlias(fs, "endpoint", "store")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if _, err := fillFromEnv(fs, env(tc.env), &warn); err != nil {
			t.Fatal(err)
		}
		if *ep != tc.want {
			t.Errorf("args %v, env %v: endpoint %q, want %q", tc.args, tc.env, *ep, tc.want)
		}
		if (slices.Contains(tc.args, "--store") || (tc.want == "b:1")) != strings.Contains(warn.String(), "deprecated") {
			t.Errorf("args %v, env %v: warned %q", tc.args, tc.env, warn.String())
		}
	}
}

// normalizeArgs gives a long flag written with one dash its second, and
// leaves shorthands, values and what follows "--" alone.
func TestNormalizeArgs(t *testing.T) {
	root := &cobra.Command{Use: "troupe"}
	get := &cobra.Command{Use: "get", Run: func(*cobra.Command, []string) {}}
	get.Flags().String("endpoint", "", "")
	get.Flags().StringP("output", "o", "", "")
	get.Flags().StringP("selector", "l", "", "")
	get.Flags().Bool("insecure", false, "")
	root.AddCommand(get)
	for in, want := range map[string]string{
		"get jobs -endpoint x -o yaml":        "get jobs --endpoint x -o yaml",
		"get -endpoint=x jobs":                "get --endpoint=x jobs",
		"get jobs -owide -insecure web":       "get jobs -owide --insecure web",
		"get jobs -l -endpoint -endpoint y":   "get jobs -l -endpoint --endpoint y",
		"get jobs -unknown x -help":           "get jobs -unknown x --help",
		"get jobs --endpoint -x -- -endpoint": "get jobs --endpoint -x -- -endpoint",
		"nosuch -endpoint x":                  "nosuch -endpoint x",
	} {
		if got := strings.Join(normalizeArgs(root, strings.Fields(in)), " "); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestNodeIDOfHostname(t *testing.T) {
	for host, want := range map[string]uint64{"store-0": 1, "troupe-store-2": 3, "s12": 13} {
		if got, err := nodeIDOf(host); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", host, got, err, want)
		}
	}
	if _, err := nodeIDOf("store"); err == nil {
		t.Error("a hostname without a number gave an ID")
	}
}
