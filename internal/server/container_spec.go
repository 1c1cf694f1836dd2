package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/specgen"
)

// containerSpec builds the OCI spec of creq in its pod: the request's
// description (podrequest.Container.Spec) with what the daemon made
// (rec's ID, the pod's namespaces, files and cgroup, the root filesystem)
// and what only the host can tell (the user in the image, mount sources,
// devices, the seccomp profile's file, the PID namespace's target).
func (s *Server) containerSpec(ctx context.Context, rec container.Record, sbRec sandbox.Record, pod *podrequest.Pod, creq *podrequest.Container, img *image.Image, rootfs string) (*specs.Spec, error) {
	user, err := specgen.ResolveUser(rootfs, creq.User(img.Config.User))
	if err != nil {
		return nil, fmt.Errorf("resolve user: %w", err)
	}
	c := creq.Spec(pod)
	c.ID = rec.ID
	c.Name = rec.MetaName
	pns := podNamespaces(sbRec)
	c.Sandbox = specgen.SandboxRef{
		ID: sbRec.ID, Name: sbRec.Metadata.Name, Namespace: sbRec.Metadata.Namespace, UID: sbRec.Metadata.UID,
		NetNSPath:    pns.Net,
		HostNetwork:  sbRec.NetworkMode == sandbox.ModeHost,
		PID:          pns.Pid,
		IPCPath:      pns.IPC,
		UTSPath:      pns.UTS,
		ShmPath:      sbRec.ShmPath,
		CgroupParent: sbRec.CgroupParent,
		CgroupsPath:  s.cgroupSpecPath(sbRec.CgroupParent, rec.ID),
		Privileged:   c.Sandbox.Privileged,
		UserNS:       c.Sandbox.UserNS,
	}
	c.Image = specgen.ImageRef{
		Name: rec.ImageRef, Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd,
		Env: img.Config.Env, WorkingDir: img.Config.WorkingDir,
	}
	c.RootfsPath = rootfs
	c.User = user
	c.Files = []specgen.File{
		{Source: filepath.Join(sbRec.Dir, "resolv.conf"), Dest: "/etc/resolv.conf"},
		{Source: filepath.Join(sbRec.Dir, "hostname"), Dest: "/etc/hostname"},
		{Source: filepath.Join(sbRec.Dir, "hosts"), Dest: "/etc/hosts"},
	}
	// The pod's and the container's annotations the handler lets through.
	c.Annotations = s.containerAnnotations(sbRec.RuntimeHandler, pod.Annotations, creq.Annotations)
	if c.Sandbox.HostNetwork {
		if h, err := os.Hostname(); err == nil {
			c.Hostname = h
		}
	}
	if err := s.hostParts(&c, rec, sbRec, creq); err != nil {
		return nil, err
	}
	spec, err := specgen.ContainerSpec(c, s.host)
	if err != nil {
		return nil, err
	}
	if err := s.injectHooksAndDevices(ctx, spec, pod.Annotations, creq); err != nil {
		return nil, err
	}
	if err := specgen.CheckExecutable(rootfs, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// hostParts adds to c what of creq only the host can tell: the mounts'
// sources, the devices (the host's too for a privileged container), the
// seccomp profile's content and the process whose PID namespace c
// joins.
func (s *Server) hostParts(c *specgen.Container, rec container.Record, sbRec sandbox.Record, creq *podrequest.Container) error {
	var err error
	if c.Mounts, err = s.specMounts(rec, sbRec.RuntimeHandler, creq.Mounts); err != nil {
		return err
	}
	for _, d := range creq.Devices {
		devs, err := specgen.DeviceFromHost(d.HostPath, d.ContainerPath, d.Permissions)
		if err != nil {
			return fmt.Errorf("device %s: %v: %w", d.HostPath, err, errdefs.ErrInvalidArgument)
		}
		c.Devices = append(c.Devices, devs...)
	}
	if c.Security.Namespaces.Pid == specgen.NamespaceTarget {
		if c.Security.Namespaces.TargetPID, err = s.targetPID(creq.Security.TargetID, sbRec.ID); err != nil {
			return err
		}
	}
	if c.Security.Seccomp, err = seccompProfile(creq.Security.Seccomp); err != nil {
		return err
	}
	if creq.Security.Privileged {
		if c.Devices, err = s.privilegedDevices(c.Devices); err != nil {
			return err
		}
	}
	return nil
}

// specMounts are the spec's mounts of ms: image volumes from the record
// (mounted by mountImageVolumes), host paths resolved and checked on the
// host.
func (s *Server) specMounts(rec container.Record, handler string, ms []podrequest.Mount) ([]specgen.Mount, error) {
	var out []specgen.Mount
	for i, m := range ms {
		if m.IsImageVolume() && i < len(rec.Mounts) {
			im, err := imageVolumeMount(rec.Mounts[i], m.SpecPropagation())
			if err != nil {
				return nil, err
			}
			out = append(out, im)
			continue
		}
		src, err := filepath.EvalSymlinks(m.HostPath)
		if err != nil {
			return nil, fmt.Errorf("mount source %s: %v: %w", m.HostPath, err, errdefs.ErrInvalidArgument)
		}
		switch filepath.Clean(m.ContainerPath) {
		case "/proc":
			// runc mounts over /proc only a procfs.
			if !isProcFS(src) {
				return nil, errInvalid(fmt.Sprintf("mount %s:/proc: the source is not a procfs", m.HostPath))
			}
		case "/dev":
			// It replaces the container's /dev, where runc needs a null
			// device before it starts the process (found by TestCRIFuzz).
			if !fileExists(filepath.Join(src, "null")) {
				return nil, errInvalid(fmt.Sprintf("mount %s:/dev: the source has no null device", m.HostPath))
			}
		}
		if err := checkRecursiveReadOnly(s.current(), handler, m); err != nil {
			return nil, err
		}
		out = append(out, specgen.Mount{
			ContainerPath: m.ContainerPath, HostPath: src, Readonly: m.Readonly,
			RecursiveReadOnly: m.RecursiveReadOnly, Propagation: m.SpecPropagation(),
			Options: m.Options,
		})
	}
	return out, nil
}

// targetPID is the process of container id, which must be running in
// pod podID, whose PID namespace a container joins.
func (s *Server) targetPID(id, podID string) (int, error) {
	target, err := s.containers.Get(id)
	if err != nil {
		return 0, fmt.Errorf("target container of the PID namespace: %w", err)
	}
	tr := target.Record()
	if tr.State != container.StateRunning || tr.SandboxID != podID {
		return 0, fmt.Errorf("target container %s must be running in the same pod: %w", target.ID, errdefs.ErrFailedPrecondition)
	}
	return tr.Pid, nil
}

func (s *Server) privilegedDevices(requested []specgen.Device) ([]specgen.Device, error) {
	host, err := specgen.HostDevices()
	if err != nil {
		return nil, fmt.Errorf("list host devices: %w", err)
	}
	return append(requested, host...), nil
}

// isProcFS reports whether path is on a procfs.
func isProcFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
}

// seccompProfile is the spec's profile of p: a Localhost profile's
// file, which the client names, is read from the node.
func seccompProfile(p podrequest.Seccomp) (specgen.SeccompProfile, error) {
	if p.Type != specgen.ProfileLocalhost {
		return specgen.SeccompProfile{Type: p.Type}, nil
	}
	b, err := readSeccompProfile(p.LocalhostRef)
	if err != nil {
		return specgen.SeccompProfile{}, fmt.Errorf("read seccomp profile: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return specgen.SeccompProfile{Type: specgen.ProfileLocalhost, Localhost: b}, nil
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
