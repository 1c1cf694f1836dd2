package specgen

import (
	"fmt"
	"path"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
)

// Container describes one CRI container: podrequest.Container.Spec gives
// the request's parts, the server adds the image config, the sandbox
// record and what it looked up on the host, and ContainerSpec turns it
// into an OCI spec.
type Container struct {
	ID   string // container ID
	Name string // CRI metadata name
	// Sandbox is the pod the container joins.
	Sandbox SandboxRef
	// Image is the image's name and the parts of its config the spec uses.
	Image      ImageRef
	RootfsPath string
	// Command overrides the image's ENTRYPOINT and Args its CMD, with
	// Kubernetes' rules: a Command without Args does not use the image's CMD.
	Command, Args []string
	Env           []KeyValue
	WorkingDir    string
	// User is the resolved identity, from ResolveUser.
	User ResolvedUser
	Tty  bool
	// Hostname is the pod's hostname, exported as HOSTNAME (the container
	// shares the sandbox's UTS namespace, so the spec sets no hostname).
	Hostname string
	Mounts   []Mount
	Devices  []Device
	// Files are the sandbox's /etc/resolv.conf, /etc/hostname and
	// /etc/hosts. They are bound read-write, read-only with a read-only
	// rootfs, as containerd does; a CRI mount at the same path replaces them.
	Files       []File
	Resources   Resources
	Security    Security
	Annotations map[string]string // pod and container annotations, passed through
}

// SandboxRef is what a container needs to know about its sandbox.
type SandboxRef struct {
	ID, Name, Namespace, UID string
	// NetNSPath is the sandbox key; empty with HostNetwork.
	NetNSPath   string
	HostNetwork bool
	// PID is the pause process, whose IPC, UTS and (for NamespacePod) PID
	// namespaces the container joins through /proc/<pid>/ns/*; 0 for a
	// sandbox without a process, whose pinned IPCPath and UTSPath it
	// joins instead.
	PID int
	// IPCPath and UTSPath are the pinned namespaces of a sandbox without
	// a process; empty: the node's (host IPC; the host's UTS with host
	// network).
	IPCPath, UTSPath string
	// CgroupParent is the pod's cgroup; the container's is
	// <CgroupParent>/podbay-<container ID> (cgroupfs driver).
	CgroupParent string
	// CgroupsPath, when set, is the container's linux.cgroupsPath
	// (the systemd driver's <slice>:podbay:<id>).
	CgroupsPath string
	// ShmPath, when set, is the sandbox's /dev/shm to bind into the
	// container; empty gives each container its own tmpfs.
	ShmPath string
	// Privileged is whether the pod may run privileged containers.
	Privileged bool
	// UserNS is the pod's own user namespace, which the container joins
	// (the pause process's); nil: the host's.
	UserNS *UserNamespace
}

// ImageRef is the image a container runs.
type ImageRef struct {
	Name       string // as the annotation shows it
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE; a bare KEY unsets an earlier one
	WorkingDir string
}

// KeyValue is one CRI environment variable.
type KeyValue struct {
	Key, Value string
}

// Resources are a container's cgroup limits. Zero values mean "not set".
type Resources struct {
	CPUShares       uint64
	CPUQuota        int64
	CPUPeriod       uint64
	CpusetCpus      string
	CpusetMems      string
	MemoryLimit     int64
	MemorySwapLimit int64
	// HugepageLimits maps a page size ("2MB", "1GB") to a limit in bytes.
	HugepageLimits map[string]uint64
	OOMScoreAdj    int
	PidsLimit      int64
	// Unified holds cgroup v2 files and values; refused on cgroup v1.
	Unified map[string]string
}

