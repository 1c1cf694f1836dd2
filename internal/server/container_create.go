package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/undo"
)

// CreateContainer creates a container in a ready pod: its own overlay root
// filesystem from the image, the OCI spec joining the pod's namespaces
// (network = the sandbox key), and the runtime's container (under conmon,
// or in the pod's shim), whose output goes to the CRI log. The container
// is not started.
//
// As RunPodSandbox, the work runs detached from the client's
// cancellation: if the kubelet's deadline expires first (a VM runtime can
// take long to hot-plug a container), the container is finished anyway and
// parked, and the kubelet's retry with the same metadata gets it instead
// of a "name is reserved" error.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	if err := podrequest.CheckContainerConfig(cfg); err != nil {
		return nil, err
	}
	sb, err := s.index.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	name := containerName(cfg.GetMetadata(), sb.Record().Metadata)
	ctx = log.With(ctx, "containerName", name)

	mine, id, err := claim(ctx, s.containers, name, container.ErrNameReserved)
	if err != nil {
		return nil, err
	}
	if mine == nil {
		return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
	}

	c, err := detach(s, ctx,
		func(work context.Context) (*container.Container, error) {
			c, err := s.createInPod(work, sb, name, req)
			s.finishContainer(work, name, mine, c, err)
			return c, err
		},
		func() { s.containers.Abandon(mine) })
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: c.ID}, nil
}

