package pki

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func TestIdentityURI(t *testing.T) {
	for _, id := range []Identity{{RoleAgent, "m1"}, {RoleAgent, "hollow-*"}, {RoleStore, "3"}, {RoleScheduler, "batch-0"}} {
		got, err := ParseURI(id.URI())
		if err != nil || got != id {
			t.Errorf("ParseURI(%s) = %v, %v", id.URI(), got, err)
		}
	}
	for _, bad := range []Identity{{"root", "x"}, {RoleAgent, ""}, {RoleAgent, "a/b"}, {RoleScheduler, "s*"}, {RoleAgent, "a*b*"}, {RoleAgent, "*"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%v validated", bad)
		}
	}
	hollow := Identity{RoleAgent, "hollow-*"}
	if !hollow.Covers("hollow-0001") || hollow.Covers("hollow-") || hollow.Covers("m1") {
		t.Error("hollow-* covers the wrong machines")
	}
	if m1 := (Identity{RoleAgent, "m1"}); !m1.Covers("m1") || m1.Covers("m10") {
		t.Error("m1 covers the wrong machines")
	}
}

// pair is a server and a client Source in dir, from one CA.
func newCell(t *testing.T, now time.Time) (string, *CA) {
	t.Helper()
	dir := t.TempDir()
	ca, err := EnsureLocal(dir, LocalCell{Hosts: []string{"127.0.0.1", "localhost"}, Machines: []string{"m1"}, HollowPrefix: "hollow-"}, now)
	if err != nil {
		t.Fatal(err)
	}
	return dir, ca
}

// handshake runs one TLS handshake between the configs over loopback
// and returns the client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3 clients learn of a refused certificate only on read.
			_, err = tc.Write([]byte("x"))
		}
		done <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	return err, <-done
}

