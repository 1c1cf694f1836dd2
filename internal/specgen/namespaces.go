package specgen

import (
	"fmt"
	"slices"
	"strings"

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
// interfaces there), IPC and UTS are the pause process's, PID depends on
// the mode, mount is always new, and cgroup is new on cgroup v2.
func containerNamespaces(sb SandboxRef, opts NamespaceOptions, cgroupV2 bool) ([]specs.LinuxNamespace, error) {
	needPause := !sb.HostNetwork || opts.Ipc != NamespaceNode || opts.Pid == NamespacePod
	if needPause && sb.PID <= 0 {
		return nil, fmt.Errorf("sandbox %s has no pause process to join: %w", sb.ID, errdefs.ErrFailedPrecondition)
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
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: nsPath(sb.PID, "ipc")})
	case NamespaceNode:
	default:
		// CRI defines only POD and NODE for IPC.
		return nil, fmt.Errorf("ipc namespace mode %v: %w", opts.Ipc, errdefs.ErrInvalidArgument)
	}
	if !sb.HostNetwork {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UTSNamespace, Path: nsPath(sb.PID, "uts")})
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
	"kernel.msgmax", "kernel.msgmni", "kernel.msgmnb",
}

// sysctls copies the requested sysctls, refusing those that would change
// the node's settings because the container shares a host namespace.
func sysctls(req map[string]string, hostNetwork, hostIPC bool) (map[string]string, error) {
	if len(req) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(req))
	for k, v := range req {
		switch {
		case k == "":
			return nil, fmt.Errorf("sysctl without a name: %w", errdefs.ErrInvalidArgument)
		case hostNetwork && (strings.HasPrefix(k, "net.") || k == "kernel.hostname" || k == "kernel.domainname"):
			return nil, fmt.Errorf("sysctl %s would change the host's network or UTS namespace: %w", k, errdefs.ErrInvalidArgument)
		case hostIPC && (strings.HasPrefix(k, "fs.mqueue.") || slices.Contains(ipcSysctls, k)):
			return nil, fmt.Errorf("sysctl %s would change the host's IPC namespace: %w", k, errdefs.ErrInvalidArgument)
		}
		out[k] = v
	}
	return out, nil
}