// createInPod does CreateContainer's work in pod sb, which must be ready
// and stays so meanwhile.
func (s *Server) createInPod(ctx context.Context, sb *sandbox.Sandbox, name string, req *runtimeapi.CreateContainerRequest) (*container.Container, error) {
	// Read-locked for the whole create: StopPodSandbox takes the write
	// lock, so no container appears in a pod that is stopping.
	sb.StopMu.RLock()
	defer sb.StopMu.RUnlock()
	sbRec := sb.Record()
	if sbRec.Phase != sandbox.PhaseReady {
		return nil, fmt.Errorf("pod sandbox %s is not ready: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	// The pod as RunPodSandbox validated it, or as the kubelet sends it
	// again with the request.
	pod := sbRec.Request
	if sbCfg := req.GetSandboxConfig(); sbCfg != nil {
		var err error
		if pod, err = podrequest.FromPodConfigCopy(sbCfg, podrequest.Options{RuntimeHandler: sbRec.RuntimeHandler}); err != nil {
			return nil, err
		}
	}
	if pod == nil {
		return nil, fmt.Errorf("pod sandbox %s: its record holds no request: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	id, err := objectid.New()
	if err != nil {
		return nil, err
	}
	ctx = log.With(ctx, "container", id)
	return s.createContainer(ctx, id, name, sbRec, pod, req.GetConfig())
}

// createContainer makes container id, named name, in the pod of sbRec
// (whose request is pod) from cfg, which passed
// podrequest.CheckContainerConfig.
func (s *Server) createContainer(ctx context.Context, id, name string, sbRec sandbox.Record, pod *podrequest.Pod, cfg *runtimeapi.ContainerConfig) (_ *container.Container, retErr error) {
	timer := s.metrics.StartContainer(ctx, "create")
	rb := undo.Chain{Timeout: cleanupTimeout}
	rt, err := s.runtimeFor(sbRec.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	restore, creq, raw, err := s.containerRequest(cfg, pod, sbRec.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	rec, img, err := s.newContainerRecord(ctx, id, name, sbRec, pod, creq, raw)
	if err != nil {
		return nil, err
	}
	c := container.New(rec)

	// Persisted before the host is touched; a restart undoes a creating
	// record.
	if err := s.saveContainer(rec); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil && rb.Failed() {
			s.finishContainerUndo(id)
		}
	}()
	defer rb.OnError(ctx, &retErr, "delete container record", func(context.Context) error {
		return s.db.Delete(containerBucket, id)
	})
	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create container dir: %w", err)
	}
	defer rb.OnError(ctx, &retErr, "remove container dir", func(context.Context) error {
		return removeRecordDirs(rec.Dir, rec.BundleDir())
	})
	timer.Phase("prepare")

	defer rb.OnError(ctx, &retErr, "remove container root filesystem", func(ctx context.Context) error {
		return s.images.RemoveRootfs(ctx, id)
	})
	rootfs, restoreFrom, err := s.createContainerRootfs(ctx, rec, img, restore)
	if err != nil {
		return nil, err
	}
	timer.Phase("rootfs")

	defer rb.OnError(ctx, &retErr, "release image volumes", func(ctx context.Context) error {
		return s.releaseImageVolumes(ctx, id)
	})
	if err := s.mountImageVolumes(ctx, c); err != nil {
		return nil, err
	}
	spec, err := s.containerSpec(ctx, c.Record(), sbRec, pod, creq, img, rootfs)
	if err != nil {
		return nil, err
	}
	if err := reachableFromUserNamespace(spec); err != nil {
		return nil, err
	}
	defer rb.OnError(ctx, &retErr, "tell NRI plugins the container is gone", s.nriUndoCreate(c))
	if err := s.nriCreateContainer(ctx, c.Record(), sbRec, spec); err != nil {
		return nil, err
	}
	if err := s.checkAppArmor(ctx, spec); err != nil {
		return nil, err
	}
	// Its own step, undone before the root filesystem: the bundle is on
	// the state dir, whose space the storage's run root needs to unmount
	// it. After the runtime's delete (registered later), which a shim
	// needs to unmount what it mounted in the bundle.
	defer rb.OnError(ctx, &retErr, "remove container bundle", func(context.Context) error {
		return os.RemoveAll(rec.BundleDir())
	})
	if err := s.writeContainerBundle(c, spec); err != nil {
		return nil, err
	}
	timer.Phase("spec")

	if restore != nil {
		return s.finishRestoreCreate(ctx, c, restoreFrom)
	}
	if err := s.saveContainer(c.Update(func(r *container.Record) { r.RuntimeCreated = true })); err != nil {
		return nil, err
	}
	defer rb.OnError(ctx, &retErr, "delete runtime container", func(ctx context.Context) error {
		return rt.Delete(ctx, id)
	})
	if err := s.createInRuntime(ctx, rt, c, spec, timer); err != nil {
		return nil, err
	}
	log.G(ctx).Info("container created", "image", rec.ImageRef)
	s.nriPostCreateContainer(ctx, c)
	return c, nil
}

// containerRequest converts cfg in pod, and when cfg asks to restore a
// checkpoint on handler, returns its source and the config rewritten to
// the checkpointed process (podrequest.RestoredConfig). raw is the config
// as protobuf JSON, which the record keeps.
func (s *Server) containerRequest(cfg *runtimeapi.ContainerConfig, pod *podrequest.Pod, handler string) (_ *restoreSource, _ *podrequest.Container, raw []byte, _ error) {
	restore, err := s.restoreSourceOf(cfg.GetImage().GetImage(), handler)
	if err != nil {
		return nil, nil, nil, err
	}
	if restore != nil {
		cfg = podrequest.RestoredConfig(cfg, restore.process)
	}
	creq, err := podrequest.FromContainerConfig(cfg, pod)
	if err != nil {
		return nil, nil, nil, err
	}
	if raw, err = protojson.Marshal(cfg); err != nil {
		return nil, nil, nil, fmt.Errorf("encode container config: %w", err)
	}
	return restore, creq, raw, nil
}

// createContainerRootfs creates the root filesystem of the container of
// rec from img, mapped to its user namespace, and applies restore's
// changes to it; restoreFrom is then the CRIU images' directory. The
// caller has registered the root filesystem's removal.
func (s *Server) createContainerRootfs(ctx context.Context, rec container.Record, img *image.Image, restore *restoreSource) (rootfs, restoreFrom string, _ error) {
	ropts := image.RootfsOptions{}
	ropts.UIDMap, ropts.GIDMap = rootfsIDMaps(rec.Request.UserNS)
	rootfs, err := s.images.CreateRootfs(ctx, rec.ID, img.ID, ropts)
	if err != nil {
		return "", "", fmt.Errorf("create container root filesystem: %w", err)
	}
	if restore != nil {
		if restoreFrom, err = restore.unpack(rec.Dir, rootfs); err != nil {
			return "", "", err
		}
	}
	return rootfs, restoreFrom, nil
}

// newContainerRecord is the record of a new container (state creating)
// that creq asks for in the pod of sbRec, with its image, which must be
// present, and the image volumes' images; raw is the request's CRI
// config.
func (s *Server) newContainerRecord(ctx context.Context, id, name string, sbRec sandbox.Record, pod *podrequest.Pod, creq *podrequest.Container, raw []byte) (container.Record, *image.Image, error) {
	img, err := s.images.Status(ctx, storageRef(creq.Image))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return container.Record{}, nil, fmt.Errorf("image %q is not present: %w", creq.Image, errdefs.ErrNotFound)
		}
		return container.Record{}, nil, err
	}
	// The pod's parent as RunPodSandbox recorded it, which the spec uses
	// too (the request's copy of the pod config may differ).
	parent := sbRec.CgroupParent
	if parent == "" {
		parent = s.cfg.DefaultCgroupParent
	}
	rec := container.Record{
		ID:          id,
		Name:        name,
		SandboxID:   sbRec.ID,
		MetaName:    creq.Name,
		Attempt:     creq.Attempt,
		Image:       img.ID,
		ImageRef:    creq.Image,
		UserImage:   creq.UserImage,
		State:       container.StateCreating,
		CreatedAt:   time.Now(),
		Labels:      creq.Labels,
		Annotations: creq.Annotations,
		Dir:         filepath.Join(s.cfg.Root, "containers", id),
		Bundle:      s.bundleDir(id),
		CgroupPath:  s.cgroupDir(parent, id),
		StopSignal:  img.Config.StopSignal,
		Request:     creq,
		Config:      raw,
		// Kept with the container: its pod's record may be gone when it
		// is removed (quarantined, or a crash between the pod's and its
		// containers' deletion).
		RuntimeHandler: sbRec.RuntimeHandler,
	}
	if creq.StopSignal != "" {
		rec.StopSignal = creq.StopSignal // the config's overrides the image's
	}
	if lp := creq.LogPath; lp != "" && pod.LogDirectory != "" {
		rec.LogPath = filepath.Join(pod.LogDirectory, lp)
	}
	if rec.Mounts, err = s.containerMounts(ctx, creq.Mounts); err != nil {
		return container.Record{}, nil, err
	}
	return rec, img, nil
}

// writeContainerBundle writes c's bundle with spec, records the user its
// process runs as, and makes its log's directory.
func (s *Server) writeContainerBundle(c *container.Container, spec *specs.Spec) error {
	rec := c.Record()
	if err := writeBundle(rec.BundleDir(), spec, bundleOptions{
		SpecVersion: s.current().Capabilities(rec.RuntimeHandler).HandlerFeatures().SpecVersion,
		SkipSync:    true,
	}); err != nil {
		return err
	}
	u := spec.Process.User
	rec = c.Update(func(r *container.Record) {
		r.User = &container.User{UID: u.UID, GID: u.GID, Groups: u.AdditionalGids}
	})
	if rec.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogPath), 0o755); err != nil {
			return fmt.Errorf("create log dir: %w", err)
		}
	}
	return nil
}

