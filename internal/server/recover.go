package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/orphans"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
)

// recoveryWorkers is how many pods are recovered at once after a restart:
// recovery is mostly waiting for runtime and CNI commands.
const recoveryWorkers = 4

// Recover reloads the sandbox and container records and publishes them,
// then returns, so that the daemon serves within moments of its start
// whatever the number of pods. Reconciling each pod with the host goes on in
// the background, each pod under its own locks, taken here before anything
// is served: a sandbox caught half-way through RunPodSandbox is undone, a
// removal or stop caught half-way is finished, a pod whose process or
// namespace is gone becomes NOTREADY; an RPC that changes a pod still being
// recovered waits for it. When every pod is done, podbay-owned resources
// that no record owns are released (Recovered is closed then). Recovery logs
// what it cannot fix and goes on: a daemon that refuses to start helps
// nobody.
func (s *Server) Recover(ctx context.Context) error {
	start := time.Now()
	sbRecs, err := loadRecords[sandbox.Record](ctx, s.db, sandboxBucket, sandbox.RecordVersion,
		func(r sandbox.Record) string { return r.ID })
	if err != nil {
		return fmt.Errorf("load sandbox records: %w", err)
	}
	ctrRecs, err := loadRecords[container.Record](ctx, s.db, containerBucket, container.RecordVersion,
		func(r container.Record) string { return r.ID })
	if err != nil {
		log.G(ctx).Error("load container records", "err", err)
	}

	for i := range sbRecs {
		sbRecs[i] = withPodRequest(ctx, sbRecs[i])
	}
	for i := range ctrRecs {
		ctrRecs[i] = withContainerRequest(ctx, ctrRecs[i])
	}
	s.holdImageVolumes(ctx, ctrRecs)
	var jobs []func(context.Context)
	pods := map[string]*podRecovery{}
	for _, rec := range sbRecs {
		if rec.Phase == sandbox.PhaseCreating {
			// Not published: its name is free for the kubelet's retry.
			jobs = append(jobs, func(ctx context.Context) { s.recoverCreatingSandbox(ctx, rec) })
			continue
		}
		sb := sandbox.New(rec)
		sb.StopMu.Lock()
		sb.OpMu.Lock()
		s.index.Add(rec.Name, sb)
		pods[sb.ID] = &podRecovery{sb: sb}
	}
	for _, rec := range ctrRecs {
		if rec.State == container.StateCreating {
			jobs = append(jobs, func(ctx context.Context) { s.recoverCreatingContainer(ctx, rec) })
			continue
		}
		c := container.New(rec)
		c.OpMu.Lock()
		s.containers.Add(rec.Name, c)
		if p := pods[rec.SandboxID]; p != nil {
			p.containers = append(p.containers, c)
			continue
		}
		// Its pod is gone: the container goes too.
		jobs = append(jobs, func(ctx context.Context) {
			defer c.OpMu.Unlock()
			s.recoverContainerLocked(ctx, c)
		})
	}
	for _, p := range pods {
		jobs = append(jobs, func(ctx context.Context) { s.recoverPod(ctx, p) })
	}
	log.G(ctx).Info("records loaded; recovering pods in the background",
		"pods", len(pods), "containers", len(ctrRecs), "duration", time.Since(start))

	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer close(s.recovered)
		ctx := context.WithoutCancel(ctx)
		runJobs(ctx, recoveryWorkers, jobs)
		if s.ctx.Err() != nil {
			return
		}
		s.collectGarbage(ctx)
		log.G(ctx).Info("recovery finished", "pods", len(pods), "duration", time.Since(start))
	}()
	return nil
}

// Recovered is closed once the recovery Recover started has finished.
func (s *Server) Recovered() <-chan struct{} { return s.recovered }

// podRecovery is a published pod and its containers, all locked until
// recoverPod has reconciled them.
type podRecovery struct {
	sb         *sandbox.Sandbox
	containers []*container.Container
}

// recoverPod reconciles one pod's containers, then the pod, and releases
// their locks.
func (s *Server) recoverPod(ctx context.Context, p *podRecovery) {
	sb := p.sb
	defer sb.StopMu.Unlock()
	defer sb.OpMu.Unlock()
	ctx = log.With(ctx, "pod", sb.ID)
	for _, c := range p.containers {
		s.recoverContainerLocked(log.With(ctx, "container", c.ID), c)
		c.OpMu.Unlock()
	}
	rec := sb.Record()
	switch rec.Phase {
	case sandbox.PhaseRemoving:
		if err := s.removePodSandboxLocked(ctx, sb); err != nil {
			log.G(ctx).Error("finish removal of sandbox", "err", err)
		}
	case sandbox.PhaseStopping:
		// A Stop interrupted by a crash: finish it (each step is
		// idempotent), so released IPs are not reported as the pod's.
		if err := s.stopPodSandboxLocked(ctx, sb); err != nil {
			log.G(ctx).Error("finish stop of sandbox", "err", err)
		}
	default:
		s.reconcile(ctx, sb)
	}
}

// recoverCreatingSandbox undoes a sandbox a crash caught half-way through
// RunPodSandbox, and keeps retrying in the background if that fails.
func (s *Server) recoverCreatingSandbox(ctx context.Context, rec sandbox.Record) {
	ctx = log.With(ctx, "pod", rec.ID)
	if err := s.undoCreating(ctx, rec); err != nil {
		log.G(ctx).Error("undo half-made sandbox; will retry", "err", err)
		s.finishUndo(rec.ID)
		return
	}
	log.G(ctx).Info("undid sandbox caught half-way through creation")
}

