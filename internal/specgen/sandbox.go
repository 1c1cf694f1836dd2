// Package specgen turns plain descriptions of pods and containers into OCI
// runtime specs. SandboxSpec and ContainerSpec are pure: they read no files
// and touch no host state, so every translation is covered by table tests.
// The few functions that must look at the host are kept apart: ResolveUser
// reads a container's /etc/passwd and /etc/group (user.go, rootfs.go),
// CheckExecutable looks for its program (executable.go);
// DeviceFromHost, HostDevices and CurrentCapabilities read /dev and /proc
// (host.go).
package specgen

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/errdefs"
)

// defaultSandboxOOMScoreAdjust is the pause process's oom_score_adj when
// the pod names none: the kubelet's PodInfraOOMAdj, which dockershim gave
// the pause container.
const defaultSandboxOOMScoreAdjust = -998

// File is a host file bound at Dest: read-only in the sandbox, read-write
// in its containers unless their rootfs is read-only (see Container.Files).
type File struct {
	Source, Dest string
}

// Sandbox describes a pod's sandbox container.
type Sandbox struct {
	ID         string
	Name       string // pod name
	Namespace  string // pod namespace
	UID        string // pod UID
	LogDir     string
	RootfsPath string
	Args       []string
	Hostname   string
	// NetNSPath is the sandbox key. Empty with HostNetwork.
	NetNSPath   string
	HostNetwork bool
	HostPID     bool
	HostIPC     bool
	CgroupsPath string
	Sysctls     map[string]string
	// OOMScoreAdj is the score to request; MinOOMScoreAdj, when set, clamps
	// it from below (a daemon without CAP_SYS_RESOURCE cannot go lower than
	// its own score).
	OOMScoreAdj    *int
	MinOOMScoreAdj *int
	Files          []File
	// RunAsUser/RunAsGroup for the pause process; nil means root.
	RunAsUser, RunAsGroup *int64
	SupplementalGroups    []int64
	Privileged            bool
	// Capabilities are those a privileged sandbox gets: the daemon's
	// bounding set (CurrentCapabilities). Nil means every known one, which
	// fails on a host whose daemon lacks some (CAP_SYS_RESOURCE here).
	Capabilities []string
	// CPUShares, CPUQuota, CPUPeriod and MemoryLimit are the pod's resource
	// totals, set on the sandbox so VM runtimes can size the VM. When
	// HasResources (the kubelet sent them), they are also annotations, as
	// containerd writes them and Kata reads them.
	HasResources bool
	CPUShares    uint64
	CPUQuota     int64
	CPUPeriod    uint64
	MemoryLimit  int64
	// Annotations are the pod's annotations, passed to the runtime.
	Annotations map[string]string
	// UserNS, when set, is the pod's own user namespace; nil: the host's.
	UserNS *UserNamespace
	// NoProcess: the spec only describes the pod's namespaces, hostname
	// and sysctls for a sandbox without a process (podsandbox's pinned
	// kind), which runs nothing: it has no root and no args.
	NoProcess bool
	// ShmPath, when set, is the pod's /dev/shm, bound in place of the
	// sandbox's own tmpfs (see Container's SandboxRef.ShmPath).
	ShmPath string
}

// SandboxSpec builds the OCI spec of a sandbox container.
func SandboxSpec(sb Sandbox) (*specs.Spec, error) {
	if sb.ID == "" || (!sb.NoProcess && (sb.RootfsPath == "" || len(sb.Args) == 0)) {
		return nil, fmt.Errorf("sandbox spec needs an id, a rootfs and args")
	}
	if !sb.HostNetwork && sb.NetNSPath == "" {
		return nil, fmt.Errorf("sandbox spec: a pod without host network needs a network namespace path")
	}
	if err := CheckSandbox(sb); err != nil {
		return nil, err
	}
	s := baseSpec()
	if !sb.NoProcess {
		s.Root = &specs.Root{Path: sb.RootfsPath, Readonly: true}
		s.Process.Args = append([]string(nil), sb.Args...)
	}
	s.Process.NoNewPrivileges = true
	s.Hostname = sb.Hostname
	if err := setSandboxUser(s, sb); err != nil {
		return nil, err
	}
	if sb.Privileged {
		s.Process.Capabilities = allCapabilities(sb.Capabilities)
		s.Linux.MaskedPaths = nil
		s.Linux.ReadonlyPaths = nil
	}

	setSandboxNamespaces(s, sb)
	if sb.UserNS != nil {
		sb.UserNS.apply(s, "") // checked by CheckSandbox
	}
	s.Linux.CgroupsPath = sb.CgroupsPath

	var err error
	if s.Linux.Sysctl, err = sysctls(sb.Sysctls, SysctlScope{HostNetwork: sb.HostNetwork, HostIPC: sb.HostIPC}); err != nil {
		return nil, err
	}

	score := defaultSandboxOOMScoreAdjust
	if sb.OOMScoreAdj != nil {
		score = *sb.OOMScoreAdj
	}
	if sb.MinOOMScoreAdj != nil && score < *sb.MinOOMScoreAdj {
		score = *sb.MinOOMScoreAdj
	}
	s.Process.OOMScoreAdj = &score

	s.Linux.Resources = sandboxResources(sb)

	setSandboxMounts(s, sb)
	s.Annotations = sandboxAnnotations(sb)
	return s, nil
}

