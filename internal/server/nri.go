package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/nri"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
)

// NRI plugins (internal/nri) see the pods and containers through these
// helpers; each RPC calls them at the point containerd does. With NRI
// disabled s.nri is nil and every helper returns after a nil check.

// StartNRI starts the NRI plugins once the records are published (Recover),
// so that each plugin is handed every pod and container when it registers.
func (s *Server) StartNRI() error { return s.nri.Start(nriDomain{s}) }

// StopNRI stops the NRI plugins.
func (s *Server) StopNRI() { s.nri.Stop() }

// nriPod describes the pod of rec to the plugins.
func (s *Server) nriPod(rec sandbox.Record) *api.PodSandbox {
	var res nri.PodResources
	if p := rec.Request; p != nil {
		res.Resources = s.ociResources(p.Resources)
		res.Overhead = s.ociResources(p.Overhead)
	}
	return nri.NewPod(rec, readSpec(rec.BundleDir()), res)
}

func (s *Server) ociResources(r *specgen.Resources) *specs.LinuxResources {
	if r == nil {
		return nil
	}
	out, err := specgen.LinuxResources(*r, s.host)
	if err != nil {
		return nil
	}
	return out
}

// nriPodOf describes the pod a container belongs to; a pod whose record
// is gone is described by its ID alone.
func (s *Server) nriPodOf(sandboxID string) *api.PodSandbox {
	sb, err := s.index.Get(sandboxID)
	if err != nil {
		return &api.PodSandbox{Id: sandboxID}
	}
	return s.nriPod(sb.Record())
}

// nriContainer describes the container of rec, with its bundle's spec.
func nriContainer(rec container.Record) *api.Container {
	return nri.NewContainer(rec, readSpec(rec.BundleDir()))
}

// readSpec reads a bundle's config.json; nil when it cannot.
func readSpec(bundle string) *specs.Spec {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil {
		return nil
	}
	return &spec
}

// nriRunPodSandbox tells the plugins about a pod that is up, before it is
// published as ready; an error fails RunPodSandbox (undone).
func (s *Server) nriRunPodSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	if !s.nri.Enabled() {
		return nil
	}
	return s.nri.RunPodSandbox(ctx, s.nriPod(sb.Record()))
}

// nriUndoPod is the undo of nriRunPodSandbox: plugins that saw the pod
// start see it stop and go.
func (s *Server) nriUndoPod(sb *sandbox.Sandbox) func(context.Context) error {
	return func(ctx context.Context) error {
		if !s.nri.Enabled() {
			return nil
		}
		pod := s.nriPod(sb.Record())
		return errors.Join(s.nri.StopPodSandbox(ctx, pod), s.nri.RemovePodSandbox(ctx, pod))
	}
}

// nriStopPodSandbox tells the plugins a pod has stopped. The stop has
// happened: a plugin's error is logged, not returned.
func (s *Server) nriStopPodSandbox(ctx context.Context, sb *sandbox.Sandbox) {
	if !s.nri.Enabled() {
		return
	}
	if err := s.nri.StopPodSandbox(ctx, s.nriPod(sb.Record())); err != nil {
		log.G(ctx).Warn("NRI plugins on pod stop", "err", err)
	}
}

// nriRemovePodSandbox tells the plugins a pod is gone (logged on error).
func (s *Server) nriRemovePodSandbox(ctx context.Context, rec sandbox.Record) {
	if !s.nri.Enabled() {
		return
	}
	if err := s.nri.RemovePodSandbox(ctx, s.nriPod(rec)); err != nil {
		log.G(ctx).Warn("NRI plugins on pod removal", "err", err)
	}
}

// nriCreateContainer lets the plugins adjust spec, the OCI spec of the
// container of rec being created, before its bundle is written. A plugin
// that refuses, or an adjustment that cannot be applied, fails the create
// (undone) with an error naming NRI and the plugin.
func (s *Server) nriCreateContainer(ctx context.Context, rec container.Record, sbRec sandbox.Record, spec *specs.Spec) error {
	if !s.nri.Enabled() {
		return nil
	}
	if err := s.nri.CreateContainer(ctx, s.nriPod(sbRec), nri.NewContainer(rec, spec), spec); err != nil {
		return fmt.Errorf("create container %s: %w", rec.Name, err)
	}
	return nil
}

// nriUndoCreate is the undo of nriCreateContainer: plugins that adjusted
// the container see it removed.
func (s *Server) nriUndoCreate(c *container.Container) func(context.Context) error {
	return func(ctx context.Context) error {
		if !s.nri.Enabled() {
			return nil
		}
		rec := c.Record()
		return s.nri.RemoveContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec))
	}
}

// nriPostCreateContainer tells the plugins a container was created.
func (s *Server) nriPostCreateContainer(ctx context.Context, c *container.Container) {
	s.nriNotify(ctx, c, "PostCreateContainer", s.nri.PostCreateContainer)
}

// nriStartContainer tells the plugins a container is about to start; an
// error fails the start before the runtime is asked.
func (s *Server) nriStartContainer(ctx context.Context, c *container.Container) error {
	if !s.nri.Enabled() {
		return nil
	}
	rec := c.Record()
	return s.nri.StartContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec))
}

