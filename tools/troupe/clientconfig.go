package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// clientConfig is the CLI's configuration file, as kubectl's kubeconfig:
// named contexts, each a cell's address and the credentials to reach it
// with, and the current one. `troupe up` writes the context "local" for
// its cell and makes it current; `troupe config` lists, switches and sets
// contexts. --config (TROUPE_CONFIG) names the file, by default
// ~/.troupe/config.yaml:
//
//	current-context: local
//	contexts:
//	  - name: local
//	    endpoints: [127.0.0.1:7000]
//	    ca: /tmp/troupe-up-1/pki/ca.crt
//	    cert: /tmp/troupe-up-1/pki/admin-admin.crt
//	    key: /tmp/troupe-up-1/pki/admin-admin.key
//	  - name: prod
//	    endpoints: [10.0.0.1:7000, 10.0.0.2:7000, 10.0.0.3:7000]
//	    ...
//
// The file `troupe up` wrote before contexts existed (endpoints, ca, cert
// and key at the top) reads as the one context "local", current.
type clientConfig struct {
	CurrentContext string        `yaml:"current-context,omitempty"`
	Contexts       []cellContext `yaml:"contexts,omitempty"`

	// The file before contexts: one cell.
	Endpoints []string `yaml:"endpoints,omitempty"`
	CA        string   `yaml:"ca,omitempty"`
	Cert      string   `yaml:"cert,omitempty"`
	Key       string   `yaml:"key,omitempty"`
}

// cellContext is one cell the CLI reaches: its store's addresses and the
// credentials (or insecure: no TLS).
type cellContext struct {
	Name      string   `yaml:"name"`
	Endpoints []string `yaml:"endpoints"`
	CA        string   `yaml:"ca,omitempty"`
	Cert      string   `yaml:"cert,omitempty"`
	Key       string   `yaml:"key,omitempty"`
	Insecure  bool     `yaml:"insecure,omitempty"`
}

// upContext is the context `troupe up` writes for its cell.
const upContext = "local"

// context returns the context named name, nil if there is none.
func (cc *clientConfig) context(name string) *cellContext {
	i := slices.IndexFunc(cc.Contexts, func(c cellContext) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return &cc.Contexts[i]
}

// setContext adds c, or replaces the context of its name; it reports
// whether it added it.
func (cc *clientConfig) setContext(c cellContext) bool {
	if cur := cc.context(c.Name); cur != nil {
		*cur = c
		return false
	}
	cc.Contexts = append(cc.Contexts, c)
	return true
}

// defaultClientConfigPath is where the CLI's configuration is unless
// --config or TROUPE_CONFIG says otherwise: ~/.troupe/config.yaml ("" with
// no home directory).
func defaultClientConfigPath(home func() (string, error)) string {
	dir, err := home()
	if err != nil || dir == "" {
		return ""
	}
	return filepath.Join(dir, ".troupe", "config.yaml")
}

// readClientConfig reads the CLI's configuration at path; a missing file
// (or path "") is an empty configuration.
func readClientConfig(path string) (clientConfig, error) {
	var cc clientConfig
	if path == "" {
		return cc, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cc, nil
	}
	if err != nil {
		return cc, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cc); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return cc, fmt.Errorf("%s: %w", path, err)
	}
	legacy := len(cc.Endpoints) > 0 || cc.CA != "" || cc.Cert != "" || cc.Key != ""
	if legacy && len(cc.Contexts) > 0 {
		return cc, fmt.Errorf("%s: endpoints, ca, cert and key belong in a context (under contexts:), not at the top", path)
	}
	if legacy {
		cc = clientConfig{CurrentContext: upContext,
			Contexts: []cellContext{{Name: upContext, Endpoints: cc.Endpoints, CA: cc.CA, Cert: cc.Cert, Key: cc.Key}}}
	}
	seen := map[string]bool{}
	for i, c := range cc.Contexts {
		if c.Name == "" {
			return cc, fmt.Errorf("%s: context %d has no name", path, i+1)
		}
		if seen[c.Name] {
			return cc, fmt.Errorf("%s: two contexts are named %q", path, c.Name)
		}
		seen[c.Name] = true
	}
	return cc, nil
}

// writeClientConfig writes cc at path, readable by its owner alone.
func writeClientConfig(path string, cc clientConfig) error {
	if path == "" {
		return errors.New("no home directory for the CLI's configuration: give --config or set TROUPE_CONFIG")
	}
	cc.Endpoints, cc.CA, cc.Cert, cc.Key = nil, "", "", ""
	var buf bytes.Buffer
	buf.WriteString("# The troupe CLI's contexts: how it reaches each cell (troupe config get-contexts; troupe up writes \"local\").\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return pki.WriteFileAtomic(path, buf.Bytes(), 0o600)
}
