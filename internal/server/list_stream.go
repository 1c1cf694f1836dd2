package server

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/liststream"
)

// The list streaming RPCs of the RuntimeService (internal/liststream);
// StreamImages is internal/imageservice's.

// StreamPodSandboxes is ListPodSandbox as a stream.
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	return liststream.Via(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamPodSandboxes_FullMethodName, req,
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
	return liststream.Via(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamContainers_FullMethodName, req,
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
	return liststream.Via(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamContainerStats_FullMethodName, req,
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
	return liststream.Via(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamPodSandboxStats_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error) {
			r, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: req.GetFilter()})
			return r.GetStats(), err
		},
		func(c []*runtimeapi.PodSandboxStats) error {
			return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: c})
		})
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics as a stream.
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	return liststream.Via(stream.Context(), s.unaryInterceptor, runtimeapi.RuntimeService_StreamPodSandboxMetrics_FullMethodName, req,
		func(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
			r, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
			return r.GetPodMetrics(), err
		},
		func(c []*runtimeapi.PodSandboxMetrics) error {
			return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c})
		})
}
