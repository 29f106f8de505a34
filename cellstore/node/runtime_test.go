package node

import (
	"runtime"
	"testing"
)

// RaiseGOMAXPROCS doubles the default, and leaves a count the environment
// sets alone.
func TestRaiseGOMAXPROCS(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	t.Setenv("GOMAXPROCS", "")
	if n := RaiseGOMAXPROCS(); n != 2*before || runtime.GOMAXPROCS(0) != n {
		t.Fatalf("RaiseGOMAXPROCS = %d, GOMAXPROCS %d; want both %d", n, runtime.GOMAXPROCS(0), 2*before)
	}
	runtime.GOMAXPROCS(before)
	t.Setenv("GOMAXPROCS", "1")
	if n := RaiseGOMAXPROCS(); n != before || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("with GOMAXPROCS set: RaiseGOMAXPROCS = %d, GOMAXPROCS %d; want both %d (unchanged)", n, runtime.GOMAXPROCS(0), before)
	}
}