// Security is a container's security context, minus the user (see
// ResolveUser).
type Security struct {
	// Privileged gives the host's capabilities and devices, rw /sys and
	// /sys/fs/cgroup, and drops seccomp, masked and read-only paths and the
	// runtime-default AppArmor profile (a Localhost one still applies);
	// CapAdd and CapDrop are then ignored.
	Privileged bool
	// CapAdd and CapDrop name capabilities with or without the CAP_ prefix,
	// in any case, or "ALL". Adding ALL is applied before dropping ALL, and
	// both before the single names, so {add: ALL, drop: CHOWN} is all but
	// CHOWN and {add: NET_ADMIN, drop: ALL} is only NET_ADMIN.
	CapAdd, CapDrop []string
	ReadonlyRootfs  bool
	NoNewPrivs      bool
	Seccomp         SeccompProfile
	AppArmor        AppArmorProfile
	// MaskedPaths and ReadonlyPaths: nil means the defaults, an empty
	// slice means none (CRI's Unmasked proc mount).
	MaskedPaths, ReadonlyPaths []string
	Sysctls                    map[string]string
	Namespaces                 NamespaceOptions
}

// NamespaceOptions choose a container's PID and IPC namespaces. The network
// and UTS namespaces follow the sandbox's network mode.
type NamespaceOptions struct {
	Pid NamespaceMode
	// TargetPID is the process whose PID namespace NamespaceTarget joins.
	TargetPID int
	// Ipc is NamespacePod or NamespaceNode.
	Ipc NamespaceMode
}

// NamespaceMode mirrors CRI's NamespaceMode, zero value included: POD.
type NamespaceMode int

// Namespace modes, in CRI's order.
const (
	NamespacePod       NamespaceMode = iota // the sandbox's
	NamespaceContainer                      // the container's own
	NamespaceNode                           // the host's
	NamespaceTarget                         // another container's (PID only)
)

func (m NamespaceMode) String() string {
	switch m {
	case NamespacePod:
		return "POD"
	case NamespaceContainer:
		return "CONTAINER"
	case NamespaceNode:
		return "NODE"
	case NamespaceTarget:
		return "TARGET"
	}
	return fmt.Sprintf("NamespaceMode(%d)", int(m))
}

// Host holds the facts about the node that change a container's spec. The
// daemon detects them once.
type Host struct {
	// AppArmor is whether the kernel enforces AppArmor; without it,
	// RuntimeDefault profiles are dropped and Localhost ones refused.
	AppArmor bool
	// AppArmorDefaultProfile is the loaded profile RuntimeDefault means;
	// empty leaves RuntimeDefault containers unconfined.
	AppArmorDefaultProfile string
	// CgroupV2 is whether the host runs the unified hierarchy: the
	// container then gets a cgroup namespace and may set Unified.
	CgroupV2 bool
	// SwapControl is whether the memory controller can limit swap
	// (memory.memsw.* on v1). Without it swap limits are left out, as
	// containerd does, since runc would fail on them.
	SwapControl bool
	// Hugetlb is whether the hugetlb controller is usable; without it
	// hugepage limits are left out (containerd's tolerate_missing_hugetlb).
	Hugetlb bool
	// Capabilities are the daemon's bounding set (CurrentCapabilities):
	// what privileged containers and CapAdd ALL get. Nil means every
	// capability the package knows.
	Capabilities []string
	// MinOOMScoreAdj, when set, clamps oom_score_adj from below: a daemon
	// without CAP_SYS_RESOURCE cannot go under its own score.
	MinOOMScoreAdj *int
	// Devices are the host's devices, given to privileged containers
	// (see HostDevices).
	Devices []Device
}

