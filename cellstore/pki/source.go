package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Source is a process's credentials, read from Files and read again
// whenever one of the files changes on disk (its size or modification
// time), so renewed certificates take effect without a restart: every
// TLS handshake asks the Source, which costs three stats. A change that
// does not load (a certificate that does not match its key, half a
// renewal) keeps the previous credentials and is reported by Err until a
// later change loads. Safe for concurrent use.
type Source struct {
	files Files
	now   func() time.Time

	mu     sync.Mutex
	stamps [3]stamp
	cur    *creds
	err    error
	loads  int
}

// creds are one loaded set of files.
type creds struct {
	cert *tls.Certificate
	id   Identity
	pool *x509.CertPool
}

type stamp struct {
	size int64
	mod  time.Time
}

// NewSource loads files; it fails if they do not load, or if the
// certificate does not carry a valid identity. now is the clock
// certificates are checked against (nil: time.Now).
func NewSource(files Files, now func() time.Time) (*Source, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	s := &Source{files: files, now: now}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	return s, nil
}

// Identity is the identity of the current certificate.
func (s *Source) Identity() Identity {
	c, _ := s.current()
	return c.id
}

// Leaf is the current certificate.
func (s *Source) Leaf() *x509.Certificate {
	c, _ := s.current()
	return c.cert.Leaf
}

// Err is why the files' last change did not load (nil if it did).
func (s *Source) Err() error {
	s.current()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Loads counts how many times the files were (re)loaded.
func (s *Source) Loads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads
}

// current returns the credentials, reloading them if a file changed.
func (s *Source) current() (*creds, error) {
	var st [3]stamp
	for i, f := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		if fi, err := os.Stat(f); err == nil {
			st[i] = stamp{size: fi.Size(), mod: fi.ModTime()}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && st == s.stamps {
		return s.cur, nil
	}
	c, err := load(s.files)
	if err != nil {
		s.err = err
		if s.cur == nil {
			return nil, err
		}
		return s.cur, nil
	}
	s.cur, s.stamps, s.err = c, st, nil
	s.loads++
	return c, nil
}

func load(f Files) (*creds, error) {
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", f.CA)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	id, err := IdentityOf(pair.Leaf)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", f.Cert, err)
	}
	return &creds{cert: &pair, id: id, pool: pool}, nil
}

// Accept decides whether a verified peer's identity may connect (nil:
// any identity).
type Accept func(Identity) error

// AcceptRoles accepts identities of the given roles.
func AcceptRoles(roles ...string) Accept {
	return func(id Identity) error {
		for _, r := range roles {
			if id.Role == r {
				return nil
			}
		}
		return fmt.Errorf("identity %s may not connect here (roles allowed: %v)", id, roles)
	}
}

// ServerConfig returns the TLS 1.3 configuration of a server presenting
// the Source's certificate. Clients must present a certificate of the
// cell's CA whose identity accept takes, unless optional: then a client
// may present none (a handler serving /healthz and /metrics to anyone
// checks PeerIdentity itself), but one that presents a certificate must
// present a valid one.
func (s *Source) ServerConfig(accept Accept, optional bool) *tls.Config {
	auth := tls.RequireAnyClientCert
	if optional {
		auth = tls.RequestClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: auth,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := s.current()
			if err != nil {
				return nil, err
			}
			return c.cert, nil
		},
		// The chain is verified here, not by crypto/tls, so that it is
		// verified against the CA as it is on disk now.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil // only reached when optional
			}
			return s.verifyPeer(cs, x509.ExtKeyUsageClientAuth, "", accept)
		},
	}
}

// ClientConfig returns the TLS 1.3 configuration of a client presenting
// the Source's certificate to a server at host (a DNS name or an IP
// address) whose certificate, of the cell's CA, names host and carries
// an identity accept takes.
func (s *Source) ClientConfig(host string, accept Accept) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: host,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := s.current()
			if err != nil {
				return nil, err
			}
			return c.cert, nil
		},
		// Verification against the current CA is VerifyConnection's
		// (crypto/tls gives it no server name for an IP address, hence
		// host from here).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verifyPeer(cs, x509.ExtKeyUsageServerAuth, host, accept)
		},
	}
}

// ErrNoServerName is returned by a client that does not know which host it
// dialled, so cannot check the server's certificate names it.
var ErrNoServerName = errors.New("pki: no server name to verify the server's certificate against")

// verifyPeer verifies the peer's chain against the current CA at the
// Source's time, its host name when host is set, and its identity.
func (s *Source) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, host string, accept Accept) error {
	c, err := s.current()
	if err != nil {
		return err
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("pki: peer presented no certificate")
	}
	if usage == x509.ExtKeyUsageServerAuth && host == "" {
		return ErrNoServerName
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.pool, Intermediates: inter, DNSName: host,
		CurrentTime: s.now(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("pki: peer certificate %q: %w", leaf.Subject, err)
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return err
	}
	if accept != nil {
		return accept(id)
	}
	return nil
}

// PeerIdentity is the identity of a TLS connection's peer: its first
// certificate, which the handshake verified (ServerConfig, ClientConfig).
func PeerIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Identity{}, false
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	return id, err == nil
}

// DialConfig returns, for a client dialling host:port targets, the
// ClientConfig for each target's host.
func (s *Source) DialConfig(accept Accept) func(target string) (*tls.Config, error) {
	return func(target string) (*tls.Config, error) {
		host, _, err := net.SplitHostPort(target)
		if err != nil {
			return nil, fmt.Errorf("pki: target %q: %w", target, err)
		}
		return s.ClientConfig(host, accept), nil
	}
}

// ExpiryGauge exports when the current certificate expires, so that an
// alert can ask for its renewal in time (reloaded certificates show at
// once).
func (s *Source) ExpiryGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "troupe_tls_certificate_expiry_timestamp_seconds",
		Help: "When this process's current TLS certificate expires, in Unix seconds.",
	}, func() float64 { return float64(s.Leaf().NotAfter.Unix()) })
}
