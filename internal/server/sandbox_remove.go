package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/sandbox"
)

// RemovePodSandbox stops the pod if needed and removes everything it has:
// the sandbox container, the network namespace file, its directory and its
// record. Removing a sandbox that does not exist succeeds (CRI spec).
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	err := withPresent(s.index, req.GetPodSandboxId(), lockSandboxStop, func(sb *sandbox.Sandbox) error {
		return s.removePodSandboxLocked(ctx, sb)
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// removePodSandboxLocked does the work of Remove; the caller holds sb.OpMu.
func (s *Server) removePodSandboxLocked(ctx context.Context, sb *sandbox.Sandbox) error {
	if _, err := s.advance(sb, (*sandbox.Record).BeginRemove); err != nil {
		return err
	}
	if err := s.stopPodSandboxLocked(ctx, sb); err != nil {
		return err
	}
	timer := s.metrics.Start(ctx, "remove")
	for _, c := range s.containers.InSandbox(sb.ID) {
		c.OpMu.Lock()
		var err error
		if s.containers.Has(c.ID) { // else a RemoveContainer took it meanwhile
			err = s.removeContainerLocked(ctx, c)
		}
		c.OpMu.Unlock()
		if err != nil {
			return fmt.Errorf("remove container %s: %w", c.ID, err)
		}
	}
	// RemoveContainer's releases finishing in the background.
	if err := s.removals.wait(ctx, sb.ID); err != nil {
		return err
	}
	timer.Phase("containers")
	rec := sb.Record()
	// The Stop above released an oci handler's pause container
	// (releasePause). A vm handler's is deleted here, the runtime's delete
	// first: its shim unmounts what it mounted under the bundle.
	if !rec.PauseReleased {
		sb.EndExitWatch()
		if rec.ContainerCreated {
			if err := s.deleteSandboxContainer(ctx, rec); err != nil {
				return err
			}
			timer.Phase("runtime_delete")
		}
		if err := s.images.RemoveRootfs(ctx, rec.ID); err != nil {
			return fmt.Errorf("remove sandbox root filesystem: %w", err)
		}
		timer.Phase("rootfs")
	}
	if key := rec.NetworkSettings.SandboxKey; key != "" {
		if err := s.netns.Remove(key); err != nil {
			return err
		}
		timer.Phase("netns")
	}
	if err := s.hit(ctx, "remove.netns"); err != nil {
		return err
	}
	if rec.ShmPath != "" {
		if err := podshm.Remove(rec.ShmPath); err != nil {
			return err
		}
	}
	if err := removeRecordDirs(rec.Dir, rec.BundleDir()); err != nil {
		return fmt.Errorf("remove sandbox dir: %w", err)
	}
	if err := s.db.Delete(sandboxBucket, rec.ID); err != nil {
		return fmt.Errorf("delete sandbox record: %w", err)
	}
	s.index.Delete(sb)
	s.publishSandboxEvent(ctx, sb, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	s.nriRemovePodSandbox(ctx, rec)
	timer.Phase("persist")
	log.G(ctx).Info("pod sandbox removed")
	return nil
}

// deleteSandboxContainer has the runtime delete the pause container.
func (s *Server) deleteSandboxContainer(ctx context.Context, rec sandbox.Record) error {
	ctl, err := s.sandboxController(rec)
	if err != nil {
		return fmt.Errorf("delete sandbox container: %w", err)
	}
	if err := ctl.Delete(ctx, rec.ID); err != nil {
		return fmt.Errorf("delete sandbox container: %w", err)
	}
	return nil
}
