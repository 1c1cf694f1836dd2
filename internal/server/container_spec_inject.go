package server

import (
	"context"
	"fmt"
	"maps"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/hooks"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
)

// CDIDevices resolves CDI devices (qualified names) into a container's
// OCI spec; internal/cdi's Registry implements it.
type CDIDevices interface {
	Inject(ctx context.Context, spec *specs.Spec, devices []string) error
}

// OCIHooks adds the configured OCI hooks whose conditions a container
// meets to its spec and names them; internal/hooks' Manager implements
// it.
type OCIHooks interface {
	Apply(ctx context.Context, spec *specs.Spec, c hooks.Container) []string
}

// injectHooksAndDevices adds to a container's spec, as CRI-O does and in
// its order, the OCI hooks it matches, then the CDI devices it asks for
// (whose specs may add hooks and mounts of their own). The pod's sandbox
// container gets neither: CRI-O's infra container gets no hooks, and a
// CDI device is asked for per container.
//
// Hooks match the container's annotations merged with its pod's (the
// pod's win, as in CRI-O), and hasBindMounts means the client asked host
// paths to be mounted.
func (s *Server) injectHooksAndDevices(ctx context.Context, spec *specs.Spec, podAnnotations map[string]string, creq *podrequest.Container) error {
	if s.hooks != nil {
		annotations := make(map[string]string, len(creq.Annotations)+len(podAnnotations))
		maps.Copy(annotations, creq.Annotations)
		maps.Copy(annotations, podAnnotations)
		applied := s.hooks.Apply(ctx, spec, hooks.Container{
			Annotations:   annotations,
			HasBindMounts: creq.HasBindMounts(),
		})
		if len(applied) > 0 {
			log.G(ctx).Debug("OCI hooks added", "hooks", applied)
		}
	}
	devices := creq.CDIDevices
	if len(devices) == 0 {
		return nil
	}
	if s.cdi == nil {
		return fmt.Errorf("CDI devices %q requested, but CDI is disabled (cdi_spec_dirs is empty): %w", devices, errdefs.ErrFailedPrecondition)
	}
	return s.cdi.Inject(ctx, spec, devices)
}
