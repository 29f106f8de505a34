package main

import (
	"testing"

	"github.com/troupe-cluster/troupe/agents/agent"
	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
	"github.com/troupe-cluster/troupe/schedulers/plugins/tainttoleration"
)

func TestValidTag(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":             "v1.2.3",
		"4f69e03-dirty-next": "4f69e03-dirty-next",
		"-x+y/z":             "x-y-z",
		"":                   "dev",
	} {
		if got := validTag(in); got != want {
			t.Errorf("validTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	metrics := "# HELP troupe_build_info x\n# TYPE troupe_build_info gauge\n" +
		`troupe_build_info{build_date="2026-11-24T10:56:21Z",commit="abc",go_version="go1.26.8",version="v1-next"} 1` + "\n"
	m := buildInfoRE.FindStringSubmatch(metrics)
	if m == nil || m[1] != "v1-next" {
		t.Fatalf("got %v", m)
	}
}

// hollowJob's jobs tolerate the hollow machines' taint and select their
// label, so they land on them and on no other machine.
func TestHollowJobTargetsHollowMachines(t *testing.T) {
	ms, err := clientlib.DecodeManifests([]byte(hollowJob("h", 3, "1s")))
	if err != nil || len(ms) != 1 {
		t.Fatalf("%d manifests (%v)", len(ms), err)
	}
	spec := ms[0].Object.(*troupev1.Job).GetSpec()
	if !tainttoleration.Tolerated(spec.GetTolerations(), agent.HollowTaint()) ||
		spec.GetConstraints().GetMatchLabels()[agent.HollowLabel] != agent.HollowValue {
		t.Fatalf("job spec %v", spec)
	}
}
