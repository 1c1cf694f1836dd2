package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The list streaming RPCs (KEP-5825, cri-api v0.37): each runs its unary
// List* through the unary interceptor (logs, metrics, trace span, error
// codes) and sends the items in lists of at least one, each list under
// streamChunkBytes, so that no message nears gRPC's size limit however
// many pods, containers or images the node has. No items: no message,
// only the end of the stream.

// streamChunkBytes bounds the encoded size of the items in one response
// (gRPC's default limit is 4 MiB, the kubelet's 16 MiB). An item larger
// than this goes alone in its response.
var streamChunkBytes = 1 << 20

// sendChunks sends items in consecutive lists, every item exactly once
// and in order.
func sendChunks[T proto.Message](items []T, send func([]T) error) error {
	start, size := 0, 0
	for i, it := range items {
		n := proto.Size(it)
		if i > start && size+n > streamChunkBytes {
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

// streamVia runs list, then sends its items, as the RPC fullMethod through
// intercept.
func streamVia[T proto.Message](ctx context.Context, intercept grpc.UnaryServerInterceptor, fullMethod string, req any, list func(context.Context) ([]T, error), send func([]T) error) error {
	handler := func(ctx context.Context, _ any) (any, error) {
		items, err := list(ctx)
		if err != nil {
			return nil, err
		}
		return nil, sendChunks(items, send)
	}
	if intercept == nil {
		_, err := handler(ctx, req)
		return err
	}
	_, err := intercept(ctx, req, &grpc.UnaryServerInfo{FullMethod: fullMethod}, handler)
	return err
}

// StreamPodSandboxes is ListPodSandbox as a stream.
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	return streamVia(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamPodSandboxes_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
			r, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: req.GetFilter()})
			return r.GetItems(), err
		},
		func(c []*runtimeapi.PodSandbox) error {
			return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c})
		})
}

// StreamContainers is ListContainers as a stream.
func (s *Server) StreamContainers(req *runtimeapi.StreamContainersRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	return streamVia(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamContainers_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.Container, error) {
			r, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: req.GetFilter()})
			return r.GetContainers(), err
		},
		func(c []*runtimeapi.Container) error {
			return stream.Send(&runtimeapi.StreamContainersResponse{Containers: c})
		})
}

// StreamContainerStats is ListContainerStats as a stream.
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	return streamVia(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamContainerStats_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.ContainerStats, error) {
			r, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: req.GetFilter()})
			return r.GetStats(), err
		},
		func(c []*runtimeapi.ContainerStats) error {
			return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: c})
		})
}

// StreamPodSandboxStats is ListPodSandboxStats as a stream.
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	return streamVia(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamPodSandboxStats_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error) {
			r, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: req.GetFilter()})
			return r.GetStats(), err
		},
		func(c []*runtimeapi.PodSandboxStats) error {
			return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: c})
		})
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics as a stream; it answers
// whatever ListPodSandboxMetrics does (Unimplemented while that is).
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	return streamVia(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamPodSandboxMetrics_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
			r, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
			return r.GetPodMetrics(), err
		},
		func(c []*runtimeapi.PodSandboxMetrics) error {
			return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c})
		})
}

// StreamImages is ListImages as a stream.
func (s *imageService) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	return streamVia(stream.Context(), s.intercept, runtimeapi.ImageService_StreamImages_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.Image, error) {
			r, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
			return r.GetImages(), err
		},
		func(c []*runtimeapi.Image) error {
			return stream.Send(&runtimeapi.StreamImagesResponse{Images: c})
		})
}
