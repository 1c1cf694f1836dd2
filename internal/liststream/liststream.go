// Package liststream serves the list streaming RPCs of the CRI (KEP-5825,
// cri-api v0.37): each runs its unary List* through the server's unary
// interceptor (logs, metrics, trace span, error codes) and sends the items
// in lists of at least one, each list under ChunkBytes, so that no message
// nears gRPC's size limit however many pods, containers or images the node
// has. No items: no message, only the end of the stream.
package liststream

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// ChunkBytes bounds the encoded size of the items in one response (gRPC's
// default limit is 4 MiB, the kubelet's 16 MiB). An item larger than this
// goes alone in its response.
var ChunkBytes = 1 << 20

// Send sends items in consecutive lists, every item exactly once and in
// order; it stops at the first failed send.
func Send[T proto.Message](items []T, send func([]T) error) error {
	start, size := 0, 0
	for i, it := range items {
		n := proto.Size(it)
		if i > start && size+n > ChunkBytes {
			if err := send(items[start:i]); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += n
	}
	if start < len(items) {
		return send(items[start:])
	}
	return nil
}

// Via runs list, then sends its items, as the RPC fullMethod through
// intercept (nil: directly).
func Via[T proto.Message](ctx context.Context, intercept grpc.UnaryServerInterceptor, fullMethod string, req any, list func(context.Context) ([]T, error), send func([]T) error) error {
	handler := func(ctx context.Context, _ any) (any, error) {
		items, err := list(ctx)
		if err != nil {
			return nil, err
		}
		return nil, Send(items, send)
	}
	if intercept == nil {
		_, err := handler(ctx, req)
		return err
	}
	_, err := intercept(ctx, req, &grpc.UnaryServerInfo{FullMethod: fullMethod}, handler)
	return err
}
