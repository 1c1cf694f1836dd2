package nri

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// UpdatePodSandbox asks the plugins about a pod's new resources
// (UpdatePodSandboxResources): overhead and the sum of its containers'.
// pod describes the pod before the update. A plugin's refusal must fail
// the update before anything is applied.
func (n *NRI) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *rspec.LinuxResources) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		_, err := a.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{
			Pod:                    pod,
			OverheadLinuxResources: api.FromOCILinuxResources(overhead, nil),
			LinuxResources:         api.FromOCILinuxResources(resources, nil),
		})
		return wrap("UpdatePodSandbox", err)
	})
}

// PostUpdatePodSandbox tells the plugins a pod's resources changed; pod
// describes it after the update.
func (n *NRI) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	a := n.get()
	if a == nil {
		return nil
	}
	return event(a, func() error {
		return wrap("PostUpdatePodSandbox", a.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod}))
	})
}
