package faults

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// `make test` runs one short round; `make test-faults` many long ones.
var (
	rounds = flag.Int("rounds", 1, "fault rounds to run")
	seed   = flag.Int64("seed", 1, "seed of the first round; round r uses seed+r")
	load   = flag.Duration("load", 18*time.Second, "how long each round's clients run")
	outDir = flag.String("out", filepath.Join(os.TempDir(), "troupe-faults"), "where failed rounds' histories and visualizations go")
	keep   = flag.Bool("keep", false, "write passed rounds' histories and visualizations too")
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// TestMain removes the binary buildTroupe built.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// buildTroupe builds the troupe binary once for the package's tests.
func buildTroupe(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "troupe-faults-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "troupe")
		cmd := exec.Command("go", "build", "-o", builtBin, "github.com/troupe-cluster/troupe/tools/troupe")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// requireProcesses skips t in -short mode and where the harness cannot
// make network namespaces (it needs CAP_SYS_ADMIN).
func requireProcesses(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs store processes")
	}
	ns, err := newNetns()
	if err != nil {
		t.Skipf("the fault harness needs network namespaces: %v", err)
	}
	ns.close()
}

// TestFaults runs -rounds rounds of the register workload under every
// fault; a failed round says how to run it again.
func TestFaults(t *testing.T) {
	requireProcesses(t)
	bin := buildTroupe(t)
	var total Report
	inconclusive := 0
	for r := range *rounds {
		rep := runRound(t, DefaultRoundConfig(*seed+int64(r), bin, "", *outDir), *load)
		total.Ops += rep.Ops
		total.Ambiguous += rep.Ambiguous
		total.Faults = append(total.Faults, rep.Faults...)
		total.Elapsed += rep.Elapsed
		if rep.Result == porcupine.Unknown {
			inconclusive++
		}
	}
	t.Logf("%d rounds from seed %d: %d operations (%d ambiguous), %d faults, %d checks out of time, %v",
		*rounds, *seed, total.Ops, total.Ambiguous, len(total.Faults), inconclusive, total.Elapsed.Round(time.Second))
}

// TestKillAllUnderLoad kills every replica again and again while clients
// commit: nothing acknowledged may be lost.
func TestKillAllUnderLoad(t *testing.T) {
	requireProcesses(t)
	cfg := DefaultRoundConfig(*seed, buildTroupe(t), "", *outDir)
	cfg.Faults = []Fault{KillAll()}
	cfg.Hold = 500 * time.Millisecond
	rep := runRound(t, cfg, 8*time.Second)
	if len(rep.Faults) == 0 {
		t.Error("no fault was injected")
	}
}

// runRound runs a round with its cell in a new directory, kept if the
// round fails, and reports what it did.
func runRound(t *testing.T, cfg RoundConfig, load time.Duration) Report {
	t.Helper()
	dir, err := os.MkdirTemp("", fmt.Sprintf("troupe-faults-%d-", cfg.Seed))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cell.Dir, cfg.Load, cfg.Logf, cfg.KeepHistory = dir, load, t.Logf, *keep
	rep, err := RunRound(t.Context(), cfg)
	if err != nil {
		t.Fatalf("seed %d: the round could not run (cell data in %s): %v", cfg.Seed, dir, err)
	}
	t.Logf("seed %d: %d operations (%d ambiguous), check %v, %v; faults: %s", rep.Seed, rep.Ops, rep.Ambiguous, rep.Result,
		rep.Elapsed.Round(time.Millisecond), strings.Join(rep.Faults, "; "))
	if len(rep.Problems) > 0 {
		t.Errorf("seed %d failed:\n  %s\nfiles:\n  %s\ncell data: %s\nrun it again: go test ./tools/faults -run '^%s$' -count=1 -seed %d -load %v",
			rep.Seed, strings.Join(rep.Problems, "\n  "), strings.Join(rep.Files, "\n  "), dir, t.Name(), rep.Seed, load)
		return rep
	}
	os.RemoveAll(dir)
	return rep
}
