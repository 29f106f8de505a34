// Package codec is the store's gRPC codec: protobuf, as gRPC's default
// codec, but encoding and decoding through the methods vtprotobuf
// generates (SizeVT, MarshalToSizedBufferVT, UnmarshalVT: no reflection)
// for the messages that have them, which every troupe message has; any
// other message goes to the default codec.
//
// A server or a connection takes it as an option (ServerOption,
// DialOption), not by registration: encoding.RegisterCodecV2 is for the
// whole process, and would change the codec of every other gRPC user in
// it.
//
// The wire format is protobuf's either way, so either side may use either
// codec. One difference: UnmarshalVT does not check that string fields
// hold UTF-8 as proto.Unmarshal does; the store server checks the strings
// it keeps (keys, txn ids) itself.
package codec

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Message is what a message has with vtprotobuf's generated code.
type Message interface {
	SizeVT() int
	MarshalToSizedBufferVT(b []byte) (int, error)
	UnmarshalVT(b []byte) error
	Reset()
}

// Codec is the codec; the zero value is ready.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// fallback is gRPC's default codec (registered by grpcproto's init, which
// runs before this package's), for messages without the generated code.
var fallback = encoding.GetCodecV2(grpcproto.Name)

// ServerOption makes a server use Codec for every call.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// DialOption makes a connection's calls use Codec.
func DialOption() grpc.DialOption { return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{})) }

// Marshal implements encoding.CodecV2. Like the default codec, it takes
// a buffer from gRPC's pool for a message too large to be worth a fresh
// allocation.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(Message)
	if !ok {
		return fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	b := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*b)[:size]); err != nil {
		pool.Put(b)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(b, pool)}, nil
}

// Unmarshal implements encoding.CodecV2. UnmarshalVT copies what it keeps
// of the buffer (strings, bytes), which goes back to the pool at once.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(Message)
	if !ok {
		return fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	// UnmarshalVT merges into m; proto.Unmarshal, which the default
	// codec calls, replaces it.
	m.Reset()
	return m.UnmarshalVT(buf.ReadOnlyData())
}

// Name implements encoding.CodecV2: the content-subtype of the default
// codec, whose wire format this is.
func (Codec) Name() string { return grpcproto.Name }
