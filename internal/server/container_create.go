package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
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
	if err := validateContainerConfig(cfg); err != nil {
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

func (s *Server) createContainer(ctx context.Context, id, name string, sbRec sandbox.Record, pod *podrequest.Pod, cfg *runtimeapi.ContainerConfig) (_ *container.Container, retErr error) {
	timer := s.metrics.StartContainer(ctx, "create")
	rb := undo.Chain{Timeout: cleanupTimeout}
	rt, err := s.runtimeFor(sbRec.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	restore, cfg, err := s.restoreSourceOf(cfg, sbRec.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	creq, err := podrequest.FromContainerConfig(cfg, pod)
	if err != nil {
		return nil, err
	}
	img, err := s.images.Status(ctx, storageRef(cfg.GetImage().GetImage()))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %q is not present: %w", cfg.GetImage().GetImage(), errdefs.ErrNotFound)
		}
		return nil, err
	}

	raw, err := protojson.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode container config: %w", err)
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
	}
	// Kept with the container: its pod's record may be gone when it is
	// removed (quarantined, or a crash between the pod's and its
	// containers' deletion).
	rec.RuntimeHandler = sbRec.RuntimeHandler
	if sig, _ := criStopSignal(cfg.GetStopSignal()); sig != "" { // checked in validation
		rec.StopSignal = sig // the config's overrides the image's
	}
	if lp := creq.LogPath; lp != "" && pod.LogDirectory != "" {
		rec.LogPath = filepath.Join(pod.LogDirectory, lp)
	}
	if rec.Mounts, err = s.containerMounts(ctx, cfg); err != nil {
		return nil, err
	}
	c := container.New(rec)

	// Persisted before the host is touched; a restart undoes a creating
	// record.
	if err := s.db.Put(containerBucket, id, container.RecordVersion, rec); err != nil {
		return nil, fmt.Errorf("persist container %s: %w", id, err)
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
	ropts := image.RootfsOptions{}
	ropts.UIDMap, ropts.GIDMap = rootfsIDMaps(creq.UserNS)
	rootfs, err := s.images.CreateRootfs(ctx, id, img.ID, ropts)
	if err != nil {
		return nil, fmt.Errorf("create container root filesystem: %w", err)
	}
	var restoreFrom string
	if restore != nil {
		if restoreFrom, err = restore.unpack(rec.Dir, rootfs); err != nil {
			return nil, err
		}
	}
	timer.Phase("rootfs")

	defer rb.OnError(ctx, &retErr, "release image volumes", func(ctx context.Context) error {
		return s.releaseImageVolumes(ctx, id)
	})
	if err := s.mountImageVolumes(ctx, c); err != nil {
		return nil, err
	}

	spec, err := s.containerSpec(ctx, c.Record(), sbRec, pod, creq, cfg, img, rootfs)
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
	bundle := rec.BundleDir()
	if err := s.checkAppArmor(ctx, spec); err != nil {
		return nil, err
	}
	// Its own step, undone before the root filesystem: the bundle is on
	// the state dir, whose space the storage's run root needs to unmount
	// it. After the runtime's delete (registered later), which a shim
	// needs to unmount what it mounted in the bundle.
	defer rb.OnError(ctx, &retErr, "remove container bundle", func(context.Context) error {
		return os.RemoveAll(bundle)
	})
	if err := writeContainerBundle(bundle, spec, s.current().Capabilities(rec.RuntimeHandler).HandlerFeatures().SpecVersion); err != nil {
		return nil, err
	}
	u := spec.Process.User
	rec = c.Update(func(r *container.Record) {
		r.User = &container.User{UID: u.UID, GID: u.GID, Groups: u.AdditionalGids}
	})
	if rec.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("create log dir: %w", err)
		}
	}
	timer.Phase("spec")

	if restore != nil {
		return s.finishRestoreCreate(ctx, c, restoreFrom)
	}
	rec = c.Update(func(r *container.Record) { r.RuntimeCreated = true })
	if err := s.db.Put(containerBucket, id, container.RecordVersion, rec); err != nil {
		return nil, fmt.Errorf("persist container %s: %w", id, err)
	}
	defer rb.OnError(ctx, &retErr, "delete runtime container", func(ctx context.Context) error {
		return rt.Delete(ctx, id)
	})
	pid, err := rt.Create(ctx, runtime.CreateOptions{
		ID:            id,
		BundleDir:     bundle,
		LogPath:       rec.LogPath,
		Terminal:      creq.Tty,
		Stdin:         creq.Stdin,
		StdinOnce:     creq.StdinOnce,
		MonitorCgroup: s.monitorCgroup(),
		SpawnMonitor:  s.spawnMonitor(ctx),
		PlaceMonitor:  s.placeMonitor(rec.RuntimeHandler, rec.ID),
	})
	if err != nil {
		return nil, fmt.Errorf("create container: %w", s.runtimeFailure(err))
	}
	timer.Phase("runtime_create")
	if spec.Linux != nil {
		s.keepIOWeight(ctx, id, spec.Linux.Resources)
	}
	if err := s.hit(ctx, "container.create"); err != nil {
		return nil, err
	}
	leaf := s.runtimeLeafCgroup(rec.CgroupPath)
	rec = c.Update(func(r *container.Record) {
		r.Pid = pid
		r.State = container.StateCreated
		if leaf != "" {
			r.CgroupPath = leaf // stats, processes and OOM kills are read there
		}
	})
	if err := s.db.Put(containerBucket, id, container.RecordVersion, rec); err != nil {
		return nil, fmt.Errorf("persist container %s: %w", id, err)
	}
	timer.Phase("persist")
	log.G(ctx).Info("container created", "image", rec.ImageRef)
	s.nriPostCreateContainer(ctx, c)
	return c, nil
}

