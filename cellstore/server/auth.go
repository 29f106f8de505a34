package server

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/troupe-cluster/troupe/cellstore/authz"
	"github.com/troupe-cluster/troupe/cellstore/pki"
	"github.com/troupe-cluster/troupe/cellstore/storeerr"
	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
)

// Access is one request as authorization sees it: who sends it, which
// method, and every key it touches with the operation, or the prefix it
// reads, or the administrative call it is. Server.admit builds one for
// every request and is the only place requests are authorized; a
// cross-shard commit is authorized there once, with its caller's
// identity, and its prepares and resolutions are not looked at again.
type Access struct {
	// Identity is the caller's, from its verified client certificate;
	// zero on a store serving without TLS.
	Identity pki.Identity
	Method   string
	Keys     []KeyOp
	// Prefix read (Range: OpRead) or watched (Watch: OpWatch).
	Prefix   string
	PrefixOp authz.Op
	// Call is the administrative call (Status, Admin's methods).
	Call authz.Call
}

// KeyOp is one key a request touches and how.
type KeyOp struct {
	Key string
	Op  authz.Op
}

// Authorizer decides whether an Access is allowed. A non-nil error is
// returned to the caller as is and should be storeerr.PermissionDenied.
type Authorizer interface {
	Authorize(ctx context.Context, a Access) error
}

// AllowAll is the Authorizer of a store without authentication (troupe
// store --insecure).
type AllowAll struct{}

// Authorize implements Authorizer.
func (AllowAll) Authorize(context.Context, Access) error { return nil }

// RulesAuthorizer authorizes by authz.Rules: every key of a request must
// be allowed, or the whole request is refused with PERMISSION_DENIED
// naming the identity, the first key refused and the operation. Refusals
// are logged and counted (troupe_store_permission_denied_total).
type RulesAuthorizer struct {
	Rules   *authz.Rules
	Logger  *zap.Logger
	Metrics *Metrics
}

// Authorize implements Authorizer.
func (r *RulesAuthorizer) Authorize(_ context.Context, a Access) error {
	err := r.check(a)
	if err != nil {
		r.Metrics.denied.WithLabelValues(a.Identity.Role, a.Method).Inc()
		r.Logger.Warn("request refused", zap.Stringer("identity", a.Identity), zap.String("method", a.Method), zap.Error(err))
	}
	return err
}

func (r *RulesAuthorizer) check(a Access) error {
	if a.Identity.Role == "" {
		return storeerr.PermissionDenied.With("%s: the caller presented no Troupe identity (a client certificate of the cell's CA)", a.Method)
	}
	if a.Call != "" && !r.Rules.AllowCall(a.Identity, a.Call) {
		return storeerr.PermissionDenied.With("%s: %s may not %s", a.Method, a.Identity, a.Call)
	}
	if a.PrefixOp != 0 && !r.Rules.AllowPrefix(a.Identity, a.Prefix, a.PrefixOp) {
		return storeerr.PermissionDenied.With("%s: %s may not %s prefix %q", a.Method, a.Identity, a.PrefixOp, a.Prefix)
	}
	for _, k := range a.Keys {
		if !r.Rules.AllowKey(a.Identity, k.Key, k.Op) {
			return storeerr.PermissionDenied.With("%s: %s may not %s key %q", a.Method, a.Identity, k.Op, k.Key)
		}
	}
	return nil
}

// identity returns the identity of ctx's caller: its client certificate's,
// which the TLS handshake verified (pki.Source.ServerConfig).
func identity(ctx context.Context) pki.Identity {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return pki.Identity{}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return pki.Identity{}
	}
	id, _ := pki.PeerIdentity(&info.State)
	return id
}

// admit authorizes one request.
func (s *Server) admit(ctx context.Context, a Access) error {
	a.Identity = identity(ctx)
	return s.cfg.Authorizer.Authorize(ctx, a)
}

// commitAccess lists the keys of a commit with their operations: a
// condition reads its key; a put creates when its group conditions the
// key on being absent, updates when on a version, and may do either when
// unconditioned.
func commitAccess(req *storev1.CommitRequest) []KeyOp {
	n := 0
	for _, g := range req.GetGroups() {
		n += len(g.GetConditions()) + len(g.GetOps())
	}
	out := make([]KeyOp, 0, n)
	for _, g := range req.GetGroups() {
		conds := g.GetConditions()
		for _, c := range conds {
			out = append(out, KeyOp{Key: c.GetKey(), Op: authz.OpRead})
		}
		for _, op := range g.GetOps() {
			out = append(out, KeyOp{Key: op.Key(), Op: opKind(op, conds)})
		}
	}
	return out
}

func opKind(op *storev1.Op, conds []*storev1.Condition) authz.Op {
	switch op.GetOp().(type) {
	case *storev1.Op_Delete:
		return authz.OpDelete
	case *storev1.Op_Add:
		if op.GetAdd().GetDelta() == 0 {
			return authz.OpRead // an add of 0 checks the counter's bounds and writes nothing
		}
		return authz.OpAdd
	}
	for _, c := range conds {
		if c.GetKey() == op.Key() {
			if c.GetVersion() == 0 {
				return authz.OpCreate
			}
			return authz.OpUpdate
		}
	}
	return authz.OpPut
}
