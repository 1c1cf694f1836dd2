package grpcserver

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecSyncCodec is gRPC's proto codec, except that it hands an
// ExecSyncResponse's stdout and stderr to gRPC as they are. The proto codec
// would marshal them into one more buffer of their size (up to 16 MiB per
// answer, from a pool that keeps it for a while): with the output read
// once into its buffer, that copy would be half of what ExecSync costs.
// gRPC's transport writes the pieces out frame by frame, without joining
// them.
type ExecSyncCodec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

// Marshal writes an ExecSyncResponse as proto.Marshal does (fields in
// number order, proto3 defaults left out) and everything else with the
// proto codec.
func (ExecSyncCodec) Marshal(v any) (mem.BufferSlice, error) {
	resp, ok := v.(*runtimeapi.ExecSyncResponse)
	if !ok || len(resp.ProtoReflect().GetUnknown()) > 0 {
		return protoCodec.Marshal(v)
	}
	var data mem.BufferSlice
	var head []byte // the framing before the next field's bytes
	for _, f := range []struct {
		num   protowire.Number
		bytes []byte
	}{{1, resp.Stdout}, {2, resp.Stderr}} {
		if len(f.bytes) == 0 {
			continue
		}
		head = protowire.AppendTag(head, f.num, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(f.bytes)))
		data = append(data, mem.SliceBuffer(head), mem.SliceBuffer(f.bytes))
		head = nil
	}
	if resp.ExitCode != 0 {
		// An int32 is sign-extended: a negative one takes ten bytes.
		head = protowire.AppendTag(head, 3, protowire.VarintType)
		head = protowire.AppendVarint(head, uint64(int64(resp.ExitCode)))
		data = append(data, mem.SliceBuffer(head))
	}
	return data, nil
}

func (ExecSyncCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec.Unmarshal(data, v)
}

// Name is the proto codec's: the content type does not change.
func (ExecSyncCodec) Name() string { return proto.Name }
