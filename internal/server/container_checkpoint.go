package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// criuPath is the CRIU binary the runtimes run (runc looks up "criu" in
// PATH); a variable for tests.
var criuPath = "criu"

// CheckpointContainer checkpoints a running container with CRIU, as CRI-O
// does: the runtime dumps its processes (the container keeps running), and
// an archive in CRI-O's layout is written at the request's location: the
// CRIU images, the OCI spec, the container's metadata and its root
// filesystem's changes (rootfs-diff.tar, deleted.files). The archive is a
// tar file, gzip-compressed when the location ends in .gz or .tgz. A
// failure leaves nothing at the location. CreateContainer with the
// archive's path as the image restores it.
func (s *Server) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if req.GetContainerId() == "" {
		return nil, errInvalid("container_id is required")
	}
	loc := req.GetLocation()
	if loc == "" {
		return nil, errInvalid("location of the checkpoint archive is required")
	}
	if !filepath.IsAbs(loc) {
		return nil, errInvalid(fmt.Sprintf("location %q is not an absolute path", loc))
	}
	if req.GetTimeout() < 0 {
		return nil, errInvalid("timeout must not be negative")
	}
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.OpMu.Lock()
	defer c.OpMu.Unlock()
	rec := c.Record()
	if rec.State != container.StateRunning {
		return nil, fmt.Errorf("container %s is %s, not running: only a running container can be checkpointed: %w", c.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.runtimeForContainer(rec)
	if err != nil {
		return nil, err
	}
	cp := s.containerCapabilities(rec).Checkpointer
	if cp == nil {
		return nil, fmt.Errorf("runtime handler %q cannot checkpoint containers (only conmon handlers, runc or crun with CRIU, can; vm handlers cannot): %w", rec.RuntimeHandler, errdefs.ErrNotImplemented)
	}
	if err := checkpoint.CheckCRIU(ctx, criuPath); err != nil {
		return nil, err
	}
	if st, err := rt.State(ctx, c.ID); err != nil || st.Status != runtime.StatusRunning {
		return nil, fmt.Errorf("container %s is not running in its runtime: %w", c.ID, errdefs.ErrFailedPrecondition)
	}

	stage, err := os.MkdirTemp(rec.Dir, "checkpoint-")
	if err != nil {
		return nil, fmt.Errorf("checkpoint staging dir: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(stage); err != nil {
			log.G(ctx).Warn("remove checkpoint staging dir", "dir", stage, "err", err)
		}
	}()
	if err := s.stageCheckpoint(ctx, cp, rec, stage, time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	if err := checkpoint.Write(loc, stage); err != nil {
		return nil, err
	}
	log.G(ctx).Info("container checkpointed", "location", loc)
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// stageCheckpoint fills stage with what the archive holds.
func (s *Server) stageCheckpoint(ctx context.Context, cp runtime.Checkpointer, rec container.Record, stage string, timeout time.Duration) error {
	bundle := rec.BundleDir()
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return fmt.Errorf("read container spec: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("decode container spec: %w", err)
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return fmt.Errorf("container %s has no root filesystem in its spec", rec.ID)
	}
	rootfs := spec.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(bundle, rootfs)
	}
	images := filepath.Join(stage, checkpoint.CheckpointDirectory)
	if err := os.Mkdir(images, 0o700); err != nil {
		return err
	}
	if err := cp.Checkpoint(ctx, rec.ID, runtime.CheckpointOptions{
		ImagePath: images, WorkPath: stage, LeaveRunning: true, Timeout: timeout,
	}); err != nil {
		return s.runtimeFailure(err)
	}
	if err := os.WriteFile(filepath.Join(stage, checkpoint.SpecDumpFile), raw, 0o600); err != nil {
		return err
	}
	if err := checkpoint.WriteJSON(filepath.Join(stage, checkpoint.ConfigDumpFile), checkpoint.ContainerConfig{
		ID:              rec.ID,
		Name:            rec.Name,
		RootfsImage:     rec.ImageRef,
		RootfsImageRef:  imageID(rec.Image),
		RootfsImageName: rec.ImageRef,
		OCIRuntime:      rec.RuntimeHandler,
		CreatedTime:     rec.CreatedAt,
		CheckpointedAt:  time.Now(),
	}); err != nil {
		return err
	}
	list, err := s.images.RootfsChanges(ctx, rec.ID)
	if err != nil {
		return fmt.Errorf("list root filesystem changes: %w", err)
	}
	if err := checkpoint.WriteRootfsDiff(stage, rootfs, list); err != nil {
		return err
	}
	return nil
}