// containerName is the kubelet-compatible unique name of a container
// attempt.
func containerName(md *runtimeapi.ContainerMetadata, pod sandbox.Metadata) string {
	return fmt.Sprintf("k8s_%s_%s_%s_%s_%d", md.GetName(), pod.Name, pod.Namespace, pod.UID, md.GetAttempt())
}

func validateContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	if cfg == nil {
		return errInvalid("container config is required")
	}
	if cfg.GetMetadata() == nil || cfg.GetMetadata().GetName() == "" {
		return errInvalid("container metadata name is required")
	}
	if n := cfg.GetMetadata().GetName(); len(n) > 253 || strings.ContainsAny(n, "/\x00") {
		return errInvalid(fmt.Sprintf("container name %q is not valid", n))
	}
	if cfg.GetImage().GetImage() == "" {
		return errInvalid("container image is required")
	}
	if err := validateImageVolumes(cfg); err != nil {
		return err
	}
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
		// CRI: run_as_group "should only be specified when run_as_user or
		// run_as_username is specified; otherwise, the runtime MUST error".
		return errInvalid("run_as_group is set without run_as_user or run_as_username")
	}
	// What the runtime would refuse at create, after the container's
	// storage is made.
	if err := specgen.CheckProcess(cfg.GetCommand(), cfg.GetArgs(), criEnv(cfg.GetEnvs()), cfg.GetWorkingDir()); err != nil {
		return err
	}
	if _, err := criStopSignal(cfg.GetStopSignal()); err != nil {
		return err
	}
	for _, m := range cfg.GetMounts() {
		if err := specgen.CheckMountOptions(m.GetMountOptions()); err != nil {
			return err
		}
	}
	if _, err := requestedCDIDevices(cfg); err != nil {
		return err
	}
	if r := cfg.GetLinux().GetResources(); r != nil {
		if err := specgen.CheckResources(podrequest.Resources(r)); err != nil {
			return err
		}
	}
	if strings.ContainsRune(cfg.GetLogPath(), 0) {
		// conmon cannot be started with it (found by TestCRIFuzz).
		return errInvalid(fmt.Sprintf("log path %q contains a NUL byte", cfg.GetLogPath()))
	}
	if lp := cfg.GetLogPath(); filepath.IsAbs(lp) || strings.Contains(lp, "..") {
		return errInvalid(fmt.Sprintf("log path %q must be relative to the pod's log directory", lp))
	}
	if lp := cfg.GetLogPath(); lp != "" && (filepath.Clean(lp) == "." || strings.HasSuffix(lp, "/")) {
		// The log directory itself, or a directory in it: conmon cannot
		// open it as a file and dies (found by TestCRIFuzz).
		return errInvalid(fmt.Sprintf("log path %q must name a file in the pod's log directory", lp))
	}
	for _, name := range strings.Split(cfg.GetLogPath(), "/") {
		// Longer than NAME_MAX, conmon fails to open the log and dies
		// before podbay can move it to its cgroup (found by TestCRIFuzz).
		if len(name) > 255 {
			return errInvalid(fmt.Sprintf("log path %.64q...: a name longer than 255 bytes", cfg.GetLogPath()))
		}
	}
	return nil
}
