package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
)

// The pages write amounts and times as the CLI does: CPU in millicores,
// memory in binary units (clientlib.FormatQuantity), ages in the largest
// unit that says them.

// ago is how long before now t was, as "5s", "3m", "2h", "4d" ("-" for
// no time).
func ago(now time.Time, t *timestamppb.Timestamp) string {
	if !t.IsValid() || t.AsTime().IsZero() {
		return "-"
	}
	return short(now.Sub(t.AsTime()))
}

// short writes d in its largest unit, rounded down ("0s" for less than a
// second or a negative d).
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// wait writes a short duration with a precision that suits it: "850ms",
// "2.3s", "4m".
func wait(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return short(d)
}

// quantity is clientlib.FormatQuantity.
func quantity(resource string, v int64) string { return clientlib.FormatQuantity(resource, v) }

// memory writes an amount of memory in the largest binary unit under it,
// with a decimal: "100.3Gi" (quantity writes it exactly).
func memory(v int64) string {
	for _, u := range []struct {
		unit  string
		shift uint
	}{{"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if v >= 1<<u.shift {
			return trimZero(fmt.Sprintf("%.1f", float64(v)/float64(int64(1)<<u.shift))) + u.unit
		}
	}
	return strconv.FormatInt(v, 10)
}

// cores writes millicores as cores, "12.5".
func cores(milli int64) string { return trimZero(fmt.Sprintf("%.1f", float64(milli)/1000)) }

// percent is part of whole in whole percent, rounded down ("-" for no
// whole).
func percent(part, whole int64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", part*100/whole)
}

// ratio writes a figure with three decimals, "-" if it is not a number.
func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

// rate writes a rate per second with a precision that suits it.
func rate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// word is an enum's name without its prefix, "RUNNING" of
// JOB_PHASE_RUNNING.
func word(name, prefix string) string { return strings.TrimPrefix(name, prefix) }

// resources writes requests as "cpu=500m,memory=64Mi", in name order.
func resources(rs map[string]int64) string {
	var parts []string
	for _, r := range sortedKeys(rs) {
		parts = append(parts, r+"="+quantity(r, rs[r]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}
