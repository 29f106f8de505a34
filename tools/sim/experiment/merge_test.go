package experiment

import (
	"strings"
	"testing"
)

// Two runs of one sweep, merged, are one sweep whose points are series
// named for each way, the runs pointing at their own points, and the
// summary worked out again; sweeps that differ are refused.
func TestMerge(t *testing.T) {
	results := func(busy float64) *Results {
		r := &Results{Sweep: "tjob-sweep", XS: []float64{1, 10}, Runners: []string{"memory"}, Command: "troupe sim sweep tjob-sweep",
			Points: []Point{{X: 1}, {X: 10}}}
		for pt := range r.Points {
			for seed := uint64(1); seed <= 2; seed++ {
				r.Runs = append(r.Runs, Run{Runner: "memory", Point: pt, Seed: seed,
					Roles: []RoleValues{{Role: "service", Schedulers: 1, Values: map[string]float64{"busyness_fraction": busy * float64(pt+1) * float64(seed)}}}})
			}
		}
		r.summarise()
		return r
	}
	m, err := Merge([]*Results{results(0.1), results(0.2)}, []string{"lightweight", "troupe"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Points) != 4 || m.Points[2].Series != "troupe" || m.Points[2].X != 1 || m.Points[1].Series != "lightweight" {
		t.Fatalf("points %+v", m.Points)
	}
	if len(m.Runs) != 8 || m.Runs[4].Point != 2 || m.Runs[7].Point != 3 {
		t.Fatalf("runs' points %v %v", m.Runs[4].Point, m.Runs[7].Point)
	}
	want := map[string]float64{"lightweight 1": 0.15, "lightweight 10": 0.3, "troupe 1": 0.3, "troupe 10": 0.6}
	for _, s := range m.Summary {
		key := s.Series + " " + formatFloat(s.X)
		if got := s.Mean["busyness_fraction"]; got < want[key]-1e-9 || got > want[key]+1e-9 {
			t.Errorf("%s: mean busyness %v, want %v", key, got, want[key])
		}
		delete(want, key)
	}
	if len(want) > 0 || !strings.Contains(m.Command, "lightweight: troupe sim sweep") {
		t.Errorf("summary lacks %v; command %q", want, m.Command)
	}
	other := results(0.1)
	other.XS = []float64{1, 100}
	if _, err := Merge([]*Results{results(0.1), other}, []string{"a", "b"}); err == nil {
		t.Error("sweeps over other values merged")
	}
}
