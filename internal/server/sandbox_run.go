package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/podshm"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
	"github.com/podbay/podbay/internal/undo"
)

// RunPodSandbox creates and starts a pod sandbox, following the flow in
// docs/design.md ("RunPodSandbox"). The work runs detached from the
// client's cancellation: if the kubelet's deadline expires first, the
// sandbox is finished anyway and parked, and the kubelet's retry with the
// same metadata gets it instead of a "name is reserved" error (CRI-O does
// the same).
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	// Held until the pod is published or given up: a reload keeps the
	// handler meanwhile.
	lease, err := s.live.Acquire(req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	handedOff := false
	defer func() {
		if !handedOff {
			lease.Release()
		}
	}()
	handler, rt := lease.Handler, lease.Runtime
	pod, err := podrequest.FromSandboxConfig(cfg, podrequest.Options{RuntimeHandler: handler, DefaultNetworkOrder: lease.Config.NetworkOrder})
	if err != nil {
		return nil, err
	}
	if err := s.checkCgroupParent(pod.CgroupParent); err != nil {
		return nil, err
	}
	// Chosen here, once: a reload of sandbox_process changes new pods
	// only, and the record keeps the kind for the pod's life.
	kind := podsandbox.Choose(lease.Config.Type, s.current().Config().SandboxProcess, podsandbox.Needs{
		SharedPID:     pod.Namespaces.PID == podrequest.NamespacePod,
		UserNamespace: pod.UserNS != nil,
	})
	ctl := podsandbox.For(kind, rt, s.pinRoot())
	if err := checkNetworkOrder(ctx, handler, lease.Config, pod); err != nil {
		return nil, err
	}
	if err := checkUserNamespaceSupport(handler, lease.Capabilities.HandlerFeatures(), pod.UserNS); err != nil {
		return nil, err
	}
	if ctl.Traits().HostKernel {
		// The node's kernel is the pod's: a sysctl it lacks, runc cannot
		// set. A VM's guest kernel may have sysctls the node lacks.
		if err := specgen.CheckSysctlsExist(pod.Sysctls); err != nil {
			return nil, err
		}
	}
	name := sandboxName(pod.Metadata)
	ctx = log.With(ctx, "podName", name)

	mine, id, err := claim(ctx, s.index, name, sandbox.ErrNameReserved)
	if err != nil {
		return nil, err
	}
	if mine == nil {
		return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
	}

	handedOff = true
	sb, err := detach(s, ctx,
		func(work context.Context) (*sandbox.Sandbox, error) {
			defer lease.Release()
			sb, err := s.runPodSandbox(work, name, kind, ctl, pod, cfg)
			s.finishSandbox(work, name, mine, sb, err)
			return sb, err
		},
		func() { s.index.Abandon(mine) })
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.ID}, nil
}