// nriPostStartContainer tells the plugins a container has started.
func (s *Server) nriPostStartContainer(ctx context.Context, c *container.Container) {
	s.nriNotify(ctx, c, "PostStartContainer", s.nri.PostStartContainer)
}

// nriUpdateContainer asks the plugins about new resources for c; it returns
// the resources to apply and the updates of other containers to apply
// after (nriPostUpdateContainer).
func (s *Server) nriUpdateContainer(ctx context.Context, c *container.Container, res *specs.LinuxResources) (*specs.LinuxResources, []*api.ContainerUpdate, error) {
	if !s.nri.Enabled() {
		return res, nil, nil
	}
	rec := c.Record()
	return s.nri.UpdateContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec), res)
}

// nriPostUpdateContainer tells the plugins c's resources changed, and
// applies the updates of other containers they asked for, in the
// background: the caller holds c's lock, and those updates take others'.
func (s *Server) nriPostUpdateContainer(ctx context.Context, c *container.Container, others []*api.ContainerUpdate) {
	s.nriNotify(ctx, c, "PostUpdateContainer", s.nri.PostUpdateContainer)
	s.nriApplyLater(ctx, "UpdateContainer", others)
}

// nriContainerStopped tells the plugins a container has stopped, by
// StopContainer or on its own (recordExit, once per container).
func (s *Server) nriContainerStopped(ctx context.Context, c *container.Container) {
	if !s.nri.Enabled() {
		return
	}
	rec := c.Record()
	updates, err := s.nri.StopContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec))
	if err != nil {
		log.G(ctx).Warn("NRI plugins on container stop", "err", err)
	}
	s.nriApplyLater(ctx, "StopContainer", updates)
}

// nriRemoveContainer tells the plugins a container is gone.
func (s *Server) nriRemoveContainer(ctx context.Context, rec container.Record) {
	if !s.nri.Enabled() {
		return
	}
	// The bundle is gone: the container as last recorded.
	if err := s.nri.RemoveContainer(ctx, s.nriPodOf(rec.SandboxID), nri.NewContainer(rec, nil)); err != nil {
		log.G(ctx).Warn("NRI plugins on container removal", "err", err)
	}
}

// nriNotify sends an event whose errors cannot undo what happened.
func (s *Server) nriNotify(ctx context.Context, c *container.Container, event string,
	send func(context.Context, *api.PodSandbox, *api.Container) error) {
	if !s.nri.Enabled() {
		return
	}
	rec := c.Record()
	if err := send(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec)); err != nil {
		log.G(ctx).Warn("NRI plugins", "event", event, "err", err)
	}
}

// nriApplyLater applies updates plugins returned with an event, in the
// background, so that no container lock is held while others are taken.
func (s *Server) nriApplyLater(ctx context.Context, event string, updates []*api.ContainerUpdate) {
	if len(updates) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.nri.ApplyUpdates(ctx, event, updates)
	}()
}

// nriDomain is the server as NRI's plugins see it.
type nriDomain struct{ s *Server }

// Snapshot lists the published pods and their containers that exist (not
// exited, not being created).
func (d nriDomain) Snapshot(ctx context.Context) ([]*api.PodSandbox, []*api.Container) {
	var pods []*api.PodSandbox
	for _, sb := range d.s.index.List() {
		rec := sb.Record()
		if rec.Phase == sandbox.PhaseCreating || rec.Phase == sandbox.PhaseRemoving {
			continue
		}
		pods = append(pods, d.s.nriPod(rec))
	}
	var ctrs []*api.Container
	for _, c := range d.s.containers.List() {
		rec := c.Record()
		if rec.State != container.StateCreated && rec.State != container.StateRunning {
			continue
		}
		ctrs = append(ctrs, nriContainer(rec))
	}
	return pods, ctrs
}

// UpdateContainers applies resource updates plugins ask for, through the
// same path as UpdateContainerResources (without asking the plugins
// again), and returns those that failed.
func (d nriDomain) UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	var errs []error
	for _, u := range updates {
		res := u.GetLinux().GetResources()
		if res == nil {
			continue
		}
		if err := d.s.updateResources(ctx, u.GetContainerId(), res.ToOCI()); err != nil {
			failed = append(failed, u)
			if !u.GetIgnoreFailure() {
				errs = append(errs, fmt.Errorf("container %s: %w", u.GetContainerId(), err))
			}
		}
	}
	return failed, errors.Join(errs...)
}

// updateResources applies res to a created or running container, as
// UpdateContainerResources does.
func (s *Server) updateResources(ctx context.Context, id string, res *specs.LinuxResources) error {
	c, err := s.containers.Get(id)
	if err != nil {
		return err
	}
	c.OpMu.Lock()
	defer c.OpMu.Unlock()
	rec := c.Record()
	if rec.State != container.StateRunning && rec.State != container.StateCreated {
		return fmt.Errorf("container %s is %s: %w", c.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return err
	}
	if err := rt.Update(ctx, c.ID, res); err != nil {
		return fmt.Errorf("update container resources: %w", err)
	}
	log.G(ctx).Info("container resources updated by an NRI plugin", "container", c.ID)
	return nil
}
