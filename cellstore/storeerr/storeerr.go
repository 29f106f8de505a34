package storeerr

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// Domain names the store in the ErrorInfo of its errors.
const Domain = "troupe.cell"

// Error is the definition of one error of the store: its gRPC code, its
// reason (the identity that crosses the wire) and its fixed message. A
// definition is an error itself, to be returned as it is; With makes an
// occurrence of it with detail. Definitions are compared by pointer.
type Error struct {
	code    codes.Code
	reason  string
	message string
	st      *status.Status // the definition's own status, details included
}

var (
	byReason = map[string]*Error{}
	all      []*Error
)

// define registers a definition; a reason used twice is a programming
// error.
func define(code codes.Code, reason, message string) *Error {
	if _, dup := byReason[reason]; dup || code == codes.OK {
		panic(fmt.Sprintf("storeerr: %s defined twice, or with code OK", reason))
	}
	e := &Error{code: code, reason: reason, message: message}
	e.st = e.status(message)
	byReason[reason] = e
	all = append(all, e)
	return e
}

// All returns every definition, in the order of definitions.go.
func All() []*Error { return append([]*Error(nil), all...) }

// Code is the definition's gRPC code.
func (e *Error) Code() codes.Code { return e.code }

// Reason is the definition's reason: the ErrorInfo reason its statuses
// carry.
func (e *Error) Reason() string { return e.reason }

// Error returns the definition's fixed message.
func (e *Error) Error() string { return e.message }

// GRPCStatus is the status the definition is sent as (status.FromError
// and status.Code use it).
func (e *Error) GRPCStatus() *status.Status { return e.st }

// With returns an occurrence of e: the same code and reason, the message
// followed by ": " and the formatted detail. errors.Is(err, e) holds for
// it, and status.Code gives e's code.
func (e *Error) With(format string, args ...any) error {
	return e.occur(fmt.Sprintf(format, args...))
}

// occur makes an occurrence of e with detail and extra status details.
func (e *Error) occur(detail string, extra ...protoadapt.MessageV1) error {
	return &occurrence{def: e, st: e.status(e.message+": "+detail, extra...)}
}

// status builds a status of e with message and e's ErrorInfo, then extra.
// Should the details not marshal (they always do), the status goes
// without them: the code is kept, only clients' matching suffers.
func (e *Error) status(message string, extra ...protoadapt.MessageV1) *status.Status {
	st := status.New(e.code, message)
	details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Domain: Domain, Reason: e.reason}}, extra...)
	if withDetails, err := st.WithDetails(details...); err == nil {
		return withDetails
	}
	return st
}

// occurrence is one error of a definition, made by the store (With) or
// received from it (FromError).
type occurrence struct {
	def *Error
	st  *status.Status
}

// Error prints the occurrence as gRPC prints a status error, so that it
// reads the same on both sides of the wire.
func (o *occurrence) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", o.st.Code(), o.st.Message())
}

func (o *occurrence) GRPCStatus() *status.Status { return o.st }

// Unwrap makes errors.Is(err, definition) and errors.As(err, **Error)
// find the definition.
func (o *occurrence) Unwrap() error { return o.def }

// Of returns the definition err is an occurrence of, or nil: the one it
// wraps (an error made by this package), else the one whose reason its
// gRPC status carries (an error received from the store).
func Of(err error) *Error {
	if err == nil {
		return nil
	}
	var def *Error
	if errors.As(err, &def) {
		return def
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	return fromStatus(st)
}

// Is reports whether err is def or an occurrence of it, on either side of
// the wire.
func Is(err error, def *Error) bool { return def != nil && Of(err) == def }

// FromError returns the error a gRPC call returned as an occurrence of
// its definition, if its status carries one: errors.Is then matches it
// against the definition, and it prints, codes and details the same as
// before. Any other error (one without a store reason, a wrapped one, a
// context error, nil) comes back as it is. This is etcd's
// rpctypes.Error.
func FromError(err error) error {
	gs, ok := err.(interface{ GRPCStatus() *status.Status })
	if !ok {
		return err
	}
	switch err.(type) {
	case *Error, *occurrence:
		return err // made here
	}
	st := gs.GRPCStatus()
	if st == nil {
		return err
	}
	def := fromStatus(st)
	if def == nil {
		return err
	}
	return &occurrence{def: def, st: st}
}

// fromStatus reads the definition out of st's ErrorInfo.
func fromStatus(st *status.Status) *Error {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return byReason[info.GetReason()]
		}
	}
	return nil
}
