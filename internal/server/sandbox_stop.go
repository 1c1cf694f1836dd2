package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/sandbox"
)

// StopPodSandbox stops a pod: tears its network down (CNI DEL, then unmount
// of the namespace, keeping the file) and stops the sandbox container, as
// docs/design.md ("StopPodSandbox") describes. The CRI spec requires it to
// be idempotent, and a sandbox that is already gone is not an error.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	err := withPresent(s.index, req.GetPodSandboxId(), lockSandboxStop, func(sb *sandbox.Sandbox) error {
		return s.stopPodSandboxLocked(ctx, sb)
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// stopPodSandboxLocked does the work of Stop; the caller holds sb.OpMu.
// Each step records its completion, so a Stop interrupted by a crash
// resumes where it stopped and a repeated Stop does nothing. For a pod
// being removed it does whatever of that work is still owed and leaves the
// phase to the removal.
func (s *Server) stopPodSandboxLocked(ctx context.Context, sb *sandbox.Sandbox) error {
	rec := sb.Record()
	if rec.Phase == sandbox.PhaseStopped {
		// A repeated Stop. The phase follows the pod's containers
		// stopping, and no container can be created in a pod that is
		// not ready.
		return nil
	}
	timer := s.metrics.Start(ctx, "stop")
	ctl, ctlErr := s.sandboxController(rec)

	// Persisted before anything is torn down: the pod is going away, and a
	// crash from here on leaves a record that recovery finishes stopping
	// (rather than a READY pod whose IP CNI DEL already released). A
	// removal has persisted its own phase already.
	if !rec.StopBegun() {
		var err error
		if rec, err = s.advance(sb, (*sandbox.Record).BeginStop); err != nil {
			return err
		}
	}

	// The pod's containers first: nothing may run in a pod whose network
	// is being torn down. The kubelet has stopped them gracefully already;
	// what is left gets no grace period (CRI spec: "forcibly terminated").
	// They stop in parallel: each has its own lock and monitor.
	if err := s.stopPodContainers(ctx, sb.ID); err != nil {
		return err
	}
	timer.Phase("containers")

	// The network's release and the pause process's kill depend on
	// nothing of each other for an oci handler (see teardownOverlaps); each
	// records its own completion.
	if rec.OwesNetworkTeardown() {
		if s.teardownOverlaps(rec) {
			var (
				wg     sync.WaitGroup
				netErr error
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				netErr = s.releasePodNetwork(ctx, sb, rec, nil)
			}()
			stopErr := s.stopPause(ctx, rec, ctl, ctlErr, nil)
			if stopErr == nil {
				stopErr = s.releasePause(ctx, sb, rec, ctl)
			}
			wg.Wait()
			timer.Phase("network_and_kill")
			if err := errors.Join(netErr, stopErr); err != nil {
				return err
			}
		} else {
			if err := s.releasePodNetwork(ctx, sb, rec, timer); err != nil {
				return err
			}
			if err := s.stopPause(ctx, rec, ctl, ctlErr, timer); err != nil {
				return err
			}
		}
	} else {
		if err := s.stopPause(ctx, rec, ctl, ctlErr, timer); err != nil {
			return err
		}
		if s.teardownOverlaps(rec) {
			if err := s.releasePause(ctx, sb, rec, ctl); err != nil {
				return err
			}
		}
	}
	// Nothing of the pod runs any more: its /dev/shm goes, as CRI-O
	// unmounts it at stop (the directory stays for Remove).
	if err := s.releasePodShm(ctx, rec); err != nil {
		return err
	}
	if rec.Phase == sandbox.PhaseStopping {
		if _, err := s.advance(sb, (*sandbox.Record).FinishStop); err != nil {
			return err
		}
		timer.Phase("persist")
		log.G(ctx).Info("pod sandbox stopped")
		s.nriStopPodSandbox(ctx, sb)
	}
	return nil
}

// teardownOverlaps reports whether Stop may release the pod's network
// while it kills the pause process and then deletes the pause container
// (releasePause), and Remove delete the runtime's state while it removes
// the root filesystem: for oci handlers, whose pause process holds nothing
// the network needs and whose runtime state nothing of the storage. A vm
// handler's runtime tears its mirror of the pod's interfaces down as the VM
// stops, and its shim unmounts under the bundle on delete, so it keeps the
// order, and its pause container is deleted by Remove. The pod's sandbox
// controller declares which (podsandbox.Traits.TeardownInOrder); a handler
// no longer configured keeps the order, except for a sandbox that needs
// none (Traits.Handlerless: pinned namespaces).
func (s *Server) teardownOverlaps(rec sandbox.Record) bool {
	traits := s.sandboxKind(rec).Traits()
	if traits.Handlerless {
		return true
	}
	_, ok := s.current().Config().Runtimes[rec.RuntimeHandler]
	return ok && !traits.TeardownInOrder
}