// runPodSandbox does RunPodSandbox's work. Every step registers its undo
// right after it acquires a resource (or before, where the acquire can
// half-succeed); a failure undoes exactly the steps done, in reverse.
// cfg is the request's config as the kubelet sent it, kept in the record
// for what shows it; pod is what podbay acts on.
//
// The work is three functions, each ending in the next: a step's undo is
// deferred in the function that made it, so a failure in a later one
// unwinds that one's steps first, then the earlier ones', all on one
// undo.Chain.
func (s *Server) runPodSandbox(ctx context.Context, name string, kind podsandbox.Kind, ctl podsandbox.Controller, pod *podrequest.Pod, cfg *runtimeapi.PodSandboxConfig) (_ *sandbox.Sandbox, retErr error) {
	r := &sandboxRun{ctl: ctl, pod: pod, timer: s.metrics.Start(ctx, "run"), rb: &undo.Chain{Timeout: cleanupTimeout}}
	rb := r.rb
	id, err := objectid.New()
	if err != nil {
		return nil, err
	}
	ctx = log.With(ctx, "pod", id)
	if r.sb, err = s.newSandbox(ctx, id, name, kind, r, cfg); err != nil {
		return nil, err
	}
	rec := r.sb.Record()

	// Persisted before the host is touched, so a crash at any later step
	// leaves a record that a restart undoes.
	if err := s.save(rec); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil && rb.Failed() {
			// The record (state creating) names what is still held;
			// finish the undo in the background, and at the next start.
			s.finishUndo(id)
		}
	}()
	defer rb.OnError(ctx, &retErr, "delete sandbox record", func(ctx context.Context) error {
		return s.db.Delete(sandboxBucket, id)
	})
	if err := s.hit(ctx, "run.record"); err != nil {
		return nil, err
	}

	if err := os.MkdirAll(rec.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	defer rb.OnError(ctx, &retErr, "remove sandbox dir", func(context.Context) error {
		return removeRecordDirs(rec.Dir, rec.BundleDir())
	})
	if r.files, err = writeSandboxFiles(rec.Dir, pod, rec.NetworkMode == sandbox.ModeHost); err != nil {
		return nil, err
	}
	if rec.ShmPath != "" {
		defer rb.OnError(ctx, &retErr, "remove pod shm", func(context.Context) error {
			return podshm.Remove(rec.ShmPath)
		})
		if err := podshm.Mount(rec.ShmPath, s.current().Config().ShmSizeBytes()); err != nil {
			return nil, err
		}
		if err := s.hit(ctx, "run.shm"); err != nil {
			return nil, err
		}
	}
	r.timer.Phase("prepare")

	// Registered before the create, which may fail after making storage.
	defer rb.OnError(ctx, &retErr, "remove sandbox root filesystem", func(ctx context.Context) error {
		return ctl.RemoveRootfs(ctx, s.sandboxHost(), id)
	})
	// Where CNI ADD and the runtime's create overlap, the root filesystem
	// is made beside ADD too, on the create's side.
	r.overlap = overlapNetworkAndCreate(rec, ctl.Traits(), pod)
	if !r.overlap {
		if r.rootfs, err = s.makeSandboxRootfs(ctx, r, id); err != nil {
			return nil, err
		}
		phaseIf(r.timer.Phase, ctl.Phases().Rootfs)
	}
	if err := s.createPodSandbox(ctx, r); err != nil {
		return nil, err
	}
	return r.sb, nil
}

// sandboxRun is a RunPodSandbox at work: what its first steps made, which
// the later ones use.
type sandboxRun struct {
	sb  *sandbox.Sandbox
	ctl podsandbox.Controller
	pod *podrequest.Pod
	// plan is what the controller makes the sandbox of (its image, or its
	// pins).
	plan  podsandbox.Plan
	files sandboxFiles
	// rootfs is the root filesystem, made before the network unless
	// overlap: then it is made beside CNI ADD, on the create's side.
	rootfs  string
	overlap bool
	timer   *metrics.Timer
	rb      *undo.Chain
}

// newSandbox is the sandbox, state creating, that r.pod asks for, with
// its controller's plan (r.plan): the pause image for a sandbox with a
// process, the pins' paths for one without.
func (s *Server) newSandbox(ctx context.Context, id, name string, kind podsandbox.Kind, r *sandboxRun, cfg *runtimeapi.PodSandboxConfig) (*sandbox.Sandbox, error) {
	var err error
	r.plan, err = r.ctl.Plan(ctx, s.sandboxHost(), podsandbox.PlanRequest{
		ID: id, IPC: r.pod.Namespaces.IPC != podrequest.NamespaceNode, UTS: !r.pod.HostNetwork(),
	})
	if err != nil {
		return nil, err
	}
	phaseIf(r.timer.Phase, r.ctl.Phases().PauseImage)
	rec, err := s.newRecord(id, name, r.pod, cfg)
	if err != nil {
		return nil, err
	}
	rec.Kind = string(kind)
	// Known before anything is made, and persisted with the record, so
	// that recovery, GC and doctor find it after any crash.
	rec.Image = r.plan.Image
	rec.Pins.IPC, rec.Pins.UTS = r.plan.IPC, r.plan.UTS
	// A pod with its own IPC namespace on the node's kernel gets one
	// /dev/shm for all its containers (package podshm). Named before it
	// is mounted, like the pins.
	if r.pod.Namespaces.IPC != podrequest.NamespaceNode && r.ctl.Traits().PodShm {
		rec.ShmPath = podshm.Dir(s.shmRoot(), id)
	}
	return sandbox.New(rec), nil
}

