package pki

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// The roles a certificate can name. What each may do is the store's
// authorization rules' business (cellstore/authz); here a role is a word.
const (
	RoleStore      = "store"      // a store node: Raft peer, and a client of its peers
	RoleAdmin      = "admin"      // an operator: everything, membership and backups included
	RoleScheduler  = "scheduler"  // a scheduler process: binds tasks, adds to allocation counters
	RoleController = "controller" // the controllers: jobs' tasks and status, machines' lifecycle
	RoleAgent      = "agent"      // a node agent: its own machine's keys only
	RoleViewer     = "viewer"     // reads, never writes
)

// Roles lists every role, in a stable order.
var Roles = []string{RoleStore, RoleAdmin, RoleScheduler, RoleController, RoleAgent, RoleViewer}

// TrustDomain is the host part of every identity URI: identities are
// SPIFFE IDs, spiffe://troupe.cell/<role>/<name>.
const TrustDomain = "troupe.cell"

// Identity is who a certificate speaks for: a role and a name within it
// (a machine for an agent, an instance or process for a scheduler, a node
// for a store). An agent's name may end in "*": the certificate then
// speaks for every machine whose name starts with what precedes it (a
// process hosting hollow machines, "hollow-*").
type Identity struct {
	Role, Name string
}

// String is "role/name", as logs and errors show an identity.
func (id Identity) String() string { return id.Role + "/" + id.Name }

// URI is the identity as the certificate carries it.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: "/" + id.Role + "/" + id.Name}
}

// Validate says what is wrong with id, if anything.
func (id Identity) Validate() error {
	known := false
	for _, r := range Roles {
		known = known || r == id.Role
	}
	switch {
	case !known:
		return fmt.Errorf("identity: role %q is not one of %s", id.Role, strings.Join(Roles, ", "))
	case id.Name == "":
		return fmt.Errorf("identity %s: name is empty", id)
	case strings.ContainsAny(id.Name, "/ \t\n"):
		return fmt.Errorf("identity %s: name contains '/' or whitespace", id)
	case strings.Contains(strings.TrimSuffix(id.Name, "*"), "*"):
		return fmt.Errorf("identity %s: '*' may only end a name", id)
	case strings.HasSuffix(id.Name, "*") && id.Role != RoleAgent:
		return fmt.Errorf("identity %s: only an agent's name may end in '*' (machines by prefix)", id)
	case id.Name == "*":
		return fmt.Errorf("identity %s: '*' alone would speak for every machine; give a prefix (rack1-*)", id)
	}
	return nil
}

// Covers reports whether id's name speaks for name: equal, or a prefix
// pattern ("hollow-*") that name matches.
func (id Identity) Covers(name string) bool {
	if p, ok := strings.CutSuffix(id.Name, "*"); ok {
		return strings.HasPrefix(name, p) && len(name) > len(p)
	}
	return id.Name == name
}

// ParseURI parses an identity URI, spiffe://troupe.cell/<role>/<name>.
func ParseURI(u *url.URL) (Identity, error) {
	if u.Scheme != "spiffe" || u.Host != TrustDomain || u.RawQuery != "" || u.Fragment != "" {
		return Identity{}, fmt.Errorf("identity URI %q: want spiffe://%s/<role>/<name>", u, TrustDomain)
	}
	role, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if !ok {
		return Identity{}, fmt.Errorf("identity URI %q: want spiffe://%s/<role>/<name>", u, TrustDomain)
	}
	id := Identity{Role: role, Name: name}
	return id, id.Validate()
}

// IdentityOf returns the identity a verified certificate carries: its
// one spiffe://troupe.cell URI SAN. The subject's fields are for people
// (openssl shows them) and are never read.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != TrustDomain {
			continue
		}
		id, err := ParseURI(u)
		if err != nil {
			return Identity{}, err
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, fmt.Errorf("certificate %q carries no Troupe identity (a spiffe://%s/<role>/<name> URI SAN)", cert.Subject, TrustDomain)
	case 1:
		return found[0], nil
	default:
		return Identity{}, fmt.Errorf("certificate %q carries %d Troupe identities; it must carry one", cert.Subject, len(found))
	}
}
