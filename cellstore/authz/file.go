package authz

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// defaultRules are the rules a store applies unless given a file; the
// file is documentation too (troupe store --print-default-rules).
//
//go:embed default_rules.yaml
var defaultRules []byte

// DefaultRulesYAML is the text of the built-in rules.
func DefaultRulesYAML() []byte { return bytes.Clone(defaultRules) }

// Default returns the built-in rules.
func Default() *Rules {
	r, err := Parse(defaultRules, "default_rules.yaml")
	if err != nil {
		panic(fmt.Sprintf("authz: built-in rules: %v", err))
	}
	return r
}

// Load reads and compiles a rules file.
func Load(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("authz: %w", err)
	}
	return Parse(data, path)
}

// The file's shape: roles by name, each with its calls and key rules.
//
//	roles:
//	  agent:
//	    calls: [status]
//	    keys:
//	      - match: /machines/{name}
//	        allow: [read, watch, create, update]
type fileRules struct {
	Roles map[string]fileRole `yaml:"roles"`
}

type fileRole struct {
	Calls []yaml.Node `yaml:"calls"`
	Keys  []fileKey   `yaml:"keys"`
}

type fileKey struct {
	Match yaml.Node   `yaml:"match"`
	Allow []yaml.Node `yaml:"allow"`
}

// Parse compiles rules from YAML; name is the file name errors start
// with, each with the line it is about. Every role must be one that
// certificates can name; a role the file leaves out may do nothing.
func Parse(data []byte, name string) (*Rules, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty rules file: want a 'roles:' mapping", name)
	}
	var f fileRules
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var errs []error
	at := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: "+format, append([]any{name, n.Line}, args...)...))
	}
	r := &Rules{roles: map[string]*roleRules{}}
	roleLines := roleKeyNodes(&doc)
	names := slices.SortedFunc(maps.Keys(f.Roles), func(a, b string) int { return cmp.Compare(roleLines[a].Line, roleLines[b].Line) })
	for _, role := range names {
		fr := f.Roles[role]
		if !slices.Contains(pki.Roles, role) {
			at(roleLines[role], "unknown role %q (roles: %v)", role, pki.Roles)
			continue
		}
		rr := &roleRules{}
		for i := range fr.Calls {
			c := Call(fr.Calls[i].Value)
			if !slices.Contains(calls, c) {
				at(&fr.Calls[i], "role %s: unknown call %q (calls: %v)", role, c, calls)
				continue
			}
			rr.calls = append(rr.calls, c)
		}
		for _, k := range fr.Keys {
			if k.Match.Kind == 0 {
				at(roleLines[role], "role %s: a key rule without 'match'", role)
				continue
			}
			pat, err := compilePattern(k.Match.Value)
			if err != nil {
				at(&k.Match, "role %s: %v", role, err)
				continue
			}
			var ops Op
			for i := range k.Allow {
				op, ok := parseOp(k.Allow[i].Value)
				if !ok {
					at(&k.Allow[i], "role %s: unknown operation %q (read, watch, create, update, put, delete, add)", role, k.Allow[i].Value)
				}
				ops |= op
			}
			if ops == 0 {
				at(&k.Match, "role %s: rule %q allows nothing", role, k.Match.Value)
			}
			rr.keys = append(rr.keys, keyRule{pattern: pat, ops: ops})
		}
		r.roles[role] = rr
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// roleKeyNodes finds the node of each role's name, for its line.
func roleKeyNodes(doc *yaml.Node) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "roles" {
			continue
		}
		roles := top.Content[i+1]
		for j := 0; j+1 < len(roles.Content); j += 2 {
			out[roles.Content[j].Value] = roles.Content[j]
		}
	}
	return out
}
