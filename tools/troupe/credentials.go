package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// tlsFlags are a process's credentials: the cell's CA and its own
// certificate and key (troupe certs makes them), from flags or the
// environment (TROUPE_CA, TROUPE_CERT, TROUPE_KEY, TROUPE_INSECURE, as
// parseFlags reads every flag), or, for the CLI, from the client
// configuration `troupe up` writes.
type tlsFlags struct {
	ca, cert, key *string
	insecure      *bool
}

func registerTLSFlags(fs *flag.FlagSet) tlsFlags {
	return tlsFlags{
		ca:       fs.String("ca", "", "the cell's CA certificate, PEM"),
		cert:     fs.String("cert", "", "this process's certificate, PEM; its identity says what it may do"),
		key:      fs.String("key", "", "this process's private key, PEM"),
		insecure: fs.Bool("insecure", false, "no TLS and no authorization: whoever reaches a port may read and change everything"),
	}
}

// source returns the credentials the flags name, nil with --insecure
// (after a warning on stderr, every start).
func (f tlsFlags) source(what string) (*pki.Source, error) {
	if *f.insecure {
		if *f.ca != "" || *f.cert != "" || *f.key != "" {
			return nil, fmt.Errorf("%s: --insecure and --ca/--cert/--key exclude each other", what)
		}
		fmt.Fprintf(os.Stderr, "WARNING: troupe %s runs with --insecure: no TLS, no authentication, no authorization; anyone who reaches its ports can read and change the whole cell\n", what)
		return nil, nil
	}
	if *f.ca == "" && *f.cert == "" && *f.key == "" {
		return nil, fmt.Errorf("%s: no credentials: give --ca, --cert and --key (troupe certs makes them), or --insecure", what)
	}
	files := pki.Files{CA: *f.ca, Cert: *f.cert, Key: *f.key}
	if err := files.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	s, err := pki.NewSource(files, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// clientConfig is what the CLI reads to reach a cell, as kubectl reads a
// kubeconfig: `troupe up` writes one for its cell, naming the admin
// certificate it made. $TROUPE_CONFIG names the file; by default it is
// ~/.troupe/config.yaml.
type clientConfig struct {
	Endpoints []string `yaml:"endpoints"`
	CA        string   `yaml:"ca"`
	Cert      string   `yaml:"cert"`
	Key       string   `yaml:"key"`
}

// clientConfigPath is where the CLI's configuration is ("" if there is no
// home directory and $TROUPE_CONFIG is unset).
func clientConfigPath() string {
	if p := os.Getenv("TROUPE_CONFIG"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".troupe", "config.yaml")
}

// readClientConfig reads the CLI's configuration; a missing file is an
// empty configuration.
func readClientConfig() (clientConfig, string, error) {
	path := clientConfigPath()
	var cc clientConfig
	if path == "" {
		return cc, "", nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cc, "", nil
	}
	if err != nil {
		return cc, path, err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&cc); err != nil {
		return cc, path, fmt.Errorf("%s: %w", path, err)
	}
	return cc, path, nil
}

// writeClientConfig writes cc where the CLI finds it, and returns the path.
func writeClientConfig(cc clientConfig) (string, error) {
	path := clientConfigPath()
	if path == "" {
		return "", errors.New("no home directory for the CLI's configuration; set TROUPE_CONFIG")
	}
	data, err := yaml.Marshal(cc)
	if err != nil {
		return "", err
	}
	header := "# Written by troupe up: how the troupe CLI reaches this cell, as its admin.\n"
	return path, pki.WriteFileAtomic(path, append([]byte(header), data...), 0o600)
}

// cliFlags are the CLI's connection flags: --endpoint and the
// credentials, each defaulting to the client configuration's.
type cliFlags struct {
	endpoint *string
	tls      tlsFlags
	config   clientConfig
	path     string
	err      error
}

func registerCLIFlags(fs *flag.FlagSet) *cliFlags {
	cc, path, err := readClientConfig()
	f := &cliFlags{tls: registerTLSFlags(fs), config: cc, path: path, err: err}
	endpoints := "127.0.0.1:7000"
	if len(cc.Endpoints) > 0 {
		endpoints = strings.Join(cc.Endpoints, ",")
	}
	f.endpoint = fs.String("endpoint", endpoints, "store gRPC address(es), comma-separated")
	return f
}

// endpoints are the store addresses to call.
func (f *cliFlags) endpoints() []string { return strings.Split(*f.endpoint, ",") }

// source returns the CLI's credentials: from the flags, else from the
// client configuration.
func (f *cliFlags) source() (*pki.Source, error) {
	if f.err != nil {
		return nil, f.err
	}
	t := f.tls
	if !*t.insecure && *t.ca == "" && *t.cert == "" && *t.key == "" {
		if f.path == "" {
			return nil, fmt.Errorf("no credentials: start a cell with troupe up (it writes %s), give --ca, --cert and --key, or --insecure", clientConfigPath())
		}
		*t.ca, *t.cert, *t.key = f.config.CA, f.config.Cert, f.config.Key
	}
	return t.source("cli")
}
