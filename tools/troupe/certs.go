package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// certsCommand is `troupe certs init|issue|show`: a cell's CA and its
// certificates.
//
//	troupe certs init  --dir DIR              a new CA: DIR/ca.crt, DIR/ca.key
//	    [--exist-ok] [--out-dir OUT] [--issue ROLE/NAME[@HOST,...] ...]
//	                                          and the certificates OUT lacks (a job that may rerun)
//	troupe certs issue --dir DIR --role R --name N [--hosts H,...]
//	                                          DIR/<out>.crt and .key (renewal: issue again)
//	troupe certs show FILE                    a certificate's identity, hosts and validity
func (a *app) certsCommand() *cobra.Command {
	return group(&cobra.Command{
		Use:   "certs",
		Short: "Make a cell's CA and certificates: certs init|issue|show",
	}, a.certsInitCommand(), a.certsIssueCommand(), a.certsShowCommand())
}

func (a *app) certsInitCommand() *cobra.Command {
	var (
		dir, cell, outDir string
		validity          time.Duration
		force, existOK    bool
		issues            []string
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR",
		Short: "Make a new CA (and, with --issue, the certificates --out-dir lacks)",
		Example: `  troupe certs init --dir pki --cell prod
  troupe certs init --dir ca --exist-ok --out-dir pki --issue store/1@store-1,10.0.0.1 --issue admin/alice`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return certsInit(a.out, dir, cell, outDir, validity, force, existOK, issues)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "", "directory for the CA's certificate and key")
	fs.StringVar(&cell, "cell", "troupe", "the cell's name, in the certificates' subject")
	fs.DurationVar(&validity, "validity", pki.DefaultCAValidity, "how long the CA is valid")
	fs.BoolVar(&force, "force", false, "replace an existing CA (every certificate it issued stops being trusted)")
	fs.BoolVar(&existOK, "exist-ok", false, "keep an existing CA and carry on (a job that may run again, as the compose cell's)")
	fs.StringVar(&outDir, "out-dir", "", "with --issue: where the certificates and a copy of ca.crt go, not the CA's key (default: --dir)")
	fs.StringArrayVar(&issues, "issue", nil, "issue a certificate for ROLE/NAME[@HOST,...] unless --out-dir has it, named <role>-<name> (repeatable)")
	return cmd
}

// certsInit makes a CA in dir, unless existOK and it has one, and the
// certificates issues (ROLE/NAME[@HOST,...]) that outDir lacks.
func certsInit(out io.Writer, dir, cell, outDir string, validity time.Duration, force, existOK bool, issueArgs []string) error {
	var issues []pki.Leaf
	for _, s := range issueArgs {
		l, err := parseIssue(s)
		if err != nil {
			return err
		}
		issues = append(issues, l)
	}
	if dir == "" {
		return usagef("give --dir")
	}
	if outDir == "" {
		outDir = dir
	}
	caFile, keyFile := filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile)
	ca, err := pki.LoadCA(caFile, keyFile)
	switch {
	case err == nil && existOK:
		fmt.Fprintf(out, "CA in %s kept\n", caFile)
	case err == nil && !force:
		return fmt.Errorf("%s exists; --exist-ok keeps it, --force replaces it (and every certificate it issued stops being trusted)", caFile)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	default:
		if ca, err = pki.NewCA(cell, validity, time.Now()); err != nil {
			return err
		}
		if err := pki.WriteCA(dir, ca); err != nil {
			return err
		}
		fmt.Fprintf(out, "CA of cell %s in %s (key: %s, keep it off the cell's machines), valid until %s\n",
			cell, caFile, keyFile, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	if len(issues) == 0 {
		return nil
	}
	if outDir != dir {
		if err := pki.WriteFileAtomic(filepath.Join(outDir, pki.CACertFile), ca.CertPEM(), 0o644); err != nil {
			return err
		}
	}
	for _, l := range issues {
		name := certFileName(l.Identity)
		f := pki.DirFiles(outDir, name)
		if _, err := os.Stat(f.Cert); err == nil {
			if _, err := os.Stat(f.Key); err == nil {
				fmt.Fprintf(out, "%s: %s kept\n", l.Identity, f.Cert)
				continue
			}
		}
		l.Validity = pki.DefaultLeafValidity
		if err := ca.IssueTo(outDir, name, l, time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %s\n", l.Identity, f.Cert)
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

func (a *app) certsIssueCommand() *cobra.Command {
	var (
		dir, role, name, hosts, out string
		validity                    time.Duration
	)
	cmd := &cobra.Command{
		Use:     "issue --dir DIR --role ROLE --name NAME",
		Short:   "Issue a certificate of the CA in --dir (renewal: issue again)",
		Example: "  troupe certs issue --dir pki --role store --name 1 --hosts store-1,10.0.0.1",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("give --dir, the CA's directory")
			}
			id := pki.Identity{Role: role, Name: name}
			if err := id.Validate(); err != nil {
				return err
			}
			if id.Role == pki.RoleStore && hosts == "" {
				return errors.New("a store node's certificate needs --hosts: the names and addresses clients and peers dial it at")
			}
			ca, err := pki.LoadCA(filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile))
			if err != nil {
				return err
			}
			file := out
			if file == "" {
				file = certFileName(id)
			}
			var hl []string
			if hosts != "" {
				hl = strings.Split(hosts, ",")
			}
			if err := ca.IssueTo(dir, file, pki.Leaf{Identity: id, Hosts: hl, Validity: validity}, time.Now()); err != nil {
				return err
			}
			f := pki.DirFiles(dir, file)
			fmt.Fprintf(a.out, "%s: %s (key %s), valid until %s\n", id, f.Cert, f.Key, time.Now().Add(validity).Format(time.RFC3339))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "", "the CA's directory (ca.crt, ca.key); the certificate is written there")
	fs.StringVar(&role, "role", "", "the identity's role: "+strings.Join(pki.Roles, ", "))
	fs.StringVar(&name, "name", "", "the identity's name: a machine for an agent (or <prefix>* for hollow machines), an instance or process for a scheduler, a node for a store")
	fs.StringVar(&hosts, "hosts", "", "DNS names and IP addresses the holder serves at, comma-separated (store nodes; agents serving logs)")
	fs.DurationVar(&validity, "validity", pki.DefaultLeafValidity, "how long the certificate is valid")
	fs.StringVar(&out, "out", "", "file name, without .crt/.key (default: <role>-<name>)")
	return cmd
}

func (a *app) certsShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show FILE",
		Short: "Show a certificate's identity, hosts and validity",
		Args:  exactArgs(1, "one certificate file"),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			fmt.Fprintf(a.out, "identity: %s\nhosts:    %s\nvalid:    %s to %s (%v left)\nissuer:   %s\n", id, strings.Join(hosts, ", "),
				cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339), left, cert.Issuer)
			return nil
		},
	}
}
