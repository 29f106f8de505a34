package codec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	storev1 "github.com/troupe-cluster/troupe/proto/troupe/store/v1"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// vtMessage is a message with every method vtprotobuf generates here.
type vtMessage interface {
	proto.Message
	Message
	MarshalVT() ([]byte, error)
}

// files are the protobuf files with vtprotobuf's code.
var files = []protoreflect.FileDescriptor{
	troupev1.File_troupe_v1_objects_proto,
	storev1.File_troupe_store_v1_store_proto,
	storev1.File_troupe_store_v1_raft_proto,
	storev1.File_troupe_store_v1_admin_proto,
}

// eachMessage calls f with every message type of files (map entries
// aside: they are no Go types).
func eachMessage(t *testing.T, f func(t *testing.T, mt protoreflect.MessageType)) {
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := range mds.Len() {
			md := mds.Get(i)
			if md.IsMapEntry() {
				continue
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err != nil {
				t.Fatal(err)
			}
			t.Run(string(md.FullName()), func(t *testing.T) { f(t, mt) })
			walk(md.Messages())
		}
	}
	for _, fd := range files {
		walk(fd.Messages())
	}
}

// filler makes messages with every field set (nested messages to a
// depth), maps of several entries, and one member of each oneof.
type filler struct{ r *rand.Rand }

func (f filler) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && od.Fields().Get(f.r.IntN(od.Fields().Len())) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range 1 + f.r.IntN(6) {
				mp.Set(f.scalar(fd.MapKey()).MapKey(), f.value(mp.NewValue, fd.MapValue(), depth))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 1 + f.r.IntN(3) {
				l.Append(f.value(l.NewElement, fd, depth))
			}
		case fd.Message() != nil:
			if depth > 0 {
				f.fill(m.Mutable(fd).Message(), depth-1)
			}
		default:
			m.Set(fd, f.scalar(fd))
		}
	}
}

// value is a value of fd (a list's element or a map's value); newValue
// makes an empty message for a message field.
func (f filler) value(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, depth int) protoreflect.Value {
	if fd.Message() == nil {
		return f.scalar(fd)
	}
	v := newValue()
	if depth > 0 {
		f.fill(v.Message(), depth-1)
	}
	return v
}

func (f filler) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	r := f.r
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32() >> r.IntN(32))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64() >> r.IntN(64))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(r.Float32())
	case protoreflect.DoubleKind:
		// Not -0: MarshalVT leaves it out like 0 where proto.Marshal
		// writes it; both decode equal.
		return protoreflect.ValueOfFloat64(r.Float64() * 1e6)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(f.text())
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(20))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic(fmt.Sprintf("no value for %v", fd.Kind()))
}

// text is a short string, at times empty, at times not ASCII.
func (f filler) text() string {
	const letters = "abcdeXYZ/-_.0129é→"
	rs := []rune(letters)
	out := make([]rune, f.r.IntN(10))
	for i := range out {
		out[i] = rs[f.r.IntN(len(rs))]
	}
	return string(out)
}

func (f filler) message(mt protoreflect.MessageType) vtMessage {
	m := mt.New()
	f.fill(m, 3)
	return m.Interface().(vtMessage)
}

// hasMap reports whether messages of md can hold a map.
func hasMap(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() || (fd.Message() != nil && hasMap(fd.Message(), seen)) {
			return true
		}
	}
	return false
}

// The generated code and protobuf's reflection read each other's
// encodings, and agree on sizes.
func TestRoundTripWithProto(t *testing.T) {
	f := filler{rand.New(rand.NewPCG(1, 2))}
	eachMessage(t, func(t *testing.T, mt protoreflect.MessageType) {
		for range 20 {
			m := f.message(mt)
			if got, want := m.SizeVT(), proto.Size(m); got != want {
				t.Fatalf("SizeVT %d, proto.Size %d", got, want)
			}
			vt, err := m.MarshalVT()
			if err != nil {
				t.Fatal(err)
			}
			back := mt.New().Interface()
			if err := proto.Unmarshal(vt, back); err != nil {
				t.Fatalf("proto.Unmarshal of MarshalVT: %v", err)
			}
			if !proto.Equal(m, back) {
				t.Fatalf("MarshalVT then proto.Unmarshal:\n%v\nbecame\n%v", m, back)
			}
			pb, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			backVT := mt.New().Interface().(vtMessage)
			if err := backVT.UnmarshalVT(pb); err != nil {
				t.Fatalf("UnmarshalVT of proto.Marshal: %v", err)
			}
			if !proto.Equal(m, backVT) {
				t.Fatalf("proto.Marshal then UnmarshalVT:\n%v\nbecame\n%v", m, backVT)
			}
		}
	})
}

// MarshalVT writes the bytes proto.MarshalOptions{Deterministic: true}
// writes: for every troupe.v1 message (the stored form of objects, whose
// maps it writes in key order), and for the store's messages without maps
// (a CommitRequest's is hashed by every node alike).
func TestMarshalVTIsDeterministic(t *testing.T) {
	f := filler{rand.New(rand.NewPCG(3, 4))}
	eachMessage(t, func(t *testing.T, mt protoreflect.MessageType) {
		md := mt.Descriptor()
		if md.ParentFile() != troupev1.File_troupe_v1_objects_proto && hasMap(md, map[protoreflect.FullName]bool{}) {
			t.Skip("a store message with a map: not encoded deterministically (nor was it before MarshalVT)")
		}
		for range 20 {
			m := f.message(mt)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			// Each MarshalVT ranges over the maps afresh, in Go's
			// random order.
			for range 5 {
				got, err := m.MarshalVT()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("MarshalVT\n%x\ndeterministic proto.Marshal\n%x", got, want)
				}
			}
		}
	})
}

