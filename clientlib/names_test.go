package clientlib

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// The hand-written name rules accept exactly what their regular
// expressions do, on every string of up to three characters of an
// alphabet with each class's edge cases and on random longer ones.
func TestNameRules(t *testing.T) {
	rules := []struct {
		name string
		fn   func(string) bool
		re   *regexp.Regexp
	}{
		{"dnsLabel", isDNSLabel, regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)},
		{"dnsSubdomain", isDNSSubdomain, regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)},
		{"labelName", isLabelName, regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)},
		{"userName", isUserName, regexp.MustCompile(`^[a-z_][-a-z0-9_]*\$?$`)},
	}
	alphabet := []string{"a", "z", "0", "9", "A", "Z", "-", "_", ".", "$", "/", " ", "é", "\xff"}
	var all []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		all = append(all, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+c, n-1)
		}
	}
	gen("", 3)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, 0, 12)
		for range 1 + r.IntN(12) {
			b = append(b, alphabet[r.IntN(len(alphabet))]...)
		}
		all = append(all, string(b), "web-"+string(b), string(b)+"x")
	}
	for _, rule := range rules {
		for _, s := range all {
			if got, want := rule.fn(s), rule.re.MatchString(s); got != want {
				t.Errorf("%s(%q) = %v, want %v", rule.name, s, got, want)
			}
		}
	}
}
