package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
)

// RestorePod makes a pod sandbox and its containers from a CheckpointPod
// directory: the sandbox as RunPodSandbox makes it from the request's
// config (a new network namespace and address), then each container as
// CreateContainer makes one from its checkpoint archive, matched to the
// request's container configs by metadata name. The containers are
// CREATED; StartContainer restores each one's processes. The checkpoint
// directory is only read. On error the pod and every container made are
// removed.
func (s *Server) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (_ *runtimeapi.RestorePodResponse, retErr error) {
	dir := req.GetCheckpointPath()
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, errInvalid(fmt.Sprintf("checkpoint_path %q is not an absolute path", dir))
	}
	if req.GetConfig() == nil {
		return nil, errInvalid("config is required")
	}
	if len(req.GetOptions()) > 0 {
		return nil, errInvalid(fmt.Sprintf("restore options are not supported (got %d)", len(req.GetOptions())))
	}
	cfgs := req.GetContainerConfigs()
	if len(cfgs) == 0 {
		return nil, errInvalid("container_configs must hold at least one container")
	}
	want := map[string]bool{}
	for _, c := range cfgs {
		name := c.GetMetadata().GetName()
		if name == "" || want[name] {
			return nil, errInvalid(fmt.Sprintf("container_configs: metadata name %q is empty or repeated", name))
		}
		want[name] = true
	}
	pod, err := checkpoint.ReadPod(dir)
	if err != nil {
		return nil, err
	}
	archives := map[string]string{}
	for _, c := range pod.Containers {
		if !want[c.Name] {
			return nil, errInvalid(fmt.Sprintf("the checkpoint holds container %q, which container_configs lacks", c.Name))
		}
		archives[c.Name] = filepath.Join(dir, c.Archive)
	}
	for name := range want {
		if archives[name] == "" {
			return nil, errInvalid(fmt.Sprintf("container_configs names %q, which the checkpoint lacks", name))
		}
	}
	handler := req.GetRuntimeHandler()
	if handler == "" {
		handler = s.current().Config().DefaultRuntime
	}
	if _, err := s.runtimeFor(handler); err != nil {
		return nil, err
	}
	if s.current().Capabilities(handler).Restorer == nil {
		return nil, fmt.Errorf("runtime handler %q cannot restore checkpoints (only conmon handlers, runc or crun with CRIU, can; vm handlers cannot): %w", handler, errdefs.ErrNotImplemented)
	}
	if err := checkpoint.CheckCRIU(ctx, criuPath); err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		if err := s.checkRestoreMatches(ctx, podrequest.ContainerOf(c), archives[c.GetMetadata().GetName()]); err != nil {
			return nil, err
		}
	}

	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: req.GetConfig(), RuntimeHandler: req.GetRuntimeHandler()})
	if err != nil {
		return nil, fmt.Errorf("restore pod sandbox: %w", err)
	}
	podID := run.GetPodSandboxId()
	defer func() {
		if retErr == nil {
			return
		}
		// Removing the pod removes the containers created in it.
		cctx := context.WithoutCancel(ctx)
		_, serr := s.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
		_, rerr := s.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
		if err := errors.Join(serr, rerr); err != nil {
			log.G(ctx).Error("remove the pod of a failed restore", "pod", podID, "err", err)
			retErr = errors.Join(retErr, fmt.Errorf("remove pod sandbox %s: %w", podID, err))
		}
	}()
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: podID}
	for _, c := range cfgs {
		cfg := proto.CloneOf(c)
		cfg.Image = &runtimeapi.ImageSpec{Image: archives[cfg.GetMetadata().GetName()]}
		cr, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podID, Config: cfg, SandboxConfig: req.GetConfig(),
		})
		if err != nil {
			return nil, fmt.Errorf("restore container %q: %w", cfg.GetMetadata().GetName(), err)
		}
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{
			Name: cfg.GetMetadata().GetName(), ContainerId: cr.GetContainerId(),
		})
	}
	log.G(ctx).Info("pod restored from a checkpoint", "pod", podID, "from", dir, "containers", len(resp.RestoredContainers))
	return resp, nil
}

// checkRestoreMatches fails a restore whose container config does not
// describe the checkpointed process, as the CRI asks ("any mismatch the
// runtime can validate must fail the restore"): the image (resolved to its
// ID where both are stored), the command and arguments, the working
// directory, every environment variable, and the user and group IDs — each
// only where the config sets it (the kubelet leaves the image's defaults
// unset).
func (s *Server) checkRestoreMatches(ctx context.Context, creq *podrequest.Container, archive string) error {
	name := creq.Name
	mismatch := func(what string, want, got any) error {
		return fmt.Errorf("restore container %q: %s %v does not match the checkpoint's %v: %w", name, what, want, got, errdefs.ErrInvalidArgument)
	}
	meta, rawSpec, err := checkpoint.ReadMeta(archive)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(rawSpec, &spec); err != nil || spec.Process == nil {
		return fmt.Errorf("checkpoint archive %s: %s has no process: %w", archive, checkpoint.SpecDumpFile, errdefs.ErrInvalidArgument)
	}
	if img := creq.Image; img != "" {
		names := []string{meta.RootfsImageRef, meta.RootfsImageName, meta.RootfsImage}
		if !slices.Contains(names, img) && !slices.Contains(names, strings.TrimPrefix(img, "sha256:")) {
			want, werr := s.images.Status(ctx, storageRef(img))
			got, gerr := s.images.Status(ctx, storageRef(cmp.Or(meta.RootfsImageRef, meta.RootfsImageName, meta.RootfsImage)))
			if werr != nil || gerr != nil || want.ID != got.ID {
				return mismatch("image", img, cmp.Or(meta.RootfsImageName, meta.RootfsImageRef, meta.RootfsImage))
			}
		}
	}
	args := spec.Process.Args
	switch {
	case len(creq.Command) > 0:
		if want := append(slices.Clone(creq.Command), creq.Args...); !slices.Equal(want, args) {
			return mismatch("command", want, args)
		}
	case len(creq.Args) > 0:
		// The image's entrypoint, then these.
		if want := creq.Args; len(args) < len(want) || !slices.Equal(want, args[len(args)-len(want):]) {
			return mismatch("args", want, args)
		}
	}
	if wd := creq.WorkingDir; wd != "" && wd != spec.Process.Cwd {
		return mismatch("working directory", wd, spec.Process.Cwd)
	}
	for _, kv := range creq.Env {
		if v := kv.Key + "=" + kv.Value; !slices.Contains(spec.Process.Env, v) {
			return mismatch("environment variable", kv.Key, "environment")
		}
	}
	sc := creq.Security
	if u := sc.RunAsUser; u != nil && uint32(*u) != spec.Process.User.UID {
		return mismatch("run_as_user", *u, spec.Process.User.UID)
	}
	if g := sc.RunAsGroup; g != nil && uint32(*g) != spec.Process.User.GID {
		return mismatch("run_as_group", *g, spec.Process.User.GID)
	}
	return nil
}
