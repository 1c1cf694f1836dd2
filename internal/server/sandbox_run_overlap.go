package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/sandbox"
)

// overlapNetworkAndCreate reports whether RunPodSandbox may run CNI ADD
// and the runtime's create of the pause container at the same time.
//
// The seeds' order "network before start" asks that the pod's processes
// start in a configured namespace. The namespace is pinned before either
// step, so an oci runtime's create (runc joins the namespace by path; the
// pause program does not run until start) needs nothing from ADD, and
// start still waits for both. Kept in sequence:
//   - a sandbox whose create is quick (Traits.QuickCreate: pinning takes
//     a millisecond or two, nothing to overlap with ADD);
//   - a sandbox whose create uses the network (Traits.CreateUsesNetwork:
//     vm handlers, whose runtime boots the VM at create and mirrors the
//     namespace's interfaces into it then);
//   - order "after": its point is a runtime that sees no interfaces;
//   - a pod with net.* sysctls: runc writes them at create, and one that
//     names eth0 (or net.*.conf.default.*, which eth0 inherits when made
//     after it) depends on whether ADD came first.
func overlapNetworkAndCreate(rec sandbox.Record, traits podsandbox.Traits, pod *podrequest.Pod) bool {
	if traits.CreateUsesNetwork || traits.QuickCreate || rec.NetworkMode != sandbox.ModeCNI || rec.NetworkOrder != config.OrderBefore {
		return false
	}
	for name := range pod.Sysctls {
		if strings.HasPrefix(name, "net.") || strings.HasPrefix(name, "net/") {
			return false
		}
	}
	return true
}

// setupNetworkWhileCreating is setupNetwork and, beside it, the pause
// container's root filesystem (makeRootfs), bundle and runtime create
// (see overlapNetworkAndCreate). One record write before both says that a
// CNI DEL is owed and that the runtime may hold state, so a crash during
// either leaves what recovery needs; one write after both stores the
// network settings and the pause pid. The caller registered every undo
// (root filesystem removal, CNI DEL, runtime delete) before the call: a
// failure of either side is returned once both have finished, and the
// caller's chain undoes both.
func (s *Server) setupNetworkWhileCreating(ctx context.Context, sb *sandbox.Sandbox, ctl podsandbox.Controller, att network.Attachment, pod *podrequest.Pod, files sandboxFiles, makeRootfs func(context.Context) (string, error), plan podsandbox.Plan, timer *metrics.Timer) error {
	if _, err := s.advance(sb, func(r *sandbox.Record) error {
		if err := r.BeginNetworkSetup(); err != nil {
			return err
		}
		return r.BeginContainerCreate()
	}); err != nil {
		return err
	}

	var (
		wg       sync.WaitGroup
		settings *network.Settings
		netErr   error
		netTook  time.Duration
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		settings, netErr = s.network.Setup(ctx, att)
		netTook = time.Since(start)
	}()
	var pid int
	createErr := func() error {
		phase := s.phaseClock("run", nil)
		rootfs, err := makeRootfs(ctx)
		if err != nil {
			return err
		}
		phaseIf(phase, ctl.Phases().Rootfs)
		bundle, err := s.writeSandboxBundle(ctl, sb.Record(), pod, files, plan, rootfs)
		if err != nil {
			return err
		}
		phase("bundle")
		pid, err = s.createPause(ctx, ctl, sb.ID, sb.Record().RuntimeHandler, bundle)
		phaseIf(phase, ctl.Phases().Create)
		return err
	}()
	wg.Wait()
	// Each step's own time; the wall time of the two together is the
	// timer's phase once both succeeded.
	s.metrics.ObservePhase("run", "cni", netTook)
	switch {
	case netErr != nil && createErr != nil:
		return errors.Join(fmt.Errorf("set up pod network: %w", netErr), createErr)
	case netErr != nil:
		return fmt.Errorf("set up pod network: %w", netErr)
	case createErr != nil:
		return createErr
	}

	rec := sb.Update(func(r *sandbox.Record) {
		settings.SandboxID = r.ID
		settings.SandboxKey = r.NetworkSettings.SandboxKey
		settings.Activation = true
		r.NetworkSettings = *settings
		r.Pid = pid
	})
	if err := s.save(rec); err != nil {
		return err
	}
	timer.Phase("cni_and_create")
	if err := s.hit(ctx, "run.cni"); err != nil {
		return err
	}
	return s.hit(ctx, "run.create")
}
