package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"time"
)

// CA is a cell's certificate authority: it signs every certificate of the
// cell, and every process trusts exactly it.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// Default lifetimes: a CA for ten years, a leaf for one (renew it with
// `troupe certs issue` again; processes pick the new files up).
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
)

// backdate covers clocks a little behind the issuer's.
const backdate = 5 * time.Minute

// NewCA makes a self-signed CA named cell (the subject's organization),
// valid from now for validity.
func NewCA(cell string, validity time.Duration, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{cell}, CommonName: cell + " CA"},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Leaf asks for one certificate.
type Leaf struct {
	Identity Identity
	// Hosts (DNS names or IP addresses) the holder serves at; a leaf
	// with hosts can serve TLS (store nodes, agents' log endpoints) as
	// well as be a client.
	Hosts    []string
	Validity time.Duration
}

// Issue signs a new key pair for l, valid from now; it returns the
// certificate and key in PEM.
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	if err := l.Identity.Validate(); err != nil {
		return nil, nil, err
	}
	if l.Validity <= 0 {
		return nil, nil, fmt.Errorf("pki: validity must be positive, got %v", l.Validity)
	}
	notAfter := now.Add(l.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("pki: a %v certificate would outlive the CA (valid until %s); issue a shorter one or make a new CA",
			l.Validity, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// For people: openssl x509 -text shows the role and name here;
		// the URI SAN is what Troupe reads.
		Subject:     pkix.Name{Organization: ca.Cert.Subject.Organization, OrganizationalUnit: []string{l.Identity.Role}, CommonName: l.Identity.Name},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{l.Identity.URI()},
	}
	if len(l.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate for %s: %w", l.Identity, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// CertPEM is the CA's certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's private key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadCA reads a CA's certificate and key from PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w (issuing needs the CA's private key)", err)
	}
	cert, err := ParseCertificate(certPEM, certFile)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certFile)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("pki: %s holds no PEM key", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: %s: key cannot sign", keyFile)
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// ParseCertificate parses the first certificate of a PEM file's content;
// file names it in errors.
func ParseCertificate(data []byte, file string) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", file, err)
	}
	return cert, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, errors.New("pki: no randomness for a serial number")
	}
	return s, nil
}
