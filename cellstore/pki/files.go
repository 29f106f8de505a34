package pki

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Files names the PEM files a process presents and trusts: the cell's CA
// certificate, and its own certificate and private key.
type Files struct {
	CA, Cert, Key string
}

// The names inside a certificate directory, as `troupe certs` and
// `troupe up` write them: ca.crt and ca.key, and <name>.crt and
// <name>.key for each certificate issued.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// DirFiles are the files of certificate name in dir.
func DirFiles(dir, name string) Files {
	return Files{CA: filepath.Join(dir, CACertFile), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
}

// Validate checks that every file is named.
func (f Files) Validate() error {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return fmt.Errorf("pki: need a CA certificate, a certificate and a key file, got %q, %q, %q", f.CA, f.Cert, f.Key)
	}
	return nil
}

// WriteCA writes ca's certificate and key into dir.
func WriteCA(dir string, ca *CA) error {
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, CAKeyFile), key, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, CACertFile), ca.CertPEM(), 0o644)
}

// IssueTo issues a certificate for l and writes it into dir as name.crt
// and name.key, replacing any there: the key first, then the
// certificate, each by rename, so a process reloading them sees the old
// pair or the new one (a reader that catches the new key with the old
// certificate finds them mismatched and keeps what it had).
func (ca *CA) IssueTo(dir, name string, l Leaf, now time.Time) error {
	certPEM, keyPEM, err := ca.Issue(l, now)
	if err != nil {
		return err
	}
	f := DirFiles(dir, name)
	if err := WriteFileAtomic(f.Key, keyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(f.Cert, certPEM, 0o644)
}

// WriteFileAtomic writes data to path through a temporary file renamed
// over it, so readers never see a partial file.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return WriteFileAtomicWith(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFileAtomicWith is WriteFileAtomic of what write writes, streamed:
// path gets all of it with mode, or is left as it was.
func WriteFileAtomicWith(path string, mode os.FileMode, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
