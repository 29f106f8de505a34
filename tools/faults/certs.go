package faults

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// A cell of the harness runs with TLS on, as a cell in production does:
// StartCluster makes a CA of its own in Dir/pki and issues there, by
// `troupe certs issue`'s names,
//
//	ca.crt, ca.key                  the cell's CA
//	store-<id>.crt, store-<id>.key  node <id>'s store identity, store/<id>,
//	                                naming every host it is dialled at
//	admin-faults.crt, .key          the harness's clients: admin/faults
//
// Every node runs with --ca, --cert and --key; the harness's clients
// (clientlib and its own gRPC connections) present the admin
// certificate, which the store's rules let do everything. The Links
// forward TCP, so TLS runs end to end through them: a node is dialled at
// 127.0.0.1 whether through its front Link, a Raft Link or inside its
// namespace, and its certificate names that host.

// pkiDir is where a cell in dir keeps its CA and certificates.
func pkiDir(dir string) string { return filepath.Join(dir, "pki") }

// adminIdentity is who the harness's clients are.
var adminIdentity = pki.Identity{Role: pki.RoleAdmin, Name: "faults"}

// storeIdentity is node i's (0-based) identity: store/<replica ID>.
func storeIdentity(i int) pki.Identity {
	return pki.Identity{Role: pki.RoleStore, Name: strconv.Itoa(i + 1)}
}

// certName names id's certificate and key in a cell's pkiDir,
// <role>-<name>.crt and .key, as `troupe certs issue` does.
func certName(id pki.Identity) string { return id.Role + "-" + id.Name }

// hostsOf are the hosts of addrs (host:port), each once, sorted.
func hostsOf(addrs ...string) ([]string, error) {
	var hosts []string
	for _, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("faults: address %q: %w", a, err)
		}
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), nil
}

// issueCerts makes a new CA in dir, replacing any there, and issues
// every node's store certificate, for nodeHosts[i], and the admin
// certificate. It returns the admin's credentials.
func issueCerts(dir string, nodeHosts [][]string) (*pki.Source, error) {
	now := time.Now()
	ca, err := pki.NewCA("troupe-faults", pki.DefaultCAValidity, now)
	if err != nil {
		return nil, err
	}
	if err := pki.WriteCA(dir, ca); err != nil {
		return nil, fmt.Errorf("faults: write the CA: %w", err)
	}
	leaves := map[pki.Identity]pki.Leaf{adminIdentity: {Identity: adminIdentity}}
	for i, hosts := range nodeHosts {
		leaves[storeIdentity(i)] = pki.Leaf{Identity: storeIdentity(i), Hosts: hosts}
	}
	for id, l := range leaves {
		l.Validity = pki.DefaultLeafValidity
		if err := ca.IssueTo(dir, certName(id), l, now); err != nil {
			return nil, fmt.Errorf("faults: issue %s: %w", id, err)
		}
	}
	admin, err := pki.NewSource(pki.DirFiles(dir, certName(adminIdentity)), nil)
	if err != nil {
		return nil, fmt.Errorf("faults: the admin's credentials: %w", err)
	}
	return admin, nil
}