// sandboxHost is what the sandbox controllers need of the daemon to make
// and remove a sandbox's process.
func (s *Server) sandboxHost() podsandbox.Host {
	return podsandbox.Host{PauseImage: s.pauseImage, Rootfs: s.images}
}

// makeSandboxRootfs has the controller make sandbox id's root filesystem
// (none for a kind without one), mapped to the pod's user namespace.
func (s *Server) makeSandboxRootfs(ctx context.Context, r *sandboxRun, id string) (string, error) {
	ropts := image.RootfsOptions{}
	ropts.UIDMap, ropts.GIDMap = rootfsIDMaps(r.pod.UserNS)
	return r.ctl.MakeRootfs(ctx, s.sandboxHost(), id, r.plan, ropts)
}

// createPodSandbox pins the pod's network namespace, sets up its network
// when it comes before the sandbox's start, and creates the sandbox;
// then startPodSandbox.
func (s *Server) createPodSandbox(ctx context.Context, r *sandboxRun) (retErr error) {
	rb, rec, id := r.rb, r.sb.Record(), r.sb.ID
	key := rec.NetworkSettings.SandboxKey
	if rec.NetworkMode == sandbox.ModeCNI {
		// Registered before Pin: a Pin that failed after creating the file
		// still leaves the file.
		defer rb.OnError(ctx, &retErr, "remove network namespace", func(context.Context) error {
			return s.netns.Remove(key)
		})
		if err := s.netns.Pin(key); err != nil {
			return fmt.Errorf("pin network namespace: %w", err)
		}
		if err := s.hit(ctx, "run.netns"); err != nil {
			return err
		}
		r.timer.Phase("netns")
	}

	att := attachment(rec, r.pod, key)
	if rec.NetworkMode == sandbox.ModeCNI && rec.NetworkOrder == config.OrderBefore {
		// Registered before ADD: an ADD that failed half way still needs DEL.
		defer rb.OnError(ctx, &retErr, "tear down pod network", func(ctx context.Context) error {
			return s.network.Teardown(ctx, att)
		})
		if !r.overlap {
			if err := s.setupNetwork(ctx, r.sb, att, r.timer); err != nil {
				return err
			}
		}
	}

	// Written with Create (either way below); removed after the runtime's
	// delete, which a shim needs to unmount what it mounted in it.
	defer rb.OnError(ctx, &retErr, "remove sandbox bundle", func(context.Context) error {
		return os.RemoveAll(rec.BundleDir())
	})
	// Registered before Create, which can fail after the runtime made state.
	defer rb.OnError(ctx, &retErr, "delete sandbox container", func(ctx context.Context) error {
		return r.ctl.Delete(ctx, id)
	})
	if r.overlap {
		makeRootfs := func(ctx context.Context) (string, error) { return s.makeSandboxRootfs(ctx, r, id) }
		if err := s.setupNetworkWhileCreating(ctx, r.sb, r.ctl, att, r.pod, r.files, makeRootfs, r.plan, r.timer); err != nil {
			return err
		}
	} else {
		if err := s.createSandboxContainer(ctx, r.sb, r.ctl, r.pod, r.files, r.plan, r.rootfs); err != nil {
			return err
		}
		phaseIf(r.timer.Phase, r.ctl.Phases().Create)
		if err := s.hit(ctx, "run.create"); err != nil {
			return err
		}
	}
	return s.startPodSandbox(ctx, r, att)
}

