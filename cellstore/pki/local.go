package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The certificates of a cell in one process (`troupe up`, tests): one
// per role, named as in LocalName.
const (
	LocalStore      = "store"
	LocalAdmin      = "admin"
	LocalScheduler  = "scheduler"
	LocalController = "controller"
	LocalViewer     = "viewer"
	LocalHollow     = "agent-hollow" // every hollow machine: agent/hollow-*
)

// LocalAgent is the name of machine's agent certificate in a local cell's
// directory.
func LocalAgent(machine string) string { return "agent-" + machine }

// LocalCell describes the certificates EnsureLocal keeps in a directory.
type LocalCell struct {
	// Hosts the store and the agents' log endpoints serve at.
	Hosts []string
	// Machines with an agent certificate each (agent/<machine>).
	Machines []string
	// HollowPrefix, if set, gets one agent certificate for every machine
	// named with it (agent/<prefix>*).
	HollowPrefix string
	Validity     time.Duration
}

// EnsureLocal makes dir a local cell's certificate directory: a new CA
// when it has none, and every certificate of cell it lacks, or that
// expires within a third of its validity (renewed in place; running
// processes reload it). It returns the CA.
func EnsureLocal(dir string, cell LocalCell, now time.Time) (*CA, error) {
	if cell.Validity <= 0 {
		cell.Validity = DefaultLeafValidity
	}
	// The parents as any directory; the keys' own directory private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	caFiles := DirFiles(dir, "ca")
	ca, err := LoadCA(caFiles.CA, filepath.Join(dir, CAKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = NewCA("troupe-local", DefaultCAValidity, now); err == nil {
			err = WriteCA(dir, ca)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pki: local CA in %s: %w", dir, err)
	}
	leaves := map[string]Leaf{
		LocalStore:      {Identity: Identity{RoleStore, "local"}, Hosts: cell.Hosts},
		LocalAdmin:      {Identity: Identity{RoleAdmin, "local"}},
		LocalScheduler:  {Identity: Identity{RoleScheduler, "local"}},
		LocalController: {Identity: Identity{RoleController, "local"}},
		LocalViewer:     {Identity: Identity{RoleViewer, "local"}},
	}
	for _, m := range cell.Machines {
		leaves[LocalAgent(m)] = Leaf{Identity: Identity{RoleAgent, m}, Hosts: cell.Hosts}
	}
	if cell.HollowPrefix != "" {
		leaves[LocalHollow] = Leaf{Identity: Identity{RoleAgent, cell.HollowPrefix + "*"}}
	}
	for name, l := range leaves {
		l.Validity = min(cell.Validity, ca.Cert.NotAfter.Sub(now))
		if fresh(DirFiles(dir, name), ca, l, now) {
			continue
		}
		if err := ca.IssueTo(dir, name, l, now); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// fresh reports whether f holds a certificate of ca for l: its hosts, and
// valid for at least a third of l's validity more.
func fresh(f Files, ca *CA, l Leaf, now time.Time) bool {
	data, err := os.ReadFile(f.Cert)
	if err != nil {
		return false
	}
	cert, err := ParseCertificate(data, f.Cert)
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil {
		return false
	}
	if _, err := os.Stat(f.Key); err != nil {
		return false
	}
	for _, h := range l.Hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return now.Add(l.Validity / 3).Before(cert.NotAfter)
}