// Fields this code does not know (written by a newer version) survive a
// decode and an encode, at the end, as protobuf's reflection keeps them.
func TestUnknownFieldsKept(t *testing.T) {
	f := filler{rand.New(rand.NewPCG(5, 6))}
	for _, mt := range []protoreflect.MessageType{
		(&troupev1.Task{}).ProtoReflect().Type(),
		(&troupev1.Job{}).ProtoReflect().Type(),
		(&troupev1.Machine{}).ProtoReflect().Type(),
		(&storev1.CommitRequest{}).ProtoReflect().Type(),
	} {
		m := f.message(mt)
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b = protowire.AppendTag(b, 999, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("from a newer version"))
		b = protowire.AppendTag(b, 998, protowire.VarintType)
		b = protowire.AppendVarint(b, 42)

		viaVT := mt.New().Interface().(vtMessage)
		if err := viaVT.UnmarshalVT(b); err != nil {
			t.Fatal(err)
		}
		got, err := viaVT.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		viaProto := mt.New().Interface()
		if err := proto.Unmarshal(b, viaProto); err != nil {
			t.Fatal(err)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(viaProto)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) || !bytes.Equal(want, b) {
			t.Fatalf("%s: decoded and encoded again\nMarshalVT %x\nproto     %x\nfrom      %x", mt.Descriptor().FullName(), got, want, b)
		}
	}
}

// The codec writes what gRPC's default codec writes, pooled or not, and
// reads into a used message as into a new one; a message without the
// generated code goes to the default codec.
func TestCodec(t *testing.T) {
	def := encoding.GetCodecV2(grpcproto.Name)
	small := &storev1.CommitRequest{TxnId: "t1", Groups: []*storev1.Group{{
		Conditions: []*storev1.Condition{{Key: "/a", Version: 3}},
		Ops:        []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/a", Value: []byte("v")}}}},
	}}}
	large := &storev1.CommitRequest{TxnId: "t2", Groups: []*storev1.Group{{
		Ops: []*storev1.Op{{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/b", Value: bytes.Repeat([]byte("x"), 64<<10)}}}},
	}}}
	if mem.IsBelowBufferPoolingThreshold(small.SizeVT()) == mem.IsBelowBufferPoolingThreshold(large.SizeVT()) {
		t.Fatal("the messages do not take both ways of Marshal")
	}
	for _, m := range []proto.Message{small, large, wrapperspb.String("no generated code")} {
		got, err := Codec{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := def.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Fatalf("%T: codec and default codec wrote different bytes", m)
		}
		want.Free()

		used := proto.Clone(small)
		if _, ok := m.(Message); !ok {
			used = wrapperspb.String("used")
		}
		if err := (Codec{}).Unmarshal(got, used); err != nil {
			t.Fatal(err)
		}
		got.Free()
		if !proto.Equal(used, m) {
			t.Fatalf("%T: read back as %v", m, used)
		}
	}
	if (Codec{}).Name() != def.Name() {
		t.Fatalf("name %q, default codec's %q", Codec{}.Name(), def.Name())
	}
}

// BenchmarkCodec compares the codec with gRPC's default on a placement's
// commit: a task and its binding written, two counters added to, with
// their conditions.
func BenchmarkCodec(b *testing.B) {
	f := filler{rand.New(rand.NewPCG(7, 8))}
	value := func(mt protoreflect.MessageType) []byte {
		v, err := proto.Marshal(f.message(mt))
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	req := &storev1.CommitRequest{TxnId: "bench-1", Groups: []*storev1.Group{{
		Conditions: []*storev1.Condition{{Key: "/tasks/ns/job/3", Version: 17}, {Key: "/machines/m1", Version: 2}},
		Ops: []*storev1.Op{
			{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/tasks/ns/job/3", Value: value((&troupev1.Task{}).ProtoReflect().Type())}}},
			{Op: &storev1.Op_Put{Put: &storev1.Put{Key: "/bindings/m1/ns/job/3", Value: value((&troupev1.Binding{}).ProtoReflect().Type())}}},
			{Op: &storev1.Op_Add{Add: &storev1.Add{Key: "/alloc/m1/cpu", Delta: 500, Max: 8000}}},
			{Op: &storev1.Op_Add{Add: &storev1.Add{Key: "/alloc/m1/memory", Delta: 1 << 30, Max: 32 << 30}}},
		},
	}}}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"default", encoding.GetCodecV2(grpcproto.Name)}, {"vt", Codec{}}} {
		b.Run(c.name+"/marshal", func(b *testing.B) {
			for b.Loop() {
				data, err := c.codec.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
		data, err := c.codec.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/unmarshal", func(b *testing.B) {
			for b.Loop() {
				if err := c.codec.Unmarshal(data, &storev1.CommitRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
