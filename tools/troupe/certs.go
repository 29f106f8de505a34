package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// runCerts makes a cell's CA and issues its certificates:
//
//	troupe certs init  --dir DIR              a new CA: DIR/ca.crt, DIR/ca.key
//	    [--exist-ok] [--out-dir OUT] [--issue ROLE/NAME[@HOST,...] ...]
//	                                          and the certificates OUT lacks (a job that may rerun)
//	troupe certs issue --dir DIR --role R --name N [--hosts H,...]
//	                                          DIR/<out>.crt and .key (renewal: issue again)
//	troupe certs show FILE                    a certificate's identity, hosts and validity
func runCerts(args []string) error {
	if len(args) == 0 {
		return errors.New("certs: want init, issue or show")
	}
	switch args[0] {
	case "init":
		return certsInit(args[1:])
	case "issue":
		return certsIssue(args[1:])
	case "show":
		return certsShow(args[1:])
	default:
		return fmt.Errorf("certs: unknown subcommand %q (init, issue, show)", args[0])
	}
}

func certsInit(args []string) error {
	fs := flag.NewFlagSet("certs init", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the CA's certificate and key")
	cell := fs.String("cell", "troupe", "the cell's name, in the certificates' subject")
	validity := fs.Duration("validity", pki.DefaultCAValidity, "how long the CA is valid")
	force := fs.Bool("force", false, "replace an existing CA (every certificate it issued stops being trusted)")
	existOK := fs.Bool("exist-ok", false, "keep an existing CA and carry on (a job that may run again, as the compose cell's)")
	outDir := fs.String("out-dir", "", "with --issue: where the certificates and a copy of ca.crt go, not the CA's key (default: --dir)")
	var issues []pki.Leaf
	fs.Func("issue", "issue a certificate for ROLE/NAME[@HOST,...] unless --out-dir has it, named <role>-<name> (repeatable)", func(s string) error {
		l, err := parseIssue(s)
		issues = append(issues, l)
		return err
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("certs init: give --dir")
	}
	if *outDir == "" {
		*outDir = *dir
	}
	caFile, keyFile := filepath.Join(*dir, pki.CACertFile), filepath.Join(*dir, pki.CAKeyFile)
	ca, err := pki.LoadCA(caFile, keyFile)
	switch {
	case err == nil && *existOK:
		fmt.Printf("CA in %s kept\n", caFile)
	case err == nil && !*force:
		return fmt.Errorf("certs init: %s exists; --exist-ok keeps it, --force replaces it (and every certificate it issued stops being trusted)", caFile)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	default:
		if ca, err = pki.NewCA(*cell, *validity, time.Now()); err != nil {
			return err
		}
		if err := pki.WriteCA(*dir, ca); err != nil {
			return err
		}
		fmt.Printf("CA of cell %s in %s (key: %s, keep it off the cell's machines), valid until %s\n",
			*cell, caFile, keyFile, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	if len(issues) == 0 {
		return nil
	}
	if *outDir != *dir {
		if err := pki.WriteFileAtomic(filepath.Join(*outDir, pki.CACertFile), ca.CertPEM(), 0o644); err != nil {
			return err
		}
	}
	for _, l := range issues {
		name := certFileName(l.Identity)
		f := pki.DirFiles(*outDir, name)
		if _, err := os.Stat(f.Cert); err == nil {
			if _, err := os.Stat(f.Key); err == nil {
				fmt.Printf("%s: %s kept\n", l.Identity, f.Cert)
				continue
			}
		}
		l.Validity = pki.DefaultLeafValidity
		if err := ca.IssueTo(*outDir, name, l, time.Now()); err != nil {
			return err
		}
		fmt.Printf("%s: %s\n", l.Identity, f.Cert)
	}
	return nil
}

// parseIssue parses ROLE/NAME[@HOST,...].
func parseIssue(s string) (pki.Leaf, error) {
	id, hosts, _ := strings.Cut(s, "@")
	role, name, ok := strings.Cut(id, "/")
	l := pki.Leaf{Identity: pki.Identity{Role: role, Name: name}}
	if !ok {
		return l, fmt.Errorf("--issue %q: want ROLE/NAME[@HOST,...]", s)
	}
	if hosts != "" {
		l.Hosts = strings.Split(hosts, ",")
	}
	return l, l.Identity.Validate()
}

// certFileName is the file name, without .crt/.key, of id's
// certificate: <role>-<name>, '*' written as '_'.
func certFileName(id pki.Identity) string {
	return id.Role + "-" + strings.ReplaceAll(id.Name, "*", "_")
}

func certsIssue(args []string) error {
	fs := flag.NewFlagSet("certs issue", flag.ContinueOnError)
	dir := fs.String("dir", "", "the CA's directory (ca.crt, ca.key); the certificate is written there")
	role := fs.String("role", "", "the identity's role: "+strings.Join(pki.Roles, ", "))
	name := fs.String("name", "", "the identity's name: a machine for an agent (or <prefix>* for hollow machines), an instance or process for a scheduler, a node for a store")
	hosts := fs.String("hosts", "", "DNS names and IP addresses the holder serves at, comma-separated (store nodes; agents serving logs)")
	validity := fs.Duration("validity", pki.DefaultLeafValidity, "how long the certificate is valid")
	out := fs.String("out", "", "file name, without .crt/.key (default: <role>-<name>)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("certs issue: give --dir, the CA's directory")
	}
	id := pki.Identity{Role: *role, Name: *name}
	if err := id.Validate(); err != nil {
		return fmt.Errorf("certs issue: %w", err)
	}
	if id.Role == pki.RoleStore && *hosts == "" {
		return errors.New("certs issue: a store node's certificate needs --hosts: the names and addresses clients and peers dial it at")
	}
	ca, err := pki.LoadCA(filepath.Join(*dir, pki.CACertFile), filepath.Join(*dir, pki.CAKeyFile))
	if err != nil {
		return err
	}
	file := *out
	if file == "" {
		file = certFileName(id)
	}
	var hl []string
	if *hosts != "" {
		hl = strings.Split(*hosts, ",")
	}
	if err := ca.IssueTo(*dir, file, pki.Leaf{Identity: id, Hosts: hl, Validity: *validity}, time.Now()); err != nil {
		return err
	}
	f := pki.DirFiles(*dir, file)
	fmt.Printf("%s: %s (key %s), valid until %s\n", id, f.Cert, f.Key, time.Now().Add(*validity).Format(time.RFC3339))
	return nil
}

func certsShow(args []string) error {
	if len(args) != 1 {
		return errors.New("certs show: give one certificate file")
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	cert, err := pki.ParseCertificate(data, args[0])
	if err != nil {
		return err
	}
	id, err := pki.IdentityOf(cert)
	if err != nil {
		return err
	}
	var hosts []string
	hosts = append(hosts, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	left := time.Until(cert.NotAfter).Round(time.Hour)
	fmt.Printf("identity: %s\nhosts:    %s\nvalid:    %s to %s (%v left)\nissuer:   %s\n", id, strings.Join(hosts, ", "),
		cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339), left, cert.Issuer)
	return nil
}