// ContainerSpec builds the OCI spec of a container in a pod. Apart from the
// host facts in host, the only input outside c is the kernel version the
// default seccomp profile is filtered by.
func ContainerSpec(c Container, host Host) (*specs.Spec, error) {
	if c.ID == "" || c.RootfsPath == "" || c.Sandbox.ID == "" {
		return nil, fmt.Errorf("container spec needs an id, a rootfs and a sandbox id: %w", errdefs.ErrInvalidArgument)
	}
	if c.Security.Privileged && !c.Sandbox.Privileged {
		return nil, fmt.Errorf("privileged container %s in a sandbox that is not privileged: %w", c.Name, errdefs.ErrInvalidArgument)
	}
	s := baseSpec()
	s.Root = &specs.Root{Path: c.RootfsPath, Readonly: c.Security.ReadonlyRootfs}

	args, err := processArgs(c.Command, c.Args, c.Image.Entrypoint, c.Image.Cmd)
	if err != nil {
		return nil, err
	}
	s.Process.Args = args
	if s.Process.Env, err = processEnv(c.Image.Env, c.Env, c.Hostname); err != nil {
		return nil, err
	}
	if s.Process.Cwd, err = processCwd(c.WorkingDir, c.Image.WorkingDir); err != nil {
		return nil, err
	}
	s.Process.Terminal = c.Tty
	s.Process.User = specs.User{
		UID:            c.User.UID,
		GID:            c.User.GID,
		AdditionalGids: append([]uint32(nil), c.User.AdditionalGids...),
	}
	s.Process.NoNewPrivileges = c.Security.NoNewPrivs
	if s.Process.OOMScoreAdj, err = oomScoreAdj(c.Resources.OOMScoreAdj, host.MinOOMScoreAdj); err != nil {
		return nil, err
	}

	if c.Security.Privileged {
		s.Process.Capabilities = allCapabilities(host.Capabilities)
	} else if s.Process.Capabilities, err = capabilities(c.Security.CapAdd, c.Security.CapDrop, host.Capabilities); err != nil {
		return nil, err
	}
	if s.Process.ApparmorProfile, err = appArmorProfile(c.Security.AppArmor, c.Security.Privileged, host); err != nil {
		return nil, err
	}

	if s.Linux.Namespaces, err = containerNamespaces(c.Sandbox, c.Security.Namespaces, host.CgroupV2); err != nil {
		return nil, err
	}
	if u := c.Sandbox.UserNS; u != nil {
		if err := u.check(); err != nil {
			return nil, err
		}
		u.apply(s, nsPath(c.Sandbox.PID, "user"))
	}
	if err := setMounts(s, c); err != nil {
		return nil, err
	}
	if c.Security.Privileged {
		s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
	} else {
		if c.Security.MaskedPaths != nil {
			s.Linux.MaskedPaths = append([]string{}, c.Security.MaskedPaths...)
		}
		if c.Security.ReadonlyPaths != nil {
			s.Linux.ReadonlyPaths = append([]string{}, c.Security.ReadonlyPaths...)
		}
	}

	if s.Linux.Sysctl, err = sysctls(c.Security.Sysctls, SysctlScope{
		HostNetwork: c.Sandbox.HostNetwork, HostIPC: c.Security.Namespaces.Ipc == NamespaceNode,
	}); err != nil {
		return nil, err
	}
	s.Linux.CgroupsPath = path.Join(c.Sandbox.CgroupParent, "podbay-"+c.ID)
	if c.Sandbox.CgroupsPath != "" {
		s.Linux.CgroupsPath = c.Sandbox.CgroupsPath
	}
	if s.Linux.Resources, err = resources(c.Resources, host); err != nil {
		return nil, err
	}
	if s.Linux.Devices, s.Linux.Resources.Devices, err = devices(c.Devices, c.Security.Privileged, host.Devices); err != nil {
		return nil, err
	}

	// Last: the default profile depends on the final capabilities.
	if !c.Security.Privileged {
		if s.Linux.Seccomp, err = seccompProfile(c.Security.Seccomp, s); err != nil {
			return nil, err
		}
	}

	s.Annotations = make(map[string]string, len(c.Annotations)+7)
	for k, v := range c.Annotations {
		s.Annotations[k] = v
	}
	s.Annotations[annotations.ContainerType] = annotations.ContainerTypeContainer
	s.Annotations[annotations.SandboxID] = c.Sandbox.ID
	s.Annotations[annotations.SandboxName] = c.Sandbox.Name
	s.Annotations[annotations.SandboxNamespace] = c.Sandbox.Namespace
	s.Annotations[annotations.SandboxUID] = c.Sandbox.UID
	s.Annotations[annotations.ContainerName] = c.Name
	s.Annotations[annotations.ImageName] = c.Image.Name
	return s, nil
}

// oomScoreAdj clamps the requested score from below by min (see
// Host.MinOOMScoreAdj).
func oomScoreAdj(req int, min *int) (*int, error) {
	if req < -1000 || req > 1000 {
		return nil, fmt.Errorf("oom_score_adj %d outside [-1000, 1000]: %w", req, errdefs.ErrInvalidArgument)
	}
	if min != nil && req < *min {
		req = *min
	}
	return &req, nil
}
