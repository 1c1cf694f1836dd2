package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
)

// containerSpec translates a CRI container config, in its pod, into
// specgen's description, and builds the OCI spec.
func (s *Server) containerSpec(ctx context.Context, rec container.Record, sbRec sandbox.Record, pod *podrequest.Pod, creq *podrequest.Container, cfg *runtimeapi.ContainerConfig, img *image.Image, rootfs string) (*specs.Spec, error) {
	lc := cfg.GetLinux()
	sc := lc.GetSecurityContext()

	user, err := specgen.ResolveUser(rootfs, specgen.UserRequest{
		ImageUser:          img.Config.User,
		RunAsUsername:      sc.GetRunAsUsername(),
		RunAsUser:          int64Ptr(sc.GetRunAsUser()),
		RunAsGroup:         int64Ptr(sc.GetRunAsGroup()),
		SupplementalGroups: sc.GetSupplementalGroups(),
		StrictSupplementalGroups: sc.GetSupplementalGroupsPolicy() ==
			runtimeapi.SupplementalGroupsPolicy_Strict,
	})
	if err != nil {
		return nil, fmt.Errorf("resolve user: %w", err)
	}

	pns := podNamespaces(sbRec)
	c := specgen.Container{
		ID:   rec.ID,
		Name: rec.MetaName,
		Sandbox: specgen.SandboxRef{
			ID: sbRec.ID, Name: sbRec.Metadata.Name, Namespace: sbRec.Metadata.Namespace, UID: sbRec.Metadata.UID,
			NetNSPath:    pns.Net,
			HostNetwork:  sbRec.NetworkMode == sandbox.ModeHost,
			PID:          pns.Pid,
			IPCPath:      pns.IPC,
			UTSPath:      pns.UTS,
			ShmPath:      sbRec.ShmPath,
			CgroupParent: sbRec.CgroupParent,
			CgroupsPath:  s.cgroupSpecPath(sbRec.CgroupParent, rec.ID),
			Privileged:   pod.Security.Privileged,
		},
		Image: specgen.ImageRef{
			Name: rec.ImageRef, Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd,
			Env: img.Config.Env, WorkingDir: img.Config.WorkingDir,
		},
		RootfsPath: rootfs,
		Command:    cfg.GetCommand(),
		Args:       cfg.GetArgs(),
		WorkingDir: cfg.GetWorkingDir(),
		User:       user,
		Tty:        cfg.GetTty(),
		Hostname:   pod.Hostname,
		Files: []specgen.File{
			{Source: filepath.Join(sbRec.Dir, "resolv.conf"), Dest: "/etc/resolv.conf"},
			{Source: filepath.Join(sbRec.Dir, "hostname"), Dest: "/etc/hostname"},
			{Source: filepath.Join(sbRec.Dir, "hosts"), Dest: "/etc/hosts"},
		},
		// The pod's and the container's annotations the handler lets through.
		Annotations: s.containerAnnotations(sbRec.RuntimeHandler, pod.Annotations, creq.Annotations),
	}
	c.Sandbox.UserNS = creq.UserNS
	if c.Sandbox.HostNetwork {
		if h, err := os.Hostname(); err == nil {
			c.Hostname = h
		}
	}
	c.Env = criEnv(cfg.GetEnvs())
	for i, m := range cfg.GetMounts() {
		if isImageVolume(m) && i < len(rec.Mounts) {
			im, err := imageVolumeMount(rec.Mounts[i], m.GetPropagation())
			if err != nil {
				return nil, err
			}
			c.Mounts = append(c.Mounts, im)
			continue
		}
		if !filepath.IsAbs(m.GetHostPath()) || !filepath.IsAbs(m.GetContainerPath()) {
			return nil, errInvalid(fmt.Sprintf("mount %s:%s: paths must be absolute", m.GetHostPath(), m.GetContainerPath()))
		}
		src, err := filepath.EvalSymlinks(m.GetHostPath())
		if err != nil {
			return nil, fmt.Errorf("mount source %s: %v: %w", m.GetHostPath(), err, errdefs.ErrInvalidArgument)
		}
		switch filepath.Clean(m.GetContainerPath()) {
		case "/proc":
			// runc mounts over /proc only a procfs.
			if !isProcFS(src) {
				return nil, errInvalid(fmt.Sprintf("mount %s:/proc: the source is not a procfs", m.GetHostPath()))
			}
		case "/dev":
			// It replaces the container's /dev, where runc needs a null
			// device before it starts the process (found by TestCRIFuzz).
			if !fileExists(filepath.Join(src, "null")) {
				return nil, errInvalid(fmt.Sprintf("mount %s:/dev: the source has no null device", m.GetHostPath()))
			}
		}
		if err := checkRecursiveReadOnly(s.current(), sbRec.RuntimeHandler, m); err != nil {
			return nil, err
		}
		c.Mounts = append(c.Mounts, specgen.Mount{
			ContainerPath: m.GetContainerPath(), HostPath: src, Readonly: m.GetReadonly(),
			RecursiveReadOnly: m.GetRecursiveReadOnly(), Propagation: propagation(m.GetPropagation()),
			Options: m.GetMountOptions(),
		})
	}
	for _, d := range cfg.GetDevices() {
		devs, err := specgen.DeviceFromHost(d.GetHostPath(), d.GetContainerPath(), d.GetPermissions())
		if err != nil {
			return nil, fmt.Errorf("device %s: %v: %w", d.GetHostPath(), err, errdefs.ErrInvalidArgument)
		}
		c.Devices = append(c.Devices, devs...)
	}
	if r := lc.GetResources(); r != nil {
		c.Resources = podrequest.Resources(r)
	}
	c.Security = specgen.Security{
		Privileged:     sc.GetPrivileged(),
		CapAdd:         sc.GetCapabilities().GetAddCapabilities(),
		CapDrop:        sc.GetCapabilities().GetDropCapabilities(),
		ReadonlyRootfs: sc.GetReadonlyRootfs(),
		NoNewPrivs:     sc.GetNoNewPrivs(),
		Sysctls:        pod.Sysctls,
		Namespaces: specgen.NamespaceOptions{
			Pid: specgen.NamespaceMode(sc.GetNamespaceOptions().GetPid()),
			Ipc: specgen.NamespaceMode(sc.GetNamespaceOptions().GetIpc()),
		},
	}
	switch {
	case len(sc.GetMaskedPaths()) > 0 || len(sc.GetReadonlyPaths()) > 0:
		// The caller's lists replace the defaults (the kubelet sends the
		// default ones for procMount Default).
		c.Security.MaskedPaths = append([]string{}, sc.GetMaskedPaths()...)
		c.Security.ReadonlyPaths = append([]string{}, sc.GetReadonlyPaths()...)
	case creq.UserNS != nil:
		// procMount Unmasked: the kubelet sends empty lists, which proto3
		// carries as none, and allows it only with hostUsers: false. A
		// container of the host's user namespace without lists keeps
		// the defaults, masked.
		c.Security.MaskedPaths, c.Security.ReadonlyPaths = []string{}, []string{}
	}
	if c.Security.Namespaces.Pid == specgen.NamespaceTarget {
		target, err := s.containers.Get(sc.GetNamespaceOptions().GetTargetId())
		if err != nil {
			return nil, fmt.Errorf("target container of the PID namespace: %w", err)
		}
		tr := target.Record()
		if tr.State != container.StateRunning || tr.SandboxID != sbRec.ID {
			return nil, fmt.Errorf("target container %s must be running in the same pod: %w", target.ID, errdefs.ErrFailedPrecondition)
		}
		c.Security.Namespaces.TargetPID = tr.Pid
	}
	if c.Security.Seccomp, err = seccompProfile(sc.GetSeccomp()); err != nil {
		return nil, err
	}
	if c.Security.AppArmor, err = appArmorProfile(sc); err != nil {
		return nil, err
	}
	if sc.GetPrivileged() {
		if c.Devices, err = s.privilegedDevices(c.Devices); err != nil {
			return nil, err
		}
	}
	spec, err := specgen.ContainerSpec(c, s.host)
	if err != nil {
		return nil, err
	}
	if err := s.injectHooksAndDevices(ctx, spec, pod.Annotations, cfg); err != nil {
		return nil, err
	}
	if err := specgen.CheckExecutable(rootfs, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

func (s *Server) privilegedDevices(requested []specgen.Device) ([]specgen.Device, error) {
	host, err := specgen.HostDevices()
	if err != nil {
		return nil, fmt.Errorf("list host devices: %w", err)
	}
	return append(requested, host...), nil
}

// criEnv translates a CRI container's environment.
func criEnv(kvs []*runtimeapi.KeyValue) []specgen.KeyValue {
	var env []specgen.KeyValue
	for _, kv := range kvs {
		env = append(env, specgen.KeyValue{Key: kv.GetKey(), Value: string(kv.GetValue())})
	}
	return env
}

// isProcFS reports whether path is on a procfs.
func isProcFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
}

// seccompProfile maps the CRI profile. No profile is Unconfined, as
// Kubernetes means it: RuntimeDefault is the enum's zero value, so the
// nil check must come first.
func seccompProfile(p *runtimeapi.SecurityProfile) (specgen.SeccompProfile, error) {
	if p == nil {
		return specgen.SeccompProfile{Type: specgen.ProfileUnconfined}, nil
	}
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault:
		return specgen.SeccompProfile{Type: specgen.ProfileRuntimeDefault}, nil
	case runtimeapi.SecurityProfile_Localhost:
		path := p.GetLocalhostRef()
		if !filepath.IsAbs(path) {
			return specgen.SeccompProfile{}, errInvalid(fmt.Sprintf("seccomp profile %q must be an absolute path", path))
		}
		b, err := readSeccompProfile(path)
		if err != nil {
			return specgen.SeccompProfile{}, fmt.Errorf("read seccomp profile: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		return specgen.SeccompProfile{Type: specgen.ProfileLocalhost, Localhost: b}, nil
	}
	return specgen.SeccompProfile{Type: specgen.ProfileUnconfined}, nil
}

// maxSeccompProfile bounds a Localhost seccomp profile; Docker's default
// profile is about 20 KiB.
const maxSeccompProfile = 1 << 20

// readSeccompProfile reads the profile at path, which the client names: it
// must be a regular file of at most maxSeccompProfile bytes, so that a FIFO,
// a device such as /dev/zero or a huge file cannot stall the daemon or use
// up its memory.
func readSeccompProfile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > maxSeccompProfile {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, st.Size(), maxSeccompProfile)
	}
	return io.ReadAll(io.LimitReader(f, maxSeccompProfile+1))
}

