package clientlib_test

import (
	"strings"
	"testing"

	"github.com/troupe-cluster/troupe/clientlib"
)

func TestParseSelectorMatches(t *testing.T) {
	labels := map[string]string{"app": "web", "tier": "front", "example.com/team": "infra", "empty": ""}
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"   ", true},
		{"app=web", true},
		{"app==web", true},
		{"app = web", true},
		{"app=api", false},
		{"app!=api", true},
		{"app!=web", false},
		{"missing!=x", true},
		{"app in (web,api)", true},
		{"app in (api, db)", false},
		{"app in(web)", true},
		{"app notin (api)", true},
		{"app notin (web,api)", false},
		{"missing notin (x)", true},
		{"missing in (x)", false},
		{"app", true},
		{"missing", false},
		{"!missing", true},
		{"! app", false},
		{"app=web,tier=front", true},
		{"app=web, tier=back", false},
		{"app=web,!missing,tier in (front,back)", true},
		{"example.com/team=infra", true},
		{"empty=", true},
		{"empty", true},
		{"app=", false},
	} {
		sel, err := clientlib.ParseSelector(tc.sel)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", tc.sel, err)
			continue
		}
		if got := sel.Matches(labels); got != tc.want {
			t.Errorf("%q matches %v: %v, want %v", tc.sel, labels, got, tc.want)
		}
	}
}

func TestParseSelectorErrors(t *testing.T) {
	for _, tc := range []struct{ sel, want string }{
		{"app=web tier=front", `at column 9: want ',' between requirements, got "tier"`},
		{"app=web,", "at the end: want a label key"},
		{",app", `at column 1: want a label key, got ","`},
		{"!", "at the end: want a label key after '!'"},
		{"!=x", `at column 1: want a label key, got "!="`},
		{"app in web", `at column 8: want '(' after in`},
		{"app notin ()", "at column 12: notin needs at least one value"},
		{"app in (web,)", `at column 13: want a value in the set of in, got ")"`},
		{"app (web)", `after label "app" want =, ==, !=, in, notin, ',' or the end, got "("`},
		{"app in (web", `at the end: want ',' or ')' in the set of in`},
		{"app=web=x", `at column 8: want ',' between requirements, got "="`},
		{"-app=web", `at column 1: name "-app" must be 1-63 letters`},
		{"app=we b", `at column 8: want ',' between requirements, got "b"`},
		{"app=web!", `at column 8: want ',' between requirements, got "!"`},
		{"Bad_/x=y", `at column 1: prefix "Bad_" must be a DNS subdomain`},
		{"app=" + strings.Repeat("v", 64), "at column 1: value"},
	} {
		_, err := clientlib.ParseSelector(tc.sel)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSelector(%q) = %v, want an error containing %q", tc.sel, err, tc.want)
		}
	}
}
