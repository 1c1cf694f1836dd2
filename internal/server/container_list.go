package server

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
)

// ListContainers lists containers filtered by ID (or unique prefix), state,
// pod and label selector. A container being created is never listed.
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{}}
	for _, c := range s.containers.List() {
		rec := c.Record()
		if f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()) {
			continue
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(rec.SandboxID, f.GetPodSandboxId()) {
			continue
		}
		state := criContainerState(rec.State)
		if f.GetState() != nil && f.GetState().GetState() != state {
			continue
		}
		if !matchLabels(f.GetLabelSelector(), rec.Labels) {
			continue
		}
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id:           rec.ID,
			PodSandboxId: rec.SandboxID,
			Metadata:     &runtimeapi.ContainerMetadata{Name: rec.MetaName, Attempt: rec.Attempt},
			Image:        &runtimeapi.ImageSpec{Image: rec.ImageRef, ImageRef: imageID(rec.Image)},
			ImageRef:     imageID(rec.Image),
			ImageId:      imageID(rec.Image),
			State:        state,
			CreatedAt:    rec.CreatedAt.UnixNano(),
			Labels:       rec.Labels,
			Annotations:  rec.Annotations,
		})
	}
	return resp, nil
}

func criContainerState(st container.State) runtimeapi.ContainerState {
	switch st {
	case container.StateCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case container.StateRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case container.StateExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}