// appArmorProfile is the container's AppArmor profile: the apparmor
// field, else the deprecated apparmor_profile ("runtime/default",
// "unconfined", "localhost/<name>"), else, as containerd and CRI-O do, the
// runtime default (kubernetes#51746): a pod that names none is confined
// where the host has AppArmor.
func appArmorProfile(sc *runtimeapi.LinuxContainerSecurityContext) (specgen.AppArmorProfile, error) {
	p := sc.GetApparmor()
	if p == nil {
		//lint:ignore SA1019 the deprecated field is what older kubelets send
		switch name := sc.GetApparmorProfile(); {
		case name == "" || name == "runtime/default":
			return specgen.AppArmorProfile{Type: specgen.ProfileRuntimeDefault}, nil
		case name == "unconfined":
			return specgen.AppArmorProfile{Type: specgen.ProfileUnconfined}, nil
		case strings.HasPrefix(name, "localhost/"):
			return specgen.AppArmorProfile{Type: specgen.ProfileLocalhost, Localhost: strings.TrimPrefix(name, "localhost/")}, nil
		default:
			return specgen.AppArmorProfile{}, fmt.Errorf("apparmor_profile %q: want runtime/default, unconfined or localhost/<name>: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault:
		return specgen.AppArmorProfile{Type: specgen.ProfileRuntimeDefault}, nil
	case runtimeapi.SecurityProfile_Localhost:
		return specgen.AppArmorProfile{Type: specgen.ProfileLocalhost, Localhost: strings.TrimPrefix(p.GetLocalhostRef(), "localhost/")}, nil
	}
	return specgen.AppArmorProfile{Type: specgen.ProfileUnconfined}, nil
}

func propagation(p runtimeapi.MountPropagation) specgen.Propagation {
	switch p {
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		return specgen.PropagationHostToContainer
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		return specgen.PropagationBidirectional
	}
	return specgen.PropagationPrivate
}

func int64Ptr(v *runtimeapi.Int64Value) *int64 {
	if v == nil {
		return nil
	}
	x := v.GetValue()
	return &x
}
