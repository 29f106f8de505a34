package server

import (
	"context"
)

// Access is one request as authorization sees it: who sends it, which
// method, and every key or prefix it touches. Server.admit builds one for
// every request and is the only place requests are authorized.
type Access struct {
	// Identity is the authenticated caller; "" until the store
	// authenticates callers (mutual TLS comes in a later change).
	Identity string
	Method   string
	// Keys written or read (Commit, Get) or the prefix read (Range, Watch).
	Keys   []string
	Prefix string
	Write  bool
}

// Authorizer decides whether an Access is allowed. A non-nil error is
// returned to the caller as is and should carry codes.PermissionDenied.
type Authorizer interface {
	Authorize(ctx context.Context, a Access) error
}

// AllowAll is the Authorizer of a store without authentication.
type AllowAll struct{}

// Authorize implements Authorizer.
func (AllowAll) Authorize(context.Context, Access) error { return nil }

// identity returns the authenticated identity of ctx's caller. With mutual
// TLS it will come from the peer's verified client certificate.
func identity(context.Context) string { return "" }

// admit authorizes one request.
func (s *Server) admit(ctx context.Context, a Access) error {
	a.Identity = identity(ctx)
	return s.cfg.Authorizer.Authorize(ctx, a)
}