func source(t *testing.T, dir, name string, now time.Time) *Source {
	t.Helper()
	s, err := NewSource(DirFiles(dir, name), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHandshakes(t *testing.T) {
	dir, _ := newCell(t, t0)
	now := t0.Add(time.Hour)
	store := source(t, dir, LocalStore, now)
	storesOnly := store.ServerConfig(AcceptRoles(RoleStore), false)
	anyone := store.ServerConfig(nil, false)
	toStore := func(name string) *tls.Config {
		return source(t, dir, name, now).ClientConfig("127.0.0.1", AcceptRoles(RoleStore))
	}
	if c, s := handshake(t, anyone, toStore(LocalAdmin)); c != nil || s != nil {
		t.Fatalf("admin to store: client %v, server %v", c, s)
	}
	if c, s := handshake(t, storesOnly, toStore(LocalStore)); c != nil || s != nil {
		t.Fatalf("store to store: client %v, server %v", c, s)
	}
	if _, s := handshake(t, storesOnly, toStore(LocalAgent("m1"))); s == nil || !strings.Contains(s.Error(), "agent/m1 may not connect") {
		t.Fatalf("agent to a stores-only server: %v", s)
	}
	// A client that expects an agent refuses the store.
	wantAgent := source(t, dir, LocalAdmin, now).ClientConfig("127.0.0.1", AcceptRoles(RoleAgent))
	if c, _ := handshake(t, anyone, wantAgent); c == nil || !strings.Contains(c.Error(), "store/local may not connect") {
		t.Fatalf("client expecting an agent: %v", c)
	}
	// No client certificate.
	if _, s := handshake(t, anyone, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}); s == nil {
		t.Fatal("a client without a certificate was admitted")
	}
	// Optional client certificates: none is fine, a bad one is not.
	if c, s := handshake(t, store.ServerConfig(nil, true), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}); c != nil || s != nil {
		t.Fatalf("optional, no certificate: client %v, server %v", c, s)
	}
	// Another CA's certificate, both ways.
	other, _ := newCell(t, t0)
	foreign := DirFiles(other, LocalAdmin)
	foreign.CA = DirFiles(dir, "").CA
	fs, err := NewSource(foreign, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	if _, s := handshake(t, anyone, fs.ClientConfig("127.0.0.1", nil)); s == nil || !strings.Contains(s.Error(), "unknown authority") {
		t.Fatalf("client of another CA: %v", s)
	}
	if c, _ := handshake(t, source(t, other, LocalStore, now).ServerConfig(nil, false), toStore(LocalAdmin)); c == nil || !strings.Contains(c.Error(), "unknown authority") {
		t.Fatalf("server of another CA: %v", c)
	}
	// A host the server's certificate does not name.
	cfg := source(t, dir, LocalAdmin, now).ClientConfig("elsewhere.example", nil)
	if c, _ := handshake(t, anyone, cfg); c == nil || !strings.Contains(c.Error(), "elsewhere.example") {
		t.Fatalf("wrong host: %v", c)
	}
	// Expired: the admin's certificate a year and a day on.
	later := t0.Add(DefaultLeafValidity + 24*time.Hour)
	if _, s := handshake(t, source(t, dir, LocalStore, later).ServerConfig(nil, false), toStore(LocalAdmin)); s == nil || !strings.Contains(s.Error(), "expired") {
		t.Fatalf("expired client certificate: %v", s)
	}
}

func TestReloadRenewed(t *testing.T) {
	dir, ca := newCell(t, t0)
	now := t0.Add(300 * 24 * time.Hour)
	store := source(t, dir, LocalStore, now)
	server := store.ServerConfig(nil, false)
	client := source(t, dir, LocalAdmin, now).ClientConfig("127.0.0.1", nil)
	// Near the end of its validity the admin's certificate is renewed
	// on disk; the store's too. Both Sources pick the new ones up.
	if _, err := EnsureLocal(dir, LocalCell{Hosts: []string{"127.0.0.1", "localhost"}, Machines: []string{"m1"}, HollowPrefix: "hollow-"}, now); err != nil {
		t.Fatal(err)
	}
	if got := store.Leaf().NotAfter; !got.After(now.Add(300 * 24 * time.Hour)) {
		t.Fatalf("store certificate not reloaded: valid until %v", got)
	}
	after := t0.Add(DefaultLeafValidity + 24*time.Hour)
	store.now = func() time.Time { return after }
	if c, s := handshake(t, server, client); c != nil || s != nil {
		t.Fatalf("after renewal: client %v, server %v", c, s)
	}
	// A half-written renewal (a key that does not match) keeps the old pair.
	cert, _, err := ca.Issue(Leaf{Identity: Identity{RoleStore, "local"}, Hosts: []string{"127.0.0.1"}, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	loads := store.Loads()
	if err := WriteFileAtomic(DirFiles(dir, LocalStore).Cert, cert, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := store.Err(); err == nil || store.Loads() != loads {
		t.Fatalf("mismatched pair: err %v, loads %d -> %d", err, loads, store.Loads())
	}
	if c, s := handshake(t, server, client); c != nil || s != nil {
		t.Fatalf("after a bad renewal: client %v, server %v", c, s)
	}
}

func TestEnsureLocalKeepsFreshCertificates(t *testing.T) {
	dir, _ := newCell(t, t0)
	before, err := os.ReadFile(DirFiles(dir, LocalAdmin).Cert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureLocal(dir, LocalCell{Hosts: []string{"127.0.0.1", "localhost"}, Machines: []string{"m1"}, HollowPrefix: "hollow-"}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(DirFiles(dir, LocalAdmin).Cert)
	if string(before) != string(after) {
		t.Fatal("a fresh certificate was reissued")
	}
	// A new host makes the store's certificate new.
	if _, err := EnsureLocal(dir, LocalCell{Hosts: []string{"10.1.2.3"}}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s := source(t, dir, LocalStore, t0.Add(time.Hour))
	if s.Leaf().VerifyHostname("10.1.2.3") != nil {
		t.Fatal("store certificate lacks the new host")
	}
	if _, err := NewSource(DirFiles(dir, "nobody"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing files: %v", err)
	}
}

// TestOpenSSLReads checks standard tooling reads what we write.
func TestOpenSSLReads(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	dir, _ := newCell(t, time.Now())
	out, err := exec.Command("openssl", "x509", "-noout", "-text", "-in", DirFiles(dir, LocalAgent("m1")).Cert).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	for _, want := range []string{"URI:spiffe://troupe.cell/agent/m1", "OU = agent", "CN = m1", "TLS Web Client Authentication"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("openssl output lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command("openssl", "verify", "-CAfile", DirFiles(dir, "").CA, DirFiles(dir, LocalStore).Cert).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("openssl verify: %v\n%s", err, out)
	}
}

func TestExpiryGauge(t *testing.T) {
	dir, _ := newCell(t, t0)
	s := source(t, dir, LocalAdmin, t0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.ExpiryGauge())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fams[0].GetMetric()[0].GetGauge().GetValue(), float64(t0.Add(DefaultLeafValidity).Unix()); got != want {
		t.Fatalf("expiry %v, want %v", got, want)
	}
}
