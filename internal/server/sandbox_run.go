package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/metrics"
	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/podsandbox"
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
	if err := validateSandboxConfig(cfg); err != nil {
		return nil, err
	}
	if err := s.checkCgroupParent(cfg.GetLinux().GetCgroupParent()); err != nil {
		return nil, err
	}
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
	ctl := podsandbox.ForHandler(lease.Config.Type, rt)
	if err := checkNetworkOrder(ctx, handler, lease.Config, s.networkOrder(handler, cfg.GetAnnotations()), cfg); err != nil {
		return nil, err
	}
	userNS, _ := podUserNamespace(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()) // validated above
	if err := checkUserNamespaceSupport(handler, lease.Capabilities.HandlerFeatures(), userNS); err != nil {
		return nil, err
	}
	if ctl.Traits().HostKernel {
		// The node's kernel is the pod's: a sysctl it lacks, runc cannot
		// set. A VM's guest kernel may have sysctls the node lacks.
		if err := specgen.CheckSysctlsExist(cfg.GetLinux().GetSysctls()); err != nil {
			return nil, err
		}
	}
	name := sandboxName(cfg.GetMetadata())
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
			sb, err := s.runPodSandbox(work, name, handler, rt, ctl, cfg)
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
func (s *Server) runPodSandbox(ctx context.Context, name, handler string, rt runtime.Runtime, ctl podsandbox.Controller, cfg *runtimeapi.PodSandboxConfig) (_ *sandbox.Sandbox, retErr error) {
	timer := s.metrics.Start(ctx, "run")
	rb := undo.Chain{Timeout: cleanupTimeout}
	id, err := objectid.New()
	if err != nil {
		return nil, err
	}
	ctx = log.With(ctx, "pod", id)

	pause, err := s.pauseImage(ctx)
	if err != nil {
		return nil, err
	}
	timer.Phase("pause_image")

	rec, err := s.newRecord(id, name, handler, cfg)
	if err != nil {
		return nil, err
	}
	rec.Image = pause.ID
	sb := sandbox.New(rec)

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
		return os.RemoveAll(rec.Dir)
	})
	files, err := writeSandboxFiles(rec.Dir, cfg, rec.NetworkMode == sandbox.ModeHost)
	if err != nil {
		return nil, err
	}
	timer.Phase("prepare")

	// Registered before the create, which may fail after making storage.
	defer rb.OnError(ctx, &retErr, "remove sandbox root filesystem", func(ctx context.Context) error {
		return s.images.RemoveRootfs(ctx, id)
	})
	ropts := image.RootfsOptions{}
	if u, err := podUserNamespace(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()); err == nil {
		ropts.UIDMap, ropts.GIDMap = rootfsIDMaps(u) // validated by RunPodSandbox
	}
	makeRootfs := func(ctx context.Context) (string, error) {
		rootfs, err := s.images.CreateRootfs(ctx, id, pause.ID, ropts)
		if err != nil {
			return "", fmt.Errorf("create sandbox root filesystem: %w", err)
		}
		return rootfs, nil
	}
	// Where CNI ADD and the runtime's create overlap, the root filesystem
	// is made beside ADD too, on the create's side.
	overlap := overlapNetworkAndCreate(rec, ctl.Traits(), cfg)
	var rootfs string
	if !overlap {
		if rootfs, err = makeRootfs(ctx); err != nil {
			return nil, err
		}
		timer.Phase("rootfs")
	}

	key := rec.NetworkSettings.SandboxKey
	if rec.NetworkMode == sandbox.ModeCNI {
		// Registered before Pin: a Pin that failed after creating the file
		// still leaves the file.
		defer rb.OnError(ctx, &retErr, "remove network namespace", func(context.Context) error {
			return s.netns.Remove(key)
		})
		if err := s.netns.Pin(key); err != nil {
			return nil, fmt.Errorf("pin network namespace: %w", err)
		}
		if err := s.hit(ctx, "run.netns"); err != nil {
			return nil, err
		}
		timer.Phase("netns")
	}

	att := attachment(rec, cfg, key)
	if rec.NetworkMode == sandbox.ModeCNI && rec.NetworkOrder == config.OrderBefore {
		// Registered before ADD: an ADD that failed half way still needs DEL.
		defer rb.OnError(ctx, &retErr, "tear down pod network", func(ctx context.Context) error {
			return s.network.Teardown(ctx, att)
		})
		if !overlap {
			if err := s.setupNetwork(ctx, sb, att, timer); err != nil {
				return nil, err
			}
		}
	}

	// Registered before Create, which can fail after the runtime made state.
	defer rb.OnError(ctx, &retErr, "delete sandbox container", func(ctx context.Context) error {
		return ctl.Delete(ctx, id)
	})
	if overlap {
		if err := s.setupNetworkWhileCreating(ctx, sb, rt, ctl, att, cfg, files, makeRootfs, pauseArgs(pause), timer); err != nil {
			return nil, err
		}
	} else {
		if err := s.createSandboxContainer(ctx, sb, rt, ctl, cfg, files, rootfs, pauseArgs(pause)); err != nil {
			return nil, err
		}
		timer.Phase("runtime_create")
		if err := s.hit(ctx, "run.create"); err != nil {
			return nil, err
		}
	}

	if err := ctl.Start(ctx, id); err != nil {
		return nil, fmt.Errorf("start sandbox container: %w", err)
	}
	timer.Phase("runtime_start")
	if err := s.hit(ctx, "run.start"); err != nil {
		return nil, err
	}

	if rec.NetworkMode == sandbox.ModeCNI && rec.NetworkOrder == config.OrderAfter {
		defer rb.OnError(ctx, &retErr, "tear down pod network", func(ctx context.Context) error {
			return s.network.Teardown(ctx, att)
		})
		if err := s.setupNetwork(ctx, sb, att, timer); err != nil {
			return nil, err
		}
	}

	defer rb.OnError(ctx, &retErr, "tell NRI plugins the pod is gone", s.nriUndoPod(sb))
	if err := s.nriRunPodSandbox(ctx, sb); err != nil {
		return nil, err
	}
	if err := s.hit(ctx, "run.ready"); err != nil {
		return nil, err
	}
	rec, err = s.advance(sb, (*sandbox.Record).MarkReady)
	if err != nil {
		return nil, err
	}
	timer.Phase("persist")
	s.watchExit(sb, ctl)
	log.G(ctx).Info("pod sandbox ready", "ip", rec.NetworkSettings.IPAddress, "order", rec.NetworkOrder, "mode", rec.NetworkMode)
	return sb, nil
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

