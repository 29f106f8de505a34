package node

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Close ends a joined node's promotion loops (learner.go) before it closes
// the Raft host, and returns only once they have returned: a loop that
// outlived Close read the NodeHost while NodeHost.Close tore it down (a
// data race, which -race reported for about one Close in five here). The
// node joins a cell that never adds it, so its loops poll until Close; a
// heartbeat of 1 ms keeps them busy.
func TestCloseEndsPromotionLoops(t *testing.T) {
	for range 20 {
		cfg := testConfig(t, t.TempDir())
		cfg.Join = true
		cfg.RTT, cfg.HeartbeatRTT, cfg.ElectionRTT = time.Millisecond, 1, 10
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.NonVoting(); len(got) != 0 {
			t.Fatalf("a node not added yet is non-voting in shards %v", got)
		}
		n.Close()
		buf := make([]byte, 1<<20)
		for {
			if k := runtime.Stack(buf, true); k < len(buf) {
				buf = buf[:k]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		if strings.Contains(string(buf), ".(*raftBackend).promoteWhenCaughtUp(") {
			t.Fatalf("a promotion loop runs after Close returned:\n%s", buf)
		}
	}
}
