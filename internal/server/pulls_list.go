package server

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/podbay/podbay/internal/pullprogress"
)

// PullProgress is where the pull progress service reads the pulls in
// flight (implemented by internal/image's Store).
type PullProgress interface {
	// Pulls returns the pulls in flight and the ones finished lately;
	// its size is bounded (pullprogress.Snapshot).
	Pulls() pullprogress.Snapshot
}

// pullsService is podbay's own service on the CRI socket, beside the
// RuntimeService and ImageService: the CRI has no RPC for pull progress.
// Its one method, List, answers a pullprogress.Snapshot as JSON in a
// google.protobuf.StringValue: a well-known type, since the server's
// codec is the proto one (execSyncCodec) and there is no protoc to
// generate a message of its own. Nothing is computed between calls, and
// a kubelet's Status never reads it.
type pullsService interface {
	List(context.Context, *emptypb.Empty) (*wrapperspb.StringValue, error)
}

// pullsServer serves pullsService from the image store.
type pullsServer struct{ source PullProgress }

// List returns the pulls in flight and those finished in the last minute.
func (p pullsServer) List(context.Context, *emptypb.Empty) (*wrapperspb.StringValue, error) {
	b, err := json.Marshal(p.source.Pulls())
	if err != nil {
		return nil, fmt.Errorf("encode pull progress: %w", err)
	}
	return wrapperspb.String(string(b)), nil
}

// pullsServiceDesc is what protoc-gen-go-grpc would generate for
//
//	service Pulls { rpc List(google.protobuf.Empty) returns (google.protobuf.StringValue); }
var pullsServiceDesc = grpc.ServiceDesc{
	ServiceName: pullprogress.ServiceName,
	HandlerType: (*pullsService)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "List", Handler: pullsListHandler}},
	Metadata:    "podbay/pulls",
}

func pullsListHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	call := func(ctx context.Context, req any) (any, error) {
		return srv.(pullsService).List(ctx, req.(*emptypb.Empty))
	}
	if interceptor == nil {
		return call(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: pullprogress.ListMethod}, call)
}
