package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

type utf8Checked interface{ InvalidUTF8() string }

const bad = "ok\xffno"

// Every string of every message of troupe.v1, alone or in a list, a
// map's key or value or a oneof, is found when it is not UTF-8, with its
// path; and within a message one level down, with the outer field's name
// before it. A field added to the proto is covered once make proto ran.
func TestInvalidUTF8FindsEveryString(t *testing.T) {
	msgs := troupev1.File_troupe_v1_objects_proto.Messages()
	checked := 0
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := range mds.Len() {
			md := mds.Get(i)
			walk(md.Messages())
			if md.IsMapEntry() {
				continue
			}
			for j := range md.Fields().Len() {
				fd := md.Fields().Get(j)
				m := newMessage(t, md)
				if !setBad(m, fd) {
					continue
				}
				checked++
				got := m.Interface().(utf8Checked).InvalidUTF8()
				if !strings.HasPrefix(got, string(fd.Name())) {
					t.Errorf("%s.%s not UTF-8: InvalidUTF8 says %q", md.FullName(), fd.Name(), got)
				}
				if got := newMessage(t, md).Interface().(utf8Checked).InvalidUTF8(); got != "" {
					t.Errorf("an empty %s: InvalidUTF8 says %q", md.FullName(), got)
				}
			}
		}
	}
	walk(msgs)
	t.Logf("%d string fields checked", checked)
	if checked < 50 {
		t.Fatalf("only %d string fields checked", checked)
	}
	task := &troupev1.Task{Spec: &troupev1.TaskSpec{Template: &troupev1.TaskTemplate{Command: "/bin/x", Env: map[string]string{"A": bad}}}}
	if got := task.InvalidUTF8(); got != "spec.template.env[A]" {
		t.Errorf("a task's bad environment value: %q", got)
	}
}

func newMessage(t *testing.T, md protoreflect.MessageDescriptor) protoreflect.Message {
	t.Helper()
	mt := messageType(md)
	if mt == nil {
		t.Fatalf("no Go type for %s", md.FullName())
	}
	return mt.New()
}

// messageType is the Go type of md (nil if none is registered).
func messageType(md protoreflect.MessageDescriptor) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil
	}
	return mt
}

// setBad sets field fd of m to hold a string that is not UTF-8, directly
// or in a message one level down, and reports whether it could.
func setBad(m protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
	switch {
	case fd.IsMap():
		k, v := fd.MapKey(), fd.MapValue()
		mp := m.Mutable(fd).Map()
		switch {
		case k.Kind() == protoreflect.StringKind:
			val := mp.NewValue()
			if v.Kind() != protoreflect.MessageKind {
				val = protoreflect.ValueOf(zeroScalar(v))
			}
			mp.Set(protoreflect.ValueOfString(bad).MapKey(), val)
		case v.Kind() == protoreflect.StringKind:
			mp.Set(protoreflect.ValueOf(zeroScalar(k)).MapKey(), protoreflect.ValueOfString(bad))
		default:
			return false
		}
		return true
	case fd.Kind() == protoreflect.StringKind:
		if fd.IsList() {
			l := m.Mutable(fd).List()
			l.Append(protoreflect.ValueOfString("fine"))
			l.Append(protoreflect.ValueOfString(bad))
		} else {
			m.Set(fd, protoreflect.ValueOfString(bad))
		}
		return true
	case fd.Kind() == protoreflect.MessageKind && fd.Message().ParentFile() == fd.ParentFile():
		inner := messageType(fd.Message()).New()
		for j := range fd.Message().Fields().Len() {
			if f := fd.Message().Fields().Get(j); f.Kind() == protoreflect.StringKind && !f.IsList() && !f.IsMap() {
				inner.Set(f, protoreflect.ValueOfString(bad))
				if fd.IsList() {
					m.Mutable(fd).List().Append(protoreflect.ValueOfMessage(inner))
				} else {
					m.Set(fd, protoreflect.ValueOfMessage(inner))
				}
				return true
			}
		}
	}
	return false
}

func zeroScalar(fd protoreflect.FieldDescriptor) any {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "k"
	case protoreflect.BoolKind:
		return true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return int32(1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return uint32(1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return uint64(1)
	case protoreflect.EnumKind:
		return protoreflect.EnumNumber(1)
	}
	return int64(1)
}
