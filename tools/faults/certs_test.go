package faults

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/troupe-cluster/troupe/cellstore/pki"
)

// TestIssueCerts checks the cell's certificates without processes: node
// i serves TLS as store/<i+1> at its hosts to the admin and to the other
// nodes, as gRPC and mutual-TLS Raft do, and at no other host.
func TestIssueCerts(t *testing.T) {
	dir := t.TempDir()
	hosts, err := hostsOf(raftAddr(0), grpcAddr, "127.0.0.1:40001")
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0] != "127.0.0.1" {
		t.Fatalf("hosts %q, want [127.0.0.1]", hosts)
	}
	admin, err := issueCerts(dir, [][]string{hosts, {"127.0.0.2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := admin.Identity(); got != adminIdentity {
		t.Fatalf("the harness's clients are %s, want %s", got, adminIdentity)
	}
	var nodes []*pki.Source
	for i, host := range []string{"127.0.0.1", "127.0.0.2"} {
		node, err := pki.NewSource(pki.DirFiles(dir, certName(storeIdentity(i))), nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, node)
		if got := node.Identity(); got != storeIdentity(i) {
			t.Errorf("node %d is %s, want %s", i+1, got, storeIdentity(i))
		}
		if err := handshake(node, admin, host, nil); err != nil {
			t.Errorf("the admin and node %d at %s: %v", i+1, host, err)
		}
	}
	if err := handshake(nodes[1], nodes[0], "127.0.0.2", pki.AcceptRoles(pki.RoleStore)); err != nil {
		t.Errorf("node 1 and node 2, as Raft peers: %v", err)
	}
	if err := handshake(nodes[1], admin, "127.0.0.2", pki.AcceptRoles(pki.RoleStore)); err == nil {
		t.Error("a Raft peer accepts the admin")
	}
	if err := handshake(nodes[1], admin, "127.0.0.1", nil); err == nil {
		t.Error("node 2's certificate passes for 127.0.0.1, a host it was not issued for")
	}
}

// handshake runs a TLS handshake of client dialling host, to a store,
// with server serving to clients accept takes, over loopback; it returns
// either side's error.
func handshake(server, client *pki.Source, host string, accept pki.Accept) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		s := tls.Server(c, server.ServerConfig(accept, false))
		defer s.Close()
		_, err = s.Read(make([]byte, 1)) // the handshake, then the client's byte
		errc <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	cl := tls.Client(raw, client.ClientConfig(host, pki.AcceptRoles(pki.RoleStore)))
	defer cl.Close()
	if err := cl.Handshake(); err != nil {
		return err
	}
	// In TLS 1.3 the server checks the client's certificate after the
	// client's side is done: its read says what it found.
	if _, err := cl.Write([]byte{0}); err != nil {
		return err
	}
	return <-errc
}
