package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// restoreDir is the directory, in a restored container's dir, that the
// checkpoint archive is unpacked into until StartContainer restores it.
const restoreDir = "restore"

// restoreSource is the checkpoint archive a CreateContainer restores.
type restoreSource struct {
	archive string
	config  *checkpoint.ContainerConfig
}

// restoreSourceOf tells whether cfg asks to restore a checkpoint (CRI-O's
// convention: the image is the absolute path of a checkpoint archive on the
// host). If so, it returns the archive and the config the container is
// created with: the request's, with the checkpointed container's image,
// command, environment, working directory and terminal, since CRIU
// restores those processes as they were. Otherwise it returns nil and cfg.
func (s *Server) restoreSourceOf(cfg *runtimeapi.ContainerConfig, handler string) (*restoreSource, *runtimeapi.ContainerConfig, error) {
	archive := cfg.GetImage().GetImage()
	if !checkpoint.IsArchive(archive) {
		return nil, cfg, nil
	}
	if _, err := s.runtimeFor(handler); err != nil {
		return nil, nil, err
	}
	if s.current().Capabilities(handler).Restorer == nil {
		return nil, nil, fmt.Errorf("runtime handler %q cannot restore checkpoints (only conmon handlers, runc or crun with CRIU, can; vm handlers cannot): %w", handler, errdefs.ErrNotImplemented)
	}
	meta, rawSpec, err := checkpoint.ReadMeta(archive)
	if err != nil {
		return nil, nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(rawSpec, &spec); err != nil {
		return nil, nil, fmt.Errorf("checkpoint archive %s: %s: %w: %w", archive, checkpoint.SpecDumpFile, err, errdefs.ErrInvalidArgument)
	}
	if spec.Process == nil || len(spec.Process.Args) == 0 {
		return nil, nil, fmt.Errorf("checkpoint archive %s: %s has no process: %w", archive, checkpoint.SpecDumpFile, errdefs.ErrInvalidArgument)
	}
	img := meta.RootfsImageRef
	if img == "" {
		img = meta.RootfsImageName
	}
	if img == "" {
		img = meta.RootfsImage
	}
	if img == "" {
		return nil, nil, fmt.Errorf("checkpoint archive %s names no image: %w", archive, errdefs.ErrInvalidArgument)
	}
	out := proto.Clone(cfg).(*runtimeapi.ContainerConfig)
	out.Image = &runtimeapi.ImageSpec{Image: img}
	out.Command = spec.Process.Args
	out.Args = nil
	out.WorkingDir = spec.Process.Cwd
	out.Tty = spec.Process.Terminal
	out.Envs = nil
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		out.Envs = append(out.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	return &restoreSource{archive: archive, config: meta}, out, nil
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
	if err := s.db.Put(containerBucket, c.ID, container.RecordVersion, rec); err != nil {
		return nil, fmt.Errorf("persist container %s: %w", c.ID, err)
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
	if err := s.db.Put(containerBucket, c.ID, container.RecordVersion, rec); err != nil {
		return fmt.Errorf("persist container %s: %w", c.ID, err)
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
