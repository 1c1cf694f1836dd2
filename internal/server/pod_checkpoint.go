package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/checkpoint"
	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
)

// resumeTimeout bounds the resume of a pod checkpoint's containers; it is
// not bound by the caller's deadline, which may have passed.
const resumeTimeout = 30 * time.Second

// CheckpointPod checkpoints the selected running containers of a ready pod
// at one instant: every container is paused (the cgroup freezer) before
// any is captured, each is captured as CheckpointContainer captures one
// (CRIU dump leaving it running, spec, metadata, root filesystem changes),
// and all are resumed before the call returns, whatever happened. The
// output directory then holds checkpoint.PodFile (the pod's config and the
// list of containers) and one checkpoint archive per container,
// <metadata name>.tar. On error nothing the call wrote is left there.
func (s *Server) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	if err := checkCheckpointPodRequest(req); err != nil {
		return nil, err
	}
	out, ids := req.GetOutputPath(), req.GetContainerIds()
	sb, err := s.readySandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sb.StopMu.RLock()
	defer sb.StopMu.RUnlock()
	if _, err := s.readySandbox(sb.ID); err != nil { // stopped meanwhile
		return nil, err
	}
	sbRec := sb.Record()

	// The containers, locked in ID order (no deadlock with another pod
	// checkpoint), must be the pod's, running, with distinct names.
	var ctrs []*container.Container
	for _, id := range ids {
		c, err := s.containers.Get(id)
		if err != nil {
			return nil, err
		}
		if c.SandboxID != sb.ID {
			return nil, errInvalid(fmt.Sprintf("container %s is not in pod sandbox %s", c.ID, sb.ID))
		}
		ctrs = append(ctrs, c)
	}
	slices.SortFunc(ctrs, func(a, b *container.Container) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	for i, c := range ctrs {
		if i > 0 && c == ctrs[i-1] {
			return nil, errInvalid(fmt.Sprintf("container_ids name container %s twice", c.ID))
		}
		c.OpMu.Lock()
		defer c.OpMu.Unlock()
	}
	recs, err := checkpointedRecords(ctrs)
	if err != nil {
		return nil, err
	}

	if err := checkOutputDir(out); err != nil {
		return nil, err
	}
	rt, err := s.runtimeFor(sbRec.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	caps := s.current().Capabilities(sbRec.RuntimeHandler)
	cp, pauser := caps.Checkpointer, caps.Pauser
	if cp == nil || pauser == nil {
		return nil, fmt.Errorf("runtime handler %q cannot checkpoint pods (only conmon handlers, runc or crun with CRIU, can; vm handlers cannot): %w", sbRec.RuntimeHandler, errdefs.ErrNotImplemented)
	}
	if err := checkpoint.CheckCRIU(ctx, criuPath); err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		if st, err := rt.State(ctx, c.ID); err != nil || st.Status != runtime.StatusRunning {
			return nil, fmt.Errorf("container %s is not running in its runtime: %w", c.ID, errdefs.ErrFailedPrecondition)
		}
	}

	// Stages, one per container, in the containers' dirs.
	stages := make([]string, len(recs))
	defer func() {
		for _, st := range stages {
			if st == "" {
				continue
			}
			if err := os.RemoveAll(st); err != nil {
				log.G(ctx).Warn("remove checkpoint staging dir", "dir", st, "err", err)
			}
		}
	}()
	for i, rec := range recs {
		if stages[i], err = os.MkdirTemp(rec.Dir, "checkpoint-"); err != nil {
			return nil, fmt.Errorf("checkpoint staging dir: %w", err)
		}
	}

	if err := s.capturePod(ctx, pauser, cp, recs, stages); err != nil {
		return nil, err
	}

	if err := writePodCheckpoint(ctx, out, sbRec, recs, stages); err != nil {
		return nil, err
	}
	log.G(ctx).Info("pod checkpointed", "pod", sb.ID, "containers", len(recs), "output", out)
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// checkCheckpointPodRequest checks what of req needs neither the pod nor
// the host.
func checkCheckpointPodRequest(req *runtimeapi.CheckpointPodRequest) error {
	if req.GetPodSandboxId() == "" {
		return errInvalid("pod_sandbox_id is required")
	}
	out := req.GetOutputPath()
	if out == "" || !filepath.IsAbs(out) {
		return errInvalid(fmt.Sprintf("output_path %q is not an absolute path", out))
	}
	if len(req.GetOptions()) > 0 {
		return errInvalid(fmt.Sprintf("checkpoint options are not supported (got %d)", len(req.GetOptions())))
	}
	ids := req.GetContainerIds()
	if len(ids) == 0 {
		return errInvalid("container_ids must name at least one container")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			return errInvalid(fmt.Sprintf("container_ids: %q is empty or repeated", id))
		}
		seen[id] = true
	}
	return nil
}

