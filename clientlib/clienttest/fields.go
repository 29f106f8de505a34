package clienttest

import (
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SetMetaField sets field fd of m, an ObjectMeta, to a value other than
// its zero, for tests that set each of its fields in turn, whatever fields
// it gains: a map gets one entry, a message (a timestamp) at, a string
// "set", a uint64 9. A field of another kind fails t, saying to add one.
func SetMetaField(t testing.TB, m protoreflect.Message, fd protoreflect.FieldDescriptor, at time.Time) {
	t.Helper()
	switch {
	case fd.IsMap():
		m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
	case fd.Message() != nil:
		m.Set(fd, protoreflect.ValueOfMessage(timestamppb.New(at).ProtoReflect()))
	case fd.Kind() == protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString("set"))
	case fd.Kind() == protoreflect.Uint64Kind:
		m.Set(fd, protoreflect.ValueOfUint64(9))
	default:
		t.Fatalf("field %s: no value of kind %v here: add one", fd.Name(), fd.Kind())
	}
}
