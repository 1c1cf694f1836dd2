package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/runtime"
)

// restoreDir is the directory, in a restored container's dir, that the
// checkpoint archive is unpacked into until StartContainer restores it.
const restoreDir = "restore"

// restoreSource is the checkpoint archive a CreateContainer restores.
type restoreSource struct {
	archive string
	config  *checkpoint.ContainerConfig
	// process is what the archive says of its process, which the
	// container is created with (podrequest.RestoredConfig).
	process podrequest.Checkpointed
}

// restoreSourceOf tells whether image asks to restore a checkpoint (CRI-O's
// convention: the image is the absolute path of a checkpoint archive on the
// host). If so, it returns the archive with its image and process;
// otherwise nil.
func (s *Server) restoreSourceOf(image, handler string) (*restoreSource, error) {
	archive := image
	if !checkpoint.IsArchive(archive) {
		return nil, nil
	}
	if _, err := s.runtimeFor(handler); err != nil {
		return nil, err
	}
	if s.current().Capabilities(handler).Restorer == nil {
		return nil, fmt.Errorf("runtime handler %q cannot restore checkpoints (only conmon handlers, runc or crun with CRIU, can; vm handlers cannot): %w", handler, errdefs.ErrNotImplemented)
	}
	meta, rawSpec, err := checkpoint.ReadMeta(archive)
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(rawSpec, &spec); err != nil {
		return nil, fmt.Errorf("checkpoint archive %s: %s: %w: %w", archive, checkpoint.SpecDumpFile, err, errdefs.ErrInvalidArgument)
	}
	if spec.Process == nil || len(spec.Process.Args) == 0 {
		return nil, fmt.Errorf("checkpoint archive %s: %s has no process: %w", archive, checkpoint.SpecDumpFile, errdefs.ErrInvalidArgument)
	}
	img := cmp.Or(meta.RootfsImageRef, meta.RootfsImageName, meta.RootfsImage)
	if img == "" {
		return nil, fmt.Errorf("checkpoint archive %s names no image: %w", archive, errdefs.ErrInvalidArgument)
	}
	return &restoreSource{archive: archive, config: meta, process: podrequest.Checkpointed{
		Image: img, Args: spec.Process.Args, WorkingDir: spec.Process.Cwd,
		Terminal: spec.Process.Terminal, Env: spec.Process.Env,
	}}, nil
}

// unpack unpacks the archive into the container's dir and applies its root
// filesystem changes to rootfs. It returns the CRIU images' directory.
func (r *restoreSource) unpack(containerDir, rootfs string) (string, error) {
	dir := filepath.Join(containerDir, restoreDir)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if _, err := checkpoint.Extract(r.archive, dir); err != nil {
		return "", err
	}
	if err := checkpoint.ApplyRootfsDiff(dir, rootfs); err != nil {
		return "", fmt.Errorf("checkpoint archive %s: %w", r.archive, err)
	}
	// Applied: no need to keep it until the restore.
	_ = os.Remove(filepath.Join(dir, checkpoint.RootFsDiffTar))
	return filepath.Join(dir, checkpoint.CheckpointDirectory), nil
}

// finishRestoreCreate ends a CreateContainer from a checkpoint: the
// runtime's container is made by StartContainer's restore, so the
// container is recorded as created with the images to restore from.
func (s *Server) finishRestoreCreate(ctx context.Context, c *container.Container, images string) (*container.Container, error) {
	rec := c.Update(func(r *container.Record) {
		r.RestoreFrom = images
		r.State = container.StateCreated
	})
	if err := s.saveContainer(rec); err != nil {
		return nil, err
	}
	log.G(ctx).Info("container created from a checkpoint", "image", rec.ImageRef)
	s.nriPostCreateContainer(ctx, c)
	return c, nil
}

// startOrRestore starts a created container, or restores it when it was
// created from a checkpoint: the runtime's restore makes the container
// and leaves it running.
func (s *Server) startOrRestore(ctx context.Context, rt runtime.Runtime, c *container.Container) error {
	rec := c.Record()
	if rec.RestoreFrom == "" {
		return rt.Start(ctx, c.ID)
	}
	r := s.containerCapabilities(rec).Restorer
	if r == nil {
		return fmt.Errorf("runtime handler %q cannot restore checkpoints: %w", rec.RuntimeHandler, errdefs.ErrNotImplemented)
	}
	req := rec.Request
	if req == nil {
		return fmt.Errorf("container %s: its record holds no request", c.ID)
	}
	if err := checkpoint.CheckCRIU(ctx, criuPath); err != nil {
		return err
	}
	rec = c.Update(func(r *container.Record) { r.RuntimeCreated = true })
	if err := s.saveContainer(rec); err != nil {
		return err
	}
	pid, err := r.Restore(ctx, runtime.CreateOptions{
		ID:            c.ID,
		BundleDir:     rec.BundleDir(),
		LogPath:       rec.LogPath,
		Terminal:      req.Tty,
		Stdin:         req.Stdin,
		StdinOnce:     req.StdinOnce,
		MonitorCgroup: s.monitorCgroup(),
		SpawnMonitor:  s.spawnMonitor(ctx),
		PlaceMonitor:  s.placeMonitor(rec.RuntimeHandler, c.ID),
	}, rec.RestoreFrom)
	if err != nil {
		return fmt.Errorf("restore container from checkpoint: %w", s.runtimeFailure(err))
	}
	c.Update(func(r *container.Record) {
		r.Pid = pid
		r.RestoreFrom = ""
	})
	if err := os.RemoveAll(filepath.Join(rec.Dir, restoreDir)); err != nil {
		log.G(ctx).Warn("remove restored checkpoint", "err", err)
	}
	return nil
}
