package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// TestCertsInitJob runs certs init as the compose cell's job does, twice:
// the second run keeps the CA and every certificate, and the CA's key
// never reaches the directory the processes read.
func TestCertsInitJob(t *testing.T) {
	dir := t.TempDir()
	caDir, out := filepath.Join(dir, "ca"), filepath.Join(dir, "pki")
	// Flags before and after the subcommand, as the compose cell's job
	// gives them.
	args := []string{"certs", "--dir", caDir, "init", "--exist-ok", "--out-dir", out, "--issue", "store/1@store-1,127.0.0.1", "--issue", "agent/rack1-hollow-*", "--issue", "admin/admin"}
	certsInit := func(args ...string) error {
		if stdout, stderr, code := (cli{}).run(t.Context(), args...); code != 0 {
			return fmt.Errorf("troupe %v: exit status %d\n%s%s", args, code, stdout, stderr)
		}
		return nil
	}
	if err := certsInit(args...); err != nil {
		t.Fatal(err)
	}
	read := func(f string) string {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ca, store := read(filepath.Join(caDir, pki.CACertFile)), read(pki.DirFiles(out, "store-1").Cert)
	if err := certsInit(args...); err != nil {
		t.Fatal(err)
	}
	if read(filepath.Join(caDir, pki.CACertFile)) != ca || read(pki.DirFiles(out, "store-1").Cert) != store {
		t.Fatal("a second run replaced the CA or a certificate")
	}
	if _, err := os.Stat(filepath.Join(out, pki.CAKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("the CA's key is in the processes' directory: %v", err)
	}
	for name, want := range map[string]pki.Identity{"store-1": {Role: pki.RoleStore, Name: "1"}, "agent-rack1-hollow-_": {Role: pki.RoleAgent, Name: "rack1-hollow-*"}} {
		s, err := pki.NewSource(pki.DirFiles(out, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Identity() != want {
			t.Errorf("%s: identity %s, want %s", name, s.Identity(), want)
		}
	}
	if err := certsInit("certs", "init", "--dir", caDir); err == nil {
		t.Fatal("certs init replaced an existing CA without --force")
	}
}
