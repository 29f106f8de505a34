package faults

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	names  = flag.String("workloads", "register,bank", "the workloads whose rounds TestFaults runs, comma-separated: register, bank")
)

// roundConfigs make the rounds of each workload, by name.
var roundConfigs = map[string]func(seed int64, binary, dir, outDir string) RoundConfig{
	"register": DefaultRoundConfig,
	"bank":     BankRoundConfig,
}

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

// TestFaults runs -rounds rounds of each of -workloads under every
// fault; a failed round says how to run it again.
func TestFaults(t *testing.T) {
	requireProcesses(t)
	bin := buildTroupe(t)
	for _, name := range strings.Split(*names, ",") {
		config, ok := roundConfigs[name]
		if !ok {
			t.Fatalf("-workloads: no workload %q", name)
		}
		t.Run(name, func(t *testing.T) {
			var total Report
			total.Tally = map[string]int{}
			inconclusive := 0
			for r := range *rounds {
				rep := runRound(t, config(*seed+int64(r), bin, "", *outDir), *load)
				total.Ops += rep.Ops
				total.Ambiguous += rep.Ambiguous
				total.Faults = append(total.Faults, rep.Faults...)
				total.Elapsed += rep.Elapsed
				for k, n := range rep.Tally {
					total.Tally[k] += n
				}
				if rep.Result == porcupine.Unknown {
					inconclusive++
				}
			}
			t.Logf("%d %s rounds from seed %d: %d operations (%d ambiguous), %d faults, %d checks out of time, %v; %s",
				*rounds, name, *seed, total.Ops, total.Ambiguous, len(total.Faults), inconclusive, total.Elapsed.Round(time.Second), tally(total.Tally))
		})
	}
}

// tally lists counts in name order: "a 3, b 5".
func tally(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
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

// TestKillDriverUnderLoad kills the node driving cross-shard transfers
// after their prepares, before their resolution and replies, again and
// again, under the bank's load: the survivors settle what it prepared
// (a retry of each transfer gets its outcome), and the books balance.
func TestKillDriverUnderLoad(t *testing.T) {
	requireProcesses(t)
	cfg := BankRoundConfig(*seed, buildTroupe(t), "", *outDir)
	cfg.Faults = []Fault{KillDriver()}
	cfg.Hold = 500 * time.Millisecond
	// The fault restarts node 1 and waits for it to know the leaders
	// within the load: under make test's parallel packages that took more
	// than the 5 s a 6 s load left (the fault was then not injected).
	rep := runRound(t, cfg, 10*time.Second)
	// A pinned transfer ends without an answer when the driver held it,
	// which it does only once some participant prepared a part (holding
	// intents), or was killed before: its settle says what came of it,
	// committed or aborted (ABORTED, or the refusal of a participant that
	// did not prepare, INTENT or BOUND_EXCEEDED).
	settled := 0
	for k, n := range rep.Tally {
		if strings.HasPrefix(k, "pinned transfers settled ") && k != "pinned transfers settled unknown" {
			settled += n
		}
	}
	if settled == 0 {
		t.Errorf("no transfer the killed driver had prepared was settled: %s", tally(rep.Tally))
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
	cfg.Cluster.Dir, cfg.Load, cfg.Logf, cfg.KeepHistory = dir, load, t.Logf, *keep
	rep, err := RunRound(t.Context(), cfg)
	if err != nil {
		t.Fatalf("seed %d: the round could not run (cell data in %s): %v", cfg.Seed, dir, err)
	}
	t.Logf("seed %d: %d operations (%d ambiguous), check %v, %v; faults: %s", rep.Seed, rep.Ops, rep.Ambiguous, rep.Result,
		rep.Elapsed.Round(time.Millisecond), strings.Join(rep.Faults, "; "))
	if len(rep.Tally) > 0 {
		t.Logf("seed %d: %s", rep.Seed, tally(rep.Tally))
	}
	if len(rep.Problems) > 0 {
		t.Errorf("seed %d failed:\n  %s\nfiles:\n  %s\ncell data: %s\nrun it again: go test ./tools/faults -run '^%s$' -count=1 -seed %d -load %v",
			rep.Seed, strings.Join(rep.Problems, "\n  "), strings.Join(rep.Files, "\n  "), dir, t.Name(), rep.Seed, load)
		return rep
	}
	os.RemoveAll(dir)
	return rep
}

// TestLagNodeCatchesUpFromSnapshot cuts a node off until the other nodes
// have compacted their Raft logs past it, again and again under load:
// each time it catches up from a snapshot of the leader's state (the
// heal fails otherwise), and the history stays linearizable.
func TestLagNodeCatchesUpFromSnapshot(t *testing.T) {
	requireProcesses(t)
	cfg := DefaultRoundConfig(*seed, buildTroupe(t), "", *outDir)
	cfg.Faults = []Fault{LagNode()}
	cfg.Hold = 500 * time.Millisecond
	rep := runRound(t, cfg, 10*time.Second)
	caught := 0
	for _, f := range rep.Faults {
		if strings.HasSuffix(f, "compacted past it") {
			caught++
		}
	}
	if caught == 0 {
		t.Errorf("no node was cut off long enough to need a snapshot: %s", strings.Join(rep.Faults, "; "))
	}
}
