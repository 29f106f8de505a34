package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseFlagsFromEnvironment(t *testing.T) {
	t.Setenv("TROUPE_DATA_DIR", "/from/env")
	t.Setenv("TROUPE_NODE_ID", "7")
	t.Setenv("TROUPE_RAFT_ADDR", "store-1.store:7100")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	dir := fs.String("data-dir", "d", "")
	id := fs.Uint64("node-id", 1, "")
	raft := fs.String("raft-addr", "", "")
	if err := parseFlags(fs, []string{"--node-id", "3"}); err != nil {
		t.Fatal(err)
	}
	if *dir != "/from/env" || *id != 3 || *raft != "store-1.store:7100" {
		t.Fatalf("data-dir %q node-id %d raft-addr %q: a flag given wins, the environment fills the rest", *dir, *id, *raft)
	}
	t.Setenv("TROUPE_NODE_ID", "seven")
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Uint64("node-id", 1, "")
	if err := parseFlags(fs, nil); err == nil || !strings.Contains(err.Error(), `TROUPE_NODE_ID="seven"`) {
		t.Fatalf("a bad value in the environment: %v", err)
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