// runJobs runs jobs on n workers and returns when all are done.
func runJobs(ctx context.Context, n int, jobs []func(context.Context)) {
	work := make(chan func(context.Context))
	var wg sync.WaitGroup
	for range min(n, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range work {
				job(ctx)
			}
		}()
	}
	for _, job := range jobs {
		work <- job
	}
	close(work)
	wg.Wait()
}

// reconcile checks a published sandbox against the host.
func (s *Server) reconcile(ctx context.Context, sb *sandbox.Sandbox) {
	rec := sb.Record()
	if rec.Phase != sandbox.PhaseReady {
		return
	}
	ctl, err := s.sandboxController(rec)
	if err != nil {
		s.markNotReady(ctx, sb, err.Error())
		return
	}
	st, err := ctl.Status(ctx, rec.ID)
	if err != nil || st.Status != runtime.StatusRunning {
		why := fmt.Sprintf("sandbox container is %s", st.Status)
		if err != nil {
			why = err.Error()
		}
		s.markNotReady(ctx, sb, why)
		return
	}
	if rec.NetworkMode == sandbox.ModeCNI {
		if mounted, err := s.netns.IsMounted(rec.NetworkSettings.SandboxKey); err != nil || !mounted {
			s.markNotReady(ctx, sb, "network namespace is gone")
			return
		}
	}
	s.watchExit(sb, ctl)
}

// undoCreating releases what a RunPodSandbox interrupted by a crash (or a
// failed rollback) took, in reverse order of acquisition, and stops at the
// first step that fails, so that what a retry needs (the pinned namespace
// for CNI DEL) is still there. Every step is idempotent.
func (s *Server) undoCreating(ctx context.Context, rec sandbox.Record) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	// A sandbox that needs no handler (pinned namespaces) is deleted even
	// before ContainerCreated: that is idempotent and costs nothing.
	if rec.ContainerCreated || s.sandboxKind(rec).Traits().Handlerless {
		ctl, err := s.sandboxController(rec)
		if err != nil {
			return err
		}
		if err := ctl.Delete(ctx, rec.ID); err != nil {
			return fmt.Errorf("delete sandbox container: %w", err)
		}
	}
	if rec.NetworkMode == sandbox.ModeCNI {
		if rec.OwesNetworkTeardown() {
			if err := s.teardownNetwork(ctx, rec); err != nil {
				return err
			}
		}
		if err := s.netns.Remove(rec.NetworkSettings.SandboxKey); err != nil {
			return err
		}
	}
	if rec.ShmPath != "" {
		if err := podshm.Remove(rec.ShmPath); err != nil {
			return err
		}
	}
	if err := s.images.RemoveRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("remove sandbox root filesystem: %w", err)
	}
	if err := removeRecordDirs(rec.Dir, rec.BundleDir()); err != nil {
		return fmt.Errorf("remove sandbox dir: %w", err)
	}
	return s.db.Delete(sandboxBucket, rec.ID)
}

// undoRetryInterval spaces the attempts to finish a failed rollback.
const undoRetryInterval = 15 * time.Second

// finishUndo retries undoCreating for the record of a sandbox whose
// rollback failed. The name is free meanwhile: the kubelet's retry gets a
// new sandbox.
func (s *Server) finishUndo(id string) {
	s.retryInBackground(log.With(s.ctx, "pod", id), "sandbox rollback", func(ctx context.Context) (bool, error) {
		var rec sandbox.Record
		if _, err := s.db.Get(sandboxBucket, id, &rec); err != nil {
			return true, nil // gone, or unreadable: recovery handles it
		}
		return false, s.undoCreating(ctx, rec)
	})
}

// retryInBackground calls attempt every undoRetryInterval until it
// succeeds, reports there is nothing left to do, or the server stops (the
// next start picks up what is left from the records).
func (s *Server) retryInBackground(ctx context.Context, what string, attempt func(context.Context) (done bool, err error)) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTicker(undoRetryInterval)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
			done, err := attempt(ctx)
			if err != nil {
				log.G(ctx).Warn("finishing "+what+" failed; will retry", "err", err)
				continue
			}
			if !done {
				log.G(ctx).Info("finished " + what)
			}
			return
		}
	}()
}

// collectGarbage releases the podbay-owned resources on the host that no
// record owns (internal/orphans). It runs while the daemon serves.
func (s *Server) collectGarbage(ctx context.Context) {
	orphans.Collect(ctx, orphans.Host{
		Root:       s.cfg.Root,
		NetNSDir:   s.cfg.NetNSDir,
		BundleRoot: s.bundleRoot(),
		PinRoot:    s.pinRoot(),
		ShmRoot:    s.shmRoot(),
		Network:    s.network,
		NetNS:      s.netns,
		Images:     s.images,
		Runtimes:   s.current().Runtimes(),
	}, s.ownedIDs)
}

// ownedIDs are the IDs of every sandbox and container record. (What a
// quarantined record named is released, as at every start.)
func (s *Server) ownedIDs() (map[string]bool, error) {
	owned := map[string]bool{}
	for _, bucket := range []string{sandboxBucket, containerBucket} {
		keys, err := s.db.Keys(bucket)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			owned[k] = true
		}
	}
	return owned, nil
}
