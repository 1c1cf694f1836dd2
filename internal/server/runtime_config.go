package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeConfig reports the cgroup driver, so the kubelet can match it.
func (s *Server) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: s.runtimeCgroupDriver()},
	}, nil
}

// UpdateRuntimeConfig takes the node's pod CIDR into the default CNI
// configuration podbay manages. When the operator supplies their own CNI
// configuration it is left alone and the call is a no-op.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	if cidr != "" {
		if err := s.network.UpdatePodCIDR(ctx, cidr); err != nil {
			return nil, err
		}
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}