// startPodSandbox starts the sandbox, sets up the pod's network when it
// comes after the start, tells NRI plugins, and marks the pod ready.
func (s *Server) startPodSandbox(ctx context.Context, r *sandboxRun, att network.Attachment) (retErr error) {
	rb, sb := r.rb, r.sb
	if err := r.ctl.Start(ctx, sb.ID); err != nil {
		return fmt.Errorf("start sandbox container: %w", err)
	}
	phaseIf(r.timer.Phase, r.ctl.Phases().Start)
	if err := s.hit(ctx, "run.start"); err != nil {
		return err
	}

	if rec := sb.Record(); rec.NetworkMode == sandbox.ModeCNI && rec.NetworkOrder == config.OrderAfter {
		defer rb.OnError(ctx, &retErr, "tear down pod network", func(ctx context.Context) error {
			return s.network.Teardown(ctx, att)
		})
		if err := s.setupNetwork(ctx, sb, att, r.timer); err != nil {
			return err
		}
	}

	defer rb.OnError(ctx, &retErr, "tell NRI plugins the pod is gone", s.nriUndoPod(sb))
	if err := s.nriRunPodSandbox(ctx, sb); err != nil {
		return err
	}
	if err := s.hit(ctx, "run.ready"); err != nil {
		return err
	}
	rec, err := s.advance(sb, (*sandbox.Record).MarkReady)
	if err != nil {
		return err
	}
	r.timer.Phase("persist")
	s.watchExit(sb, r.ctl)
	log.G(ctx).Info("pod sandbox ready", "ip", rec.NetworkSettings.IPAddress, "order", rec.NetworkOrder, "mode", rec.NetworkMode)
	return nil
}

// setupNetwork runs CNI ADD into the sandbox key and persists the network
// settings, before and after ADD: before, so that a
// crash during ADD leaves a record saying DEL is owed.
func (s *Server) setupNetwork(ctx context.Context, sb *sandbox.Sandbox, att network.Attachment, timer *metrics.Timer) error {
	if _, err := s.advance(sb, (*sandbox.Record).BeginNetworkSetup); err != nil {
		return err
	}
	settings, err := s.network.Setup(ctx, att)
	if err != nil {
		return fmt.Errorf("set up pod network: %w", err)
	}
	timer.Phase("cni")
	rec := sb.Update(func(r *sandbox.Record) {
		settings.SandboxID = r.ID
		settings.SandboxKey = r.NetworkSettings.SandboxKey
		settings.Activation = true
		r.NetworkSettings = *settings
	})
	if err := s.save(rec); err != nil {
		return err
	}
	return s.hit(ctx, "run.cni")
}

// createSandboxContainer writes the bundle and has the controller create
// the sandbox.
func (s *Server) createSandboxContainer(ctx context.Context, sb *sandbox.Sandbox, ctl podsandbox.Controller, pod *podrequest.Pod, files sandboxFiles, plan podsandbox.Plan, rootfs string) error {
	bundle, err := s.writeSandboxBundle(ctl, sb.Record(), pod, files, plan, rootfs)
	if err != nil {
		return err
	}
	// Persisted before Create, so a crash during Create leaves a record
	// that tells recovery to delete runtime state.
	if _, err := s.advance(sb, (*sandbox.Record).BeginContainerCreate); err != nil {
		return err
	}
	pid, err := s.createPause(ctx, ctl, sb.ID, sb.Record().RuntimeHandler, bundle)
	if err != nil {
		return err
	}
	rec := sb.Update(func(r *sandbox.Record) { r.Pid = pid })
	return s.save(rec)
}

// writeSandboxBundle builds the sandbox's spec and writes its bundle; it
// returns the bundle's directory.
// The handler is held by the RunPodSandbox's lease meanwhile.
func (s *Server) writeSandboxBundle(ctl podsandbox.Controller, rec sandbox.Record, pod *podrequest.Pod, files sandboxFiles, plan podsandbox.Plan, rootfs string) (string, error) {
	spec, err := s.sandboxSpec(ctl, rec, pod, files, plan, rootfs)
	if err != nil {
		return "", err
	}
	if err := reachableFromUserNamespace(spec); err != nil {
		return "", err
	}
	bundle := rec.BundleDir()
	if err := writeBundle(bundle, spec, bundleOptions{SpecVersion: s.current().Capabilities(rec.RuntimeHandler).HandlerFeatures().SpecVersion}); err != nil {
		return "", err
	}
	return bundle, nil
}