// checkpointedRecords are the records of ctrs, whose OpMu the caller
// holds: each must be running, and their names distinct.
func checkpointedRecords(ctrs []*container.Container) ([]container.Record, error) {
	recs := make([]container.Record, len(ctrs))
	names := map[string]bool{}
	for i, c := range ctrs {
		recs[i] = c.Record()
		if recs[i].State != container.StateRunning {
			return nil, fmt.Errorf("container %s is %s, not running: only running containers can be checkpointed: %w", c.ID, recs[i].State, errdefs.ErrFailedPrecondition)
		}
		if names[recs[i].MetaName] {
			return nil, fmt.Errorf("two selected containers are named %q: %w", recs[i].MetaName, errdefs.ErrFailedPrecondition)
		}
		names[recs[i].MetaName] = true
	}
	return recs, nil
}

// writePodCheckpoint writes into out an archive of each container of
// recs from its stage, then the pod's index; on error it removes what
// it wrote.
func writePodCheckpoint(ctx context.Context, out string, sbRec sandbox.Record, recs []container.Record, stages []string) error {
	written := []string{}
	pod := checkpoint.Pod{
		Version: checkpoint.PodVersion, ID: sbRec.ID, RuntimeHandler: sbRec.RuntimeHandler,
		CheckpointedAt: time.Now(), Config: sbRec.Config,
	}
	err := func() error {
		for i, rec := range recs {
			name := rec.MetaName + ".tar"
			written = append(written, filepath.Join(out, name))
			if err := checkpoint.Write(filepath.Join(out, name), stages[i]); err != nil {
				return err
			}
			pod.Containers = append(pod.Containers, checkpoint.PodContainer{Name: rec.MetaName, ID: rec.ID, Archive: name})
		}
		written = append(written, filepath.Join(out, checkpoint.PodFile))
		return checkpoint.WriteJSON(filepath.Join(out, checkpoint.PodFile), pod)
	}()
	if err != nil {
		for _, p := range written {
			if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				log.G(ctx).Warn("remove partial pod checkpoint", "path", p, "err", rerr)
			}
		}
		return err
	}
	return nil
}

// capturePod pauses every container of recs, then captures each into its
// stage, then resumes them all; the resume always runs, bound by its own
// timeout rather than the caller's deadline. A container whose pause
// failed is resumed too (it may be half frozen).
func (s *Server) capturePod(ctx context.Context, pauser runtime.Pauser, cp runtime.Checkpointer, recs []container.Record, stages []string) (retErr error) {
	paused := 0
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resumeTimeout)
		defer cancel()
		var errs []error
		for _, rec := range recs[:paused] {
			if err := pauser.Resume(rctx, rec.ID); err != nil {
				errs = append(errs, fmt.Errorf("resume container %s after the pod checkpoint: %w", rec.ID, s.runtimeFailure(err)))
			}
		}
		if err := errors.Join(errs...); err != nil {
			log.G(ctx).Error("resume after pod checkpoint", "err", err)
			retErr = errors.Join(retErr, err)
		}
	}()
	for _, rec := range recs {
		paused++
		if err := pauser.Pause(ctx, rec.ID); err != nil {
			return fmt.Errorf("pause container %s for the pod checkpoint: %w", rec.ID, s.runtimeFailure(err))
		}
	}
	for i, rec := range recs {
		var timeout time.Duration
		if dl, ok := ctx.Deadline(); ok {
			if timeout = time.Until(dl); timeout <= 0 {
				return fmt.Errorf("pod checkpoint: %w", context.DeadlineExceeded)
			}
		}
		if err := s.stageCheckpoint(ctx, cp, rec, stages[i], timeout); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", rec.ID, err)
		}
	}
	return nil
}

// checkOutputDir checks that dir is an existing, empty directory.
func checkOutputDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("output_path %s: %w: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	if !fi.IsDir() {
		return errInvalid(fmt.Sprintf("output_path %s is not a directory", dir))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("output_path %s: %w", dir, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("output_path %s is not empty (%d entries): %w", dir, len(ents), errdefs.ErrFailedPrecondition)
	}
	return nil
}
