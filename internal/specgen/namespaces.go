package specgen

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// nsPath is a process's namespace of the given kind, the way containerd
// joins the pause container's IPC, UTS and PID namespaces.
func nsPath(pid int, kind string) string {
	return fmt.Sprintf("/proc/%d/ns/%s", pid, kind)
}

// containerNamespaces lists the namespaces a container joins or creates:
// the network one is the sandbox key (a VM runtime finds the pod's
// interfaces there), IPC and UTS are the sandbox's (its pinned namespaces
// when it has no process, else the pause process's), PID depends on the
// mode, mount is always new, and cgroup is new on cgroup v2.
func containerNamespaces(sb SandboxRef, opts NamespaceOptions, cgroupV2 bool) ([]specs.LinuxNamespace, error) {
	ipcPath, utsPath := sb.IPCPath, sb.UTSPath
	if sb.PID > 0 {
		ipcPath, utsPath = nsPath(sb.PID, "ipc"), nsPath(sb.PID, "uts")
	}
	var missing string
	switch {
	case opts.Pid == NamespacePod && sb.PID <= 0:
		missing = "a PID namespace (pid: POD)"
	case sb.UserNS != nil && sb.PID <= 0:
		missing = "a user namespace"
	case opts.Ipc == NamespacePod && ipcPath == "":
		missing = "an IPC namespace"
	case !sb.HostNetwork && utsPath == "":
		missing = "a UTS namespace"
	}
	if missing != "" {
		return nil, fmt.Errorf("sandbox %s has %s to join neither pinned nor in a sandbox process: %w", sb.ID, missing, errdefs.ErrFailedPrecondition)
	}
	var ns []specs.LinuxNamespace
	switch opts.Pid {
	case NamespacePod:
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: nsPath(sb.PID, "pid")})
	case NamespaceContainer:
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace})
	case NamespaceNode:
	case NamespaceTarget:
		if opts.TargetPID <= 0 {
			return nil, fmt.Errorf("pid namespace mode TARGET without a target process: %w", errdefs.ErrInvalidArgument)
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: nsPath(opts.TargetPID, "pid")})
	default:
		return nil, fmt.Errorf("pid namespace mode %v: %w", opts.Pid, errdefs.ErrInvalidArgument)
	}
	if !sb.HostNetwork {
		if sb.NetNSPath == "" {
			return nil, fmt.Errorf("sandbox %s has neither host network nor a network namespace path: %w", sb.ID, errdefs.ErrInvalidArgument)
		}
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: sb.NetNSPath})
	}
	switch opts.Ipc {
	case NamespacePod:
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: ipcPath})
	case NamespaceNode:
	default:
		// CRI defines only POD and NODE for IPC.
		return nil, fmt.Errorf("ipc namespace mode %v: %w", opts.Ipc, errdefs.ErrInvalidArgument)
	}
	if !sb.HostNetwork {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UTSNamespace, Path: utsPath})
	}
	ns = append(ns, specs.LinuxNamespace{Type: specs.MountNamespace})
	if cgroupV2 {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return ns, nil
}

// ipcSysctls are the sysctls of the IPC namespace (runc's list).
var ipcSysctls = []string{
	"kernel.sem", "kernel.shmall", "kernel.shmmax", "kernel.shmmni", "kernel.shm_rmid_forced",
	"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni",
}

// SysctlScope says which of a process's namespaces are the host's. A
// sysctl may only be set in a namespace of the pod's own.
type SysctlScope struct {
	// HostNetwork: the host's network namespace, and then the host's UTS
	// namespace too (a pod with its own network has its own UTS).
	HostNetwork bool
	// HostIPC: the host's IPC namespace.
	HostIPC bool
}

// CheckSysctls refuses, as runc's config validation does, a sysctl that
// is not namespaced or whose namespace is the host's in scope: runc would
// refuse it at create, after the pod's resources are made. Allowed are the
// IPC sysctls and fs.mqueue.* with a private IPC namespace, net.* with a
// private network namespace and kernel.domainname with a private UTS
// namespace; kernel.hostname never (runc: it conflicts with the OCI
// hostname). A name may use "/" as separator (sysctl.d(5)) as runc
// accepts.
//
// The name is checked as a path too, for every handler (a vm handler's
// sysctls are not looked up on the node): no empty, "." or ".."
// component, no "=", space or control character. Only the namespace is
// checked by the prefix, and a runtime that joins the name under
// /proc/sys would otherwise let "net.ipv4/../../kernel/core_pattern" out
// of it (CRI-O's CVE-2022-0811 passed "a=b+c=d" through to pinns). A
// value may not hold a NUL or a line break, which a runtime or helper that
// writes key=value lists could read as a second sysctl; whether the rest
// of a value is valid only the kernel knows, and a bad one fails at
// create.
func CheckSysctls(req map[string]string, scope SysctlScope) error {
	for k, v := range req {
		if err := checkSysctl(k, scope); err != nil {
			return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
		if strings.ContainsAny(v, "\x00\n\r") {
			return fmt.Errorf("sysctl %s: value %q contains a NUL or a line break: %w", k, v, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func checkSysctl(name string, scope SysctlScope) error {
	k := dotSeparated(name)
	if k == "" {
		return fmt.Errorf("sysctl without a name")
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r == '=' || unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("sysctl %q: name contains '=', a space or a control character", name)
	}
	for _, part := range strings.Split(k, ".") {
		// In the dotted form a "/" is a "." of the name (eth0/100 is
		// the interface eth0.100), so "/.." is a ".." component too.
		if p := strings.ReplaceAll(part, "/", "."); p == "" || p == "." || p == ".." {
			return fmt.Errorf("sysctl %q: not a valid name (empty, \".\" or \"..\" component)", name)
		}
	}
	switch {
	case slices.Contains(ipcSysctls, k) || strings.HasPrefix(k, "fs.mqueue."):
		if scope.HostIPC {
			return fmt.Errorf("sysctl %s would change the host's IPC namespace", name)
		}
		return nil
	case strings.HasPrefix(k, "net."):
		if scope.HostNetwork {
			return fmt.Errorf("sysctl %s would change the host's network namespace", name)
		}
		return nil
	case k == "kernel.domainname" && !scope.HostNetwork:
		return nil
	case k == "kernel.hostname" && !scope.HostNetwork:
		return fmt.Errorf("sysctl %s conflicts with the pod's hostname", name)
	}
	return fmt.Errorf("sysctl %s is not in a namespace of the pod's own", name)
}

// dotSeparated turns a sysctl name written with "/" separators
// ("net/ipv4/conf/eth0.100/forwarding") into the dotted form
// ("net.ipv4.conf.eth0/100.forwarding"), as sysctl(8) reads it.
func dotSeparated(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// sysctls copies the requested sysctls once CheckSysctls accepts them.
func sysctls(req map[string]string, scope SysctlScope) (map[string]string, error) {
	if len(req) == 0 {
		return nil, nil
	}
	if err := CheckSysctls(req, scope); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(req))
	for k, v := range req {
		out[k] = v
	}
	return out, nil
}