// createPause has the pod's sandbox controller create the sandbox (the
// pause container) from bundle and returns its pid.
func (s *Server) createPause(ctx context.Context, ctl podsandbox.Controller, id, handler, bundle string) (int, error) {
	pid, err := ctl.Create(ctx, runtime.CreateOptions{ID: id, BundleDir: bundle, MonitorCgroup: s.monitorCgroup(),
		SpawnMonitor: s.spawnMonitor(ctx), PlaceMonitor: s.placeMonitor(handler, id)})
	if err != nil {
		// A sysctl the kernel refused comes classified by the runtime
		// (runtime.SysctlError: InvalidArgument), which runtimeFailure
		// leaves as it is.
		return 0, fmt.Errorf("create sandbox container: %w", s.runtimeFailure(err))
	}
	return pid, nil
}

// newRecord builds the record of a new sandbox from its request; cfg, the
// request as the kubelet sent it, is kept for what shows it.
func (s *Server) newRecord(id, name string, pod *podrequest.Pod, cfg *runtimeapi.PodSandboxConfig) (sandbox.Record, error) {
	md := pod.Metadata
	rec := sandbox.Record{
		ID:             id,
		Name:           name,
		Metadata:       sandbox.Metadata{Name: md.Name, Namespace: md.Namespace, UID: md.UID, Attempt: md.Attempt},
		Phase:          sandbox.PhaseCreating,
		CreatedAt:      time.Now(),
		RuntimeHandler: pod.RuntimeHandler,
		NetworkMode:    sandbox.ModeCNI,
		NetworkOrder:   pod.NetworkOrder,
		Namespaces: sandbox.Namespaces{
			Network: sandbox.NamespaceMode(pod.Namespaces.Network),
			PID:     sandbox.NamespaceMode(pod.Namespaces.PID),
			IPC:     sandbox.NamespaceMode(pod.Namespaces.IPC),
		},
		Labels:       pod.Labels,
		Annotations:  pod.Annotations,
		Dir:          filepath.Join(s.cfg.Root, "sandboxes", id),
		Bundle:       s.bundleDir(id),
		CgroupParent: pod.CgroupParent,
		Request:      pod,
	}
	if rec.CgroupParent == "" {
		rec.CgroupParent = s.cfg.DefaultCgroupParent
	}
	if pod.HostNetwork() {
		rec.NetworkMode = sandbox.ModeHost
	} else {
		rec.NetworkSettings.SandboxKey = netns.Path(s.cfg.NetNSDir, id)
	}
	rec.NetworkSettings.SandboxID = id
	for _, pm := range pod.PortMappings {
		rec.NetworkSettings.CNIPorts = append(rec.NetworkSettings.CNIPorts, network.CNIPortMapping(pm))
	}
	raw, err := protojson.Marshal(cfg)
	if err != nil {
		return rec, fmt.Errorf("encode sandbox config: %w", err)
	}
	rec.Config = raw
	return rec, nil
}

// attachment describes the pod to CNI.
func attachment(rec sandbox.Record, pod *podrequest.Pod, netnsPath string) network.Attachment {
	return network.Attachment{
		ID:           rec.ID,
		NetNS:        netnsPath,
		PodName:      rec.Metadata.Name,
		PodNamespace: rec.Metadata.Namespace,
		PodUID:       rec.Metadata.UID,
		PortMappings: pod.PortMappings,
		Bandwidth:    pod.Bandwidth,
		DNS:          pod.DNS,
	}
}

// sandboxName is the kubelet-compatible unique name of a pod attempt.
func sandboxName(md podrequest.Metadata) string {
	return fmt.Sprintf("k8s_POD_%s_%s_%s_%d", md.Name, md.Namespace, md.UID, md.Attempt)
}