// stopPodContainers stops the pod's containers, in parallel, with no grace
// period.
func (s *Server) stopPodContainers(ctx context.Context, sandboxID string) error {
	ctrs := s.containers.InSandbox(sandboxID)
	errs := make([]error, len(ctrs))
	var wg sync.WaitGroup
	for i, c := range ctrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.OpMu.Lock()
			defer c.OpMu.Unlock()
			if err := s.stopContainerLocked(ctx, c, 0); err != nil {
				errs[i] = fmt.Errorf("stop container %s: %w", c.ID, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// releasePodNetwork runs CNI DEL, unmounts the namespace (keeping the
// file) and records the network released. With a nil timer each phase is
// observed on its own, for a release that overlaps other work.
func (s *Server) releasePodNetwork(ctx context.Context, sb *sandbox.Sandbox, rec sandbox.Record, timer *metrics.Timer) error {
	phase := s.phaseClock("stop", timer)
	if err := s.teardownNetwork(ctx, rec); err != nil {
		return err
	}
	phase("cni")
	if err := s.hit(ctx, "stop.cni"); err != nil {
		return err
	}
	if err := s.netns.Unmount(rec.NetworkSettings.SandboxKey); err != nil {
		return err
	}
	phase("netns")
	if err := s.hit(ctx, "stop.unmount"); err != nil {
		return err
	}
	_, err := s.advance(sb, (*sandbox.Record).ReleaseNetwork)
	return err
}

// stopPause kills the pause process unless conmon's exit file says it is
// gone (a pod that exited, or Remove after Stop).
func (s *Server) stopPause(ctx context.Context, rec sandbox.Record, ctl podsandbox.Controller, ctlErr error, timer *metrics.Timer) error {
	if !rec.ContainerCreated || rec.PauseReleased {
		return nil
	}
	if ctlErr != nil {
		return fmt.Errorf("stop sandbox container: %w", ctlErr)
	}
	phase := s.phaseClock("stop", timer)
	if _, exited, err := ctl.Exited(rec.ID); err != nil || !exited {
		// The pause process holds nothing worth a grace period.
		if err := ctl.Stop(ctx, rec.ID); err != nil {
			return fmt.Errorf("stop sandbox container: %w", err)
		}
		phaseIf(phase, ctl.Phases().Stop)
	}
	return nil
}

// releasePause has the controller release the dead sandbox (its runtime
// state and root filesystem, or its pins: Controller.Release) during Stop,
// as containerd deletes a sandbox's task on stop,
// and records it, so that Remove has only files and the record left to
// delete. Nothing reads either once the pod has stopped: its status and
// stats come from the record and the pod's cgroup, and a stopped pod never
// starts again (the kubelet makes a new one). Both deletes are idempotent,
// so a Stop interrupted here is finished by the next Stop or the Remove.
func (s *Server) releasePause(ctx context.Context, sb *sandbox.Sandbox, rec sandbox.Record, ctl podsandbox.Controller) error {
	if !rec.ContainerCreated || rec.PauseReleased {
		return nil
	}
	sb.EndExitWatch()
	observe := func(phase string, took time.Duration) { s.metrics.ObservePhase("stop", phase, took) }
	if err := ctl.Release(ctx, s.sandboxHost(), rec.ID, observe); err != nil {
		return err
	}
	if err := s.hit(ctx, "stop.release_pause"); err != nil {
		return err
	}
	_, err := s.advance(sb, (*sandbox.Record).ReleasePause)
	return err
}

// phaseClock returns a function that records a phase of operation: on
// timer when there is one, else as a phase of its own, timed from the
// previous call (or from now), for work that runs alongside other work.
func (s *Server) phaseClock(operation string, timer *metrics.Timer) func(string) {
	if timer != nil {
		return timer.Phase
	}
	last := time.Now()
	return func(name string) {
		now := time.Now()
		s.metrics.ObservePhase(operation, name, now.Sub(last))
		last = now
	}
}

// phaseIf records phase name unless the name is empty: the pod's kind of
// sandbox has no such step (podsandbox.Phases).
func phaseIf(phase func(string), name string) {
	if name != "" {
		phase(name)
	}
}

// teardownNetwork issues CNI DEL for a sandbox. DEL is issued even when the
// namespace is gone (after a reboot, or an unmount by hand): the plugins
// still release IPs and host rules, and the CNI spec allows an empty netns.
func (s *Server) teardownNetwork(ctx context.Context, rec sandbox.Record) error {
	path := rec.NetworkSettings.SandboxKey
	mounted, err := s.netns.IsMounted(path)
	if err != nil {
		return err
	}
	if !mounted {
		path = ""
	}
	att := network.Attachment{
		ID:           rec.ID,
		NetNS:        path,
		PodName:      rec.Metadata.Name,
		PodNamespace: rec.Metadata.Namespace,
		PodUID:       rec.Metadata.UID,
	}
	for _, pm := range rec.NetworkSettings.CNIPorts {
		att.PortMappings = append(att.PortMappings, network.PortMapping(pm))
	}
	if err := s.network.Teardown(ctx, att); err != nil {
		return fmt.Errorf("tear down pod network: %w", err)
	}
	return nil
}

// releasePodShm unmounts the pod's /dev/shm, if it has one, once its
// containers and sandbox process are gone. Idempotent.
func (s *Server) releasePodShm(ctx context.Context, rec sandbox.Record) error {
	if rec.ShmPath == "" {
		return nil
	}
	if err := podshm.Unmount(rec.ShmPath); err != nil {
		return err
	}
	return s.hit(ctx, "stop.shm")
}
