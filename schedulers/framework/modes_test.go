package framework_test

import (
	"testing"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// The modes' configuration names read back to the modes they name.
func TestParseModes(t *testing.T) {
	for _, c := range []struct {
		name string
		want framework.ConflictMode
	}{{"fine", framework.Fine}, {"coarse", framework.Coarse}, {"coarse-claims", framework.CoarseClaims}} {
		got, err := framework.ParseConflictMode(c.name)
		if err != nil || got != c.want || got.String() != c.name {
			t.Errorf("ParseConflictMode(%q) = %v, %v", c.name, got, err)
		}
	}
	for _, c := range []struct {
		name, canonical string
		want            framework.TxnMode
	}{
		{"incremental", "incremental", framework.Incremental}, {"gang", "gang", framework.AllOrNothing},
		{"all-or-nothing", "gang", framework.AllOrNothing}, {"atomic", "atomic", framework.Atomic},
	} {
		got, err := framework.ParseTxnMode(c.name)
		if err != nil || got != c.want || got.String() != c.canonical {
			t.Errorf("ParseTxnMode(%q) = %v, %v", c.name, got, err)
		}
	}
	if _, err := framework.ParseConflictMode("sequence-numbers"); err == nil {
		t.Error("an unknown conflict mode parsed")
	}
	if _, err := framework.ParseTxnMode("Atomic"); err == nil {
		t.Error("an unknown transaction mode parsed")
	}
	if n, m := len(framework.ConflictModes()), len(framework.TxnModes()); n != 3 || m != 3 {
		t.Errorf("%d conflict modes and %d transaction modes named", n, m)
	}
}
