package nri

import (
	"maps"
	"path"
	"strings"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/sandbox"
)

// PodResources are a pod's resource totals and overhead, from the kubelet's
// LinuxPodSandboxConfig.
type PodResources struct {
	Overhead, Resources *rspec.LinuxResources
}

// NewPod describes the pod of rec to plugins. spec is the sandbox
// container's OCI spec (its namespaces and cgroups path); nil when it is
// not known.
func NewPod(rec sandbox.Record, spec *rspec.Spec, res PodResources) *api.PodSandbox {
	pod := &api.PodSandbox{
		Id:             rec.ID,
		Name:           rec.Metadata.Name,
		Uid:            rec.Metadata.UID,
		Namespace:      rec.Metadata.Namespace,
		Labels:         maps.Clone(rec.Labels),
		Annotations:    maps.Clone(rec.Annotations),
		RuntimeHandler: rec.RuntimeHandler,
		Pid:            uint32(max(rec.Pid, 0)),
		Ips:            rec.NetworkSettings.PodIPs(),
		Linux: &api.LinuxPodSandbox{
			CgroupParent: rec.CgroupParent,
			CgroupsPath:  path.Join(rec.CgroupParent, "podbay-"+rec.ID),
		},
	}
	if res.Overhead != nil {
		pod.Linux.PodOverhead = api.FromOCILinuxResources(res.Overhead, nil)
	}
	if res.Resources != nil {
		pod.Linux.PodResources = api.FromOCILinuxResources(res.Resources, nil)
		pod.Linux.Resources = pod.Linux.PodResources
	}
	if spec != nil && spec.Linux != nil {
		pod.Linux.Namespaces = api.FromOCILinuxNamespaces(spec.Linux.Namespaces)
		// A pod without a sandbox process (Pid 0): the namespaces its
		// spec creates are the ones podbayd pinned.
		for _, ns := range pod.Linux.Namespaces {
			switch {
			case ns.Path != "":
			case ns.Type == string(rspec.IPCNamespace) && rec.Pins.IPC != "":
				ns.Path = rec.Pins.IPC
			case ns.Type == string(rspec.UTSNamespace) && rec.Pins.UTS != "":
				ns.Path = rec.Pins.UTS
			}
		}
		if spec.Linux.CgroupsPath != "" {
			pod.Linux.CgroupsPath = spec.Linux.CgroupsPath
		}
	} else if key := rec.NetworkSettings.SandboxKey; key != "" {
		pod.Linux.Namespaces = []*api.LinuxNamespace{{Type: string(rspec.NetworkNamespace), Path: key}}
	}
	return pod
}

// NewContainer describes the container of rec, whose OCI spec is spec, to
// plugins. spec may be nil (a container whose bundle is gone).
func NewContainer(rec container.Record, spec *rspec.Spec) *api.Container {
	c := &api.Container{
		Id:            rec.ID,
		PodSandboxId:  rec.SandboxID,
		Name:          rec.MetaName,
		State:         State(rec.State),
		Labels:        maps.Clone(rec.Labels),
		Annotations:   maps.Clone(rec.Annotations),
		Pid:           uint32(max(rec.Pid, 0)),
		ExitCode:      rec.ExitCode,
		StatusReason:  rec.Reason,
		StatusMessage: rec.Message,
		Image:         &api.Image{Name: rec.ImageRef},
		Linux:         &api.LinuxContainer{CgroupsPath: rec.CgroupPath},
	}
	if !rec.CreatedAt.IsZero() {
		c.CreatedAt = rec.CreatedAt.UnixNano()
	}
	if !rec.StartedAt.IsZero() {
		c.StartedAt = rec.StartedAt.UnixNano()
	}
	if !rec.FinishedAt.IsZero() {
		c.FinishedAt = rec.FinishedAt.UnixNano()
	}
	if rec.User != nil {
		c.User = &api.User{Uid: rec.User.UID, Gid: rec.User.GID, AdditionalGids: rec.User.Groups}
	}
	if spec == nil {
		return c
	}
	if len(spec.Annotations) > 0 {
		// What the runtime sees: the record's annotations and podbay's
		// own io.kubernetes.cri.* keys.
		c.Annotations = maps.Clone(spec.Annotations)
		for k, v := range rec.Annotations {
			c.Annotations[k] = v
		}
	}
	if p := spec.Process; p != nil {
		c.Args = append([]string(nil), p.Args...)
		c.Env = append([]string(nil), p.Env...)
		for _, r := range p.Rlimits {
			c.Rlimits = append(c.Rlimits, &api.POSIXRlimit{Type: r.Type, Hard: r.Hard, Soft: r.Soft})
		}
		if c.User == nil {
			c.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: p.User.AdditionalGids}
		}
		if p.OOMScoreAdj != nil {
			c.Linux.OomScoreAdj = api.Int(*p.OOMScoreAdj)
		}
		c.Linux.IoPriority = api.FromOCILinuxIOPriority(p.IOPriority)
		c.Linux.Scheduler = api.FromOCILinuxScheduler(p.Scheduler)
	}
	c.Mounts = api.FromOCIMounts(spec.Mounts)
	c.Hooks = api.FromOCIHooks(spec.Hooks)
	if l := spec.Linux; l != nil {
		c.Linux.Namespaces = api.FromOCILinuxNamespaces(l.Namespaces)
		c.Linux.Devices = api.FromOCILinuxDevices(l.Devices)
		c.Linux.Resources = api.FromOCILinuxResources(l.Resources, spec.Annotations)
		if l.CgroupsPath != "" {
			c.Linux.CgroupsPath = l.CgroupsPath
		}
		c.Linux.Sysctl = maps.Clone(l.Sysctl)
		if l.Seccomp != nil { // FromOCILinuxSeccomp takes no nil
			c.Linux.SeccompPolicy = api.FromOCILinuxSeccomp(l.Seccomp)
		}
		c.Linux.NetDevices = api.FromOCILinuxNetDevices(l.NetDevices)
	}
	return c
}

// State maps a podbay container state to NRI's. A container being
// created is CREATED, as containerd reports it to CreateContainer.
func State(s container.State) api.ContainerState {
	switch s {
	case container.StateCreating, container.StateCreated:
		return api.ContainerState_CONTAINER_CREATED
	case container.StateRunning:
		return api.ContainerState_CONTAINER_RUNNING
	case container.StateExited:
		return api.ContainerState_CONTAINER_STOPPED
	}
	return api.ContainerState_CONTAINER_UNKNOWN
}

// EnvValue returns the value of key in an OCI environment ("" and false
// when unset).
func EnvValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