// setSandboxUser sets the pause process's user. The IDs are checked as a
// container's: a negative id would wrap to 4294967295, which
// setresuid(2) reads as "unchanged", leaving the pause process root.
func setSandboxUser(s *specs.Spec, sb Sandbox) error {
	var err error
	if sb.RunAsUser != nil {
		if s.Process.User.UID, err = checkID(*sb.RunAsUser, "sandbox uid"); err != nil {
			return err
		}
	}
	if sb.RunAsGroup != nil {
		if s.Process.User.GID, err = checkID(*sb.RunAsGroup, "sandbox gid"); err != nil {
			return err
		}
	}
	if err := checkGroupCount(len(sb.SupplementalGroups)); err != nil {
		return err
	}
	for _, g := range sb.SupplementalGroups {
		gid, err := checkID(g, "sandbox supplemental gid")
		if err != nil {
			return err
		}
		s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, gid)
	}
	return nil
}

// setSandboxNamespaces sets the sandbox's namespaces: its own mount
// namespace, and PID, IPC, UTS and network ones unless the pod shares
// the node's.
func setSandboxNamespaces(s *specs.Spec, sb Sandbox) {
	ns := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if !sb.HostPID {
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace})
	}
	if !sb.HostIPC {
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace})
	}
	if !sb.HostNetwork {
		// A pod with its own network gets its own UTS namespace too, so
		// its hostname does not change the node's.
		ns = append(ns,
			specs.LinuxNamespace{Type: specs.UTSNamespace},
			specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: sb.NetNSPath})
	} else {
		// runc refuses a hostname without a UTS namespace.
		s.Hostname = ""
	}
	s.Linux.Namespaces = ns
}

// sandboxResources are the sandbox's cgroup limits: no device, and the
// pod's CPU and memory where the kubelet sent them.
func sandboxResources(sb Sandbox) *specs.LinuxResources {
	res := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	if sb.CPUShares > 0 || sb.CPUQuota > 0 || sb.CPUPeriod > 0 {
		res.CPU = &specs.LinuxCPU{}
		if sb.CPUShares > 0 {
			res.CPU.Shares = &sb.CPUShares
		}
		if sb.CPUQuota > 0 {
			res.CPU.Quota = &sb.CPUQuota
		}
		if sb.CPUPeriod > 0 {
			res.CPU.Period = &sb.CPUPeriod
		}
	}
	if sb.MemoryLimit > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &sb.MemoryLimit}
	}
	return res
}

// setSandboxMounts binds the pod's /dev/shm and its files into the spec.
func setSandboxMounts(s *specs.Spec, sb Sandbox) {
	if sb.ShmPath != "" {
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/dev/shm" {
				s.Mounts[i] = bindMount(sb.ShmPath, "/dev/shm", false, PropagationPrivate)
			}
		}
	}
	for _, f := range sb.Files {
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: f.Dest, Type: "bind", Source: f.Source,
			Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
		})
	}
}

