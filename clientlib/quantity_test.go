package clientlib

import "testing"

func TestFormatQuantity(t *testing.T) {
	for _, tc := range []struct {
		resource string
		v        int64
		want     string
	}{
		{"cpu", 0, "0m"},
		{"cpu", 500, "500m"},
		{"cpu", 64000, "64000m"},
		{"memory", 0, "0"},
		{"memory", 600, "600"},
		{"memory", 1 << 20, "1Mi"},
		{"memory", 1536 << 20, "1536Mi"},
		{"memory", 64 << 30, "64Gi"},
		{"memory", 1000000, "1000000"},
		{"memory", -(2 << 30), "-2Gi"},
		{"ephemeral-storage", 2 << 40, "2Ti"},
		{"gpu", 2, "2"},
	} {
		if got := FormatQuantity(tc.resource, tc.v); got != tc.want {
			t.Errorf("FormatQuantity(%q, %d) = %q, want %q", tc.resource, tc.v, got, tc.want)
		}
	}
}