// createSandboxContainer writes the bundle and has the runtime create the
// pause container.
func (s *Server) createSandboxContainer(ctx context.Context, sb *sandbox.Sandbox, rt runtime.Runtime, ctl podsandbox.Controller, cfg *runtimeapi.PodSandboxConfig, files sandboxFiles, rootfs string, args []string) error {
	bundle, err := s.writeSandboxBundle(sb.Record(), cfg, files, rootfs, args)
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

// writeSandboxBundle builds the pause container's spec and writes its
// bundle; it returns the bundle's directory.
// The handler is held by the RunPodSandbox's lease meanwhile.
func (s *Server) writeSandboxBundle(rec sandbox.Record, cfg *runtimeapi.PodSandboxConfig, files sandboxFiles, rootfs string, args []string) (string, error) {
	spec, err := s.sandboxSpec(rec, cfg, files, rootfs, args)
	if err != nil {
		return "", err
	}
	if err := reachableFromUserNamespace(spec); err != nil {
		return "", err
	}
	bundle := filepath.Join(rec.Dir, "bundle")
	if err := writeBundle(bundle, spec, s.current().Capabilities(rec.RuntimeHandler).HandlerFeatures().SpecVersion); err != nil {
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

// newRecord builds the record of a new sandbox from its config.
func (s *Server) newRecord(id, name, handler string, cfg *runtimeapi.PodSandboxConfig) (sandbox.Record, error) {
	md := cfg.GetMetadata()
	nsOpts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	rec := sandbox.Record{
		ID:             id,
		Name:           name,
		Metadata:       sandbox.Metadata{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt()},
		Phase:          sandbox.PhaseCreating,
		CreatedAt:      time.Now(),
		RuntimeHandler: handler,
		NetworkMode:    sandbox.ModeCNI,
		NetworkOrder:   s.networkOrder(handler, cfg.GetAnnotations()),
		Namespaces: sandbox.Namespaces{
			Network: sandbox.NamespaceMode(nsOpts.GetNetwork().String()),
			PID:     sandbox.NamespaceMode(nsOpts.GetPid().String()),
			IPC:     sandbox.NamespaceMode(nsOpts.GetIpc().String()),
		},
		Labels:       cfg.GetLabels(),
		Annotations:  cfg.GetAnnotations(),
		Dir:          filepath.Join(s.cfg.Root, "sandboxes", id),
		CgroupParent: cfg.GetLinux().GetCgroupParent(),
	}
	if rec.CgroupParent == "" {
		rec.CgroupParent = s.cfg.DefaultCgroupParent
	}
	if nsOpts.GetNetwork() == runtimeapi.NamespaceMode_NODE {
		rec.NetworkMode = sandbox.ModeHost
	} else {
		rec.NetworkSettings.SandboxKey = netns.Path(s.cfg.NetNSDir, id)
	}
	rec.NetworkSettings.SandboxID = id
	for _, pm := range portMappings(cfg) {
		rec.NetworkSettings.CNIPorts = append(rec.NetworkSettings.CNIPorts, network.CNIPortMapping(pm))
	}
	raw, err := protojson.Marshal(cfg)
	if err != nil {
		return rec, fmt.Errorf("encode sandbox config: %w", err)
	}
	rec.Config = raw
	return rec, nil
}

// networkOrder picks the pod's network order: iSulad's annotation, then
// podbay's, then the handler's default.
func (s *Server) networkOrder(handler string, podAnnotations map[string]string) string {
	if strings.EqualFold(podAnnotations[annotations.NetworkSetupV2], "true") {
		return config.OrderBefore
	}
	switch v := podAnnotations[annotations.NetworkOrder]; v {
	case config.OrderBefore, config.OrderAfter:
		return v
	}
	if o := s.current().Config().Runtimes[handler].NetworkOrder; o != "" {
		return o
	}
	return config.OrderBefore
}

// attachment describes the pod to CNI.
func attachment(rec sandbox.Record, cfg *runtimeapi.PodSandboxConfig, netnsPath string) network.Attachment {
	// validateSandboxConfig refused a bad annotation before anything was made.
	bw, _ := podBandwidth(cfg.GetAnnotations())
	return network.Attachment{
		ID:           rec.ID,
		NetNS:        netnsPath,
		PodName:      rec.Metadata.Name,
		PodNamespace: rec.Metadata.Namespace,
		PodUID:       rec.Metadata.UID,
		PortMappings: portMappings(cfg),
		Bandwidth:    bw,
		DNS:          podDNS(cfg),
	}
}

func portMappings(cfg *runtimeapi.PodSandboxConfig) []network.PortMapping {
	var out []network.PortMapping
	for _, pm := range cfg.GetPortMappings() {
		// Like containerd: a mapping without a host port publishes nothing.
		if pm.GetHostPort() <= 0 {
			continue
		}
		out = append(out, network.PortMapping{
			HostPort:      pm.GetHostPort(),
			ContainerPort: pm.GetContainerPort(),
			Protocol:      strings.ToLower(pm.GetProtocol().String()),
			HostIP:        pm.GetHostIp(),
		})
	}
	return out
}

// sandboxName is the kubelet-compatible unique name of a pod attempt.
func sandboxName(md *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("k8s_POD_%s_%s_%s_%d", md.GetName(), md.GetNamespace(), md.GetUid(), md.GetAttempt())
}

func validateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return fmt.Errorf("sandbox config is required: %w", errdefs.ErrInvalidArgument)
	}
	md := cfg.GetMetadata()
	if md == nil {
		return fmt.Errorf("sandbox config metadata is required: %w", errdefs.ErrInvalidArgument)
	}
	for _, f := range []struct{ field, val string }{
		{"name", md.GetName()}, {"namespace", md.GetNamespace()}, {"uid", md.GetUid()},
	} {
		if f.val == "" {
			return fmt.Errorf("sandbox metadata %s is required: %w", f.field, errdefs.ErrInvalidArgument)
		}
		if len(f.val) > 253 || strings.ContainsAny(f.val, "/\x00") {
			return fmt.Errorf("sandbox metadata %s %q is not a valid name: %w", f.field, f.val, errdefs.ErrInvalidArgument)
		}
	}
	if err := checkLogDirectory(cfg.GetLogDirectory()); err != nil {
		return err
	}
	nsOpts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	// What the runtime would refuse at create, after the pod's network
	// and storage are made.
	desc := specgen.Sandbox{
		Hostname:    cfg.GetHostname(),
		HostNetwork: nsOpts.GetNetwork() == runtimeapi.NamespaceMode_NODE,
		HostIPC:     nsOpts.GetIpc() == runtimeapi.NamespaceMode_NODE,
		Sysctls:     cfg.GetLinux().GetSysctls(),

		SupplementalGroups: cfg.GetLinux().GetSecurityContext().GetSupplementalGroups(),
	}
	setPodResources(&desc, cfg.GetLinux().GetResources())
	var err error
	if desc.UserNS, err = podUserNamespace(nsOpts.GetUsernsOptions()); err != nil {
		return err
	}
	if err := specgen.CheckSandbox(desc); err != nil {
		return err
	}
	if nsOpts.GetNetwork() == runtimeapi.NamespaceMode_TARGET || nsOpts.GetNetwork() == runtimeapi.NamespaceMode_CONTAINER {
		return fmt.Errorf("network namespace mode %s is not valid for a pod: %w", nsOpts.GetNetwork(), errdefs.ErrInvalidArgument)
	}
	if nsOpts.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		// Like containerd, only for pods CNI runs for: a host-network pod
		// is not shaped.
		if _, err := podBandwidth(cfg.GetAnnotations()); err != nil {
			return err
		}
	}
	for _, pm := range cfg.GetPortMappings() {
		if pm.GetContainerPort() <= 0 || pm.GetContainerPort() > 65535 || pm.GetHostPort() < 0 || pm.GetHostPort() > 65535 {
			return fmt.Errorf("port mapping %d:%d is out of range: %w", pm.GetHostPort(), pm.GetContainerPort(), errdefs.ErrInvalidArgument)
		}
		// Refused here, before anything is made: CNI refuses it too, in
		// ADD and again in the DEL that undoes it, which left the pod
		// unremovable.
		if _, ok := runtimeapi.Protocol_name[int32(pm.GetProtocol())]; !ok {
			return fmt.Errorf("port mapping %d:%d has unknown protocol %d: %w", pm.GetHostPort(), pm.GetContainerPort(), pm.GetProtocol(), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// checkLogDirectory refuses a log directory the kubelet never sends: one
// with a NUL, a relative one (the daemon would make the containers' logs
// relative to its own working directory) or one with a ".." component
// (the kubelet's is /var/log/pods/<namespace>_<name>_<uid>, built from
// names that cannot hold a "/"). Empty is allowed: no logs.
func checkLogDirectory(dir string) error {
	if dir == "" {
		return nil
	}
	if strings.ContainsRune(dir, 0) {
		return fmt.Errorf("log directory %q contains a NUL byte: %w", dir, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("log directory %q is not an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	if slices.Contains(strings.Split(dir, "/"), "..") {
		return fmt.Errorf("log directory %q has a \"..\" component: %w", dir, errdefs.ErrInvalidArgument)
	}
	return nil
}
