package pki

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// GRPCCredentials are a gRPC client's transport credentials from s: TLS
// 1.3 with s's certificate, to servers verified by ClientConfig for the
// host of the address dialled, whose identity accept takes.
func GRPCCredentials(s *Source, accept Accept) credentials.TransportCredentials {
	return &grpcCreds{TransportCredentials: credentials.NewTLS(s.ClientConfig("", accept)), s: s, accept: accept}
}

// grpcCreds makes the TLS configuration of each handshake for the host
// it dials, which crypto/tls would not pass to verification for an IP
// address.
type grpcCreds struct {
	credentials.TransportCredentials
	s      *Source
	accept Accept
}

func (c *grpcCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority
	}
	if host == "" {
		return nil, nil, fmt.Errorf("pki: no host in %q to verify the server's certificate against", authority)
	}
	return credentials.NewTLS(c.s.ClientConfig(host, c.accept)).ClientHandshake(ctx, authority, conn)
}

func (c *grpcCreds) Clone() credentials.TransportCredentials {
	return &grpcCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s, accept: c.accept}
}

// StoreCredentials are the gRPC credentials of a client of store nodes
// presenting s; plaintext when s is nil (a store run with --insecure).
func StoreCredentials(s *Source) credentials.TransportCredentials {
	if s == nil {
		return insecure.NewCredentials()
	}
	return GRPCCredentials(s, AcceptRoles(RoleStore))
}