// sandboxAnnotations are the sandbox's annotations: the allowed ones,
// then the runtime's own keys.
func sandboxAnnotations(sb Sandbox) map[string]string {
	out := map[string]string{}
	for k, v := range sb.Annotations {
		out[k] = v
	}
	out[annotations.ContainerType] = annotations.ContainerTypeSandbox
	out[annotations.SandboxID] = sb.ID
	out[annotations.SandboxName] = sb.Name
	out[annotations.SandboxNamespace] = sb.Namespace
	out[annotations.SandboxUID] = sb.UID
	out[annotations.SandboxLogDir] = sb.LogDir
	if sb.HasResources {
		out[annotations.SandboxCPUPeriod] = strconv.FormatUint(sb.CPUPeriod, 10)
		out[annotations.SandboxCPUQuota] = strconv.FormatInt(sb.CPUQuota, 10)
		out[annotations.SandboxCPUShares] = strconv.FormatUint(sb.CPUShares, 10)
		out[annotations.SandboxMemory] = strconv.FormatInt(sb.MemoryLimit, 10)
	}
	return out
}

// resources are the settings SandboxSpec applies to the pause container:
// the positive ones.
func (sb Sandbox) resources() Resources {
	r := Resources{CPUShares: sb.CPUShares, CPUPeriod: sb.CPUPeriod}
	if sb.CPUQuota > 0 {
		r.CPUQuota = sb.CPUQuota
	}
	if sb.MemoryLimit > 0 {
		r.MemoryLimit = sb.MemoryLimit
	}
	return r
}

// CheckSandbox refuses, before anything is made, what SandboxSpec would
// refuse in sb's hostname, sysctls and resources, the parts the runtime
// would otherwise refuse only at create.
func CheckSandbox(sb Sandbox) error {
	if !sb.HostNetwork {
		if err := CheckHostname(sb.Hostname); err != nil {
			return err
		}
	}
	if err := CheckSysctls(sb.Sysctls, SysctlScope{HostNetwork: sb.HostNetwork, HostIPC: sb.HostIPC}); err != nil {
		return err
	}
	if err := checkUserNamespaceSandbox(sb); err != nil {
		return err
	}
	if err := checkGroupCount(len(sb.SupplementalGroups)); err != nil {
		return err
	}
	return CheckResources(sb.resources())
}

// maxHostname is the kernel's limit on a hostname (HOST_NAME_MAX):
// sethostname(2) fails with EINVAL beyond it.
const maxHostname = 64

// CheckHostname refuses a pod hostname the kernel would refuse, or that
// would break the /etc/hostname and /etc/hosts files written for the pod
// (a NUL or a line break). An empty hostname is allowed: the pod keeps
// the runtime's.
func CheckHostname(h string) error {
	if len(h) > maxHostname {
		return fmt.Errorf("hostname %.16q... is %d bytes, more than %d: %w", h, len(h), maxHostname, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(h, "\x00\n\r") {
		return fmt.Errorf("hostname %q contains a NUL or a line break: %w", h, errdefs.ErrInvalidArgument)
	}
	return nil
}

// defaultCapabilities are the capabilities a container gets unless it asks
// otherwise: the set containerd and CRI-O grant by default.
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func capabilitySet(caps []string) *specs.LinuxCapabilities {
	c := append([]string(nil), caps...)
	sort.Strings(c)
	return &specs.LinuxCapabilities{
		Bounding:  c,
		Effective: append([]string(nil), c...),
		Permitted: append([]string(nil), c...),
	}
}

// allCapabilities is the set a privileged container gets: the daemon's own
// bounding set when known (see CurrentCapabilities), as containerd does —
// a runtime started by a daemon without CAP_SYS_RESOURCE cannot grant it —
// else every capability this package knows.
func allCapabilities(current []string) *specs.LinuxCapabilities {
	if current == nil {
		current = knownCapabilities
	}
	return capabilitySet(current)
}

// knownCapabilities are the capabilities of Linux 5.9+, in the order of
// their numbers.
var knownCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// baseSpec is the spec every container starts from: the mounts, masked
// paths and capabilities of containerd's and CRI-O's defaults.
func baseSpec() *specs.Spec {
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Cwd:          "/",
			Env:          []string{defaultPath},
			Capabilities: capabilitySet(defaultCapabilities),
			// No rlimits: the process inherits the runtime's, as with
			// containerd; raising them needs CAP_SYS_RESOURCE.
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			MaskedPaths:   defaultMaskedPaths(),
			ReadonlyPaths: defaultReadonlyPaths(),
		},
	}
}

// defaultMaskedPaths are containerd's default masked paths.
func defaultMaskedPaths() []string {
	return []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
}

// defaultReadonlyPaths are containerd's default read-only paths.
func defaultReadonlyPaths() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
}