// createInRuntime has c's runtime create it from its bundle and records
// it created; the caller has persisted RuntimeCreated and registered the
// runtime's delete.
func (s *Server) createInRuntime(ctx context.Context, rt runtime.Runtime, c *container.Container, spec *specs.Spec, timer *metrics.Timer) error {
	rec, req := c.Record(), c.Record().Request
	pid, err := rt.Create(ctx, runtime.CreateOptions{
		ID:            c.ID,
		BundleDir:     rec.BundleDir(),
		LogPath:       rec.LogPath,
		Terminal:      req.Tty,
		Stdin:         req.Stdin,
		StdinOnce:     req.StdinOnce,
		MonitorCgroup: s.monitorCgroup(),
		SpawnMonitor:  s.spawnMonitor(ctx),
		PlaceMonitor:  s.placeMonitor(rec.RuntimeHandler, rec.ID),
	})
	if err != nil {
		return fmt.Errorf("create container: %w", s.runtimeFailure(err))
	}
	timer.Phase("runtime_create")
	if spec.Linux != nil {
		s.keepIOWeight(ctx, c.ID, spec.Linux.Resources)
	}
	if err := s.hit(ctx, "container.create"); err != nil {
		return err
	}
	leaf := s.runtimeLeafCgroup(rec.CgroupPath)
	rec = c.Update(func(r *container.Record) {
		r.Pid = pid
		r.State = container.StateCreated
		if leaf != "" {
			r.CgroupPath = leaf // stats, processes and OOM kills are read there
		}
	})
	if err := s.saveContainer(rec); err != nil {
		return err
	}
	timer.Phase("persist")
	return nil
}

// containerName is the kubelet-compatible unique name of a container
// attempt.
func containerName(md *runtimeapi.ContainerMetadata, pod sandbox.Metadata) string {
	return fmt.Sprintf("k8s_%s_%s_%s_%s_%d", md.GetName(), pod.Name, pod.Namespace, pod.UID, md.GetAttempt())
}
