package clientlib

import "strconv"

// binaryUnits are the suffixes FormatQuantity writes amounts of bytes in,
// largest first.
var binaryUnits = []struct {
	suffix string
	size   int64
}{{"Pi", 1 << 50}, {"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}}

// FormatQuantity writes an amount of a resource as every part of Troupe
// shows it (the CLI's tables and describe, the schedulers' reasons), as
// Kubernetes writes quantities: cpu in millicores with an "m" ("500m",
// "64000m"); memory and ephemeral-storage in bytes, in the largest binary
// unit that writes the amount exactly ("1Gi", "1536Mi", "1000000"); any
// other resource as a plain count ("2").
func FormatQuantity(resource string, v int64) string {
	switch resource {
	case "cpu":
		return strconv.FormatInt(v, 10) + "m"
	case "memory", "ephemeral-storage":
		if v != 0 {
			for _, u := range binaryUnits {
				if v%u.size == 0 {
					return strconv.FormatInt(v/u.size, 10) + u.suffix
				}
			}
		}
	}
	return strconv.FormatInt(v, 10)
}
