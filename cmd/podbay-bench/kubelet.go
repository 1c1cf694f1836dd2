package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// With -kubelet (podbay-bench compare always) every pod and container
// config carries what the kubelet sends by default for a Burstable pod of
// one container with no ports, so that each runtime takes the paths a
// node's pods take (CRI-O's drop_infra_ctr applies only to pods whose PID
// namespace is per container): namespace options (PID per container,
// network and IPC the pod's), a security context with RuntimeDefault
// seccomp, the masked and read-only /proc paths, no user and not
// privileged, the kubelet's labels and annotations, ClusterFirst DNS,
// pod-level and container resources (CPU shares, a memory limit, an OOM
// score adjustment the kubelet computes for Burstable), and the log
// directory /var/log/pods/<namespace>_<name>_<uid> (under -log-dir) that
// the kubelet creates, with the container's directory in it, before it
// calls the runtime, and removes after the pod.
//
// What it does not send: the kubelet's mounts (/etc/hosts,
// /dev/termination-log, the service account token), which are host files
// the kubelet makes.

// The kubelet's default masked and read-only paths of a container that is
// not privileged (k8s.io/kubernetes/pkg/securitycontext).
var (
	kubeletMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	kubeletReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// The resources of the bench's Burstable pod: a request of 100m CPU and a
// 128 MiB memory limit.
const (
	benchCPUShares   = 102
	benchMemoryLimit = 128 << 20
	benchOOMScoreAdj = 999 // the kubelet's for Burstable with a small request; above the bench's own 0, which this host cannot lower
)

// kubeletNamespaces is what the kubelet sends for a pod without
// shareProcessNamespace or host namespaces.
func kubeletNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

func runtimeDefault() *runtimeapi.SecurityProfile {
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
}

// kubeletPod makes cfg (a pod of podNamespace whose UID is its name) look
// like the kubelet's.
func (b *bench) kubeletPod(cfg *runtimeapi.PodSandboxConfig) {
	md := cfg.GetMetadata()
	cfg.Labels = map[string]string{
		labelRun:                      b.runID,
		"io.kubernetes.pod.name":      md.GetName(),
		"io.kubernetes.pod.namespace": md.GetNamespace(),
		"io.kubernetes.pod.uid":       md.GetUid(),
	}
	cfg.Annotations = map[string]string{
		"kubernetes.io/config.seen":   "2026-01-01T00:00:00.000000000Z",
		"kubernetes.io/config.source": "api",
	}
	cfg.DnsConfig = &runtimeapi.DNSConfig{
		Servers:  []string{"10.96.0.10"},
		Searches: []string{md.GetNamespace() + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:  []string{"ndots:5"},
	}
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent: b.opts.cgroupParent,
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: kubeletNamespaces(),
			Seccomp:          runtimeDefault(),
		},
		Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod:          100000,
			CpuShares:          benchCPUShares,
			MemoryLimitInBytes: benchMemoryLimit,
		},
	}
}

// kubeletContainer makes c, a container of pod (attempt c's), look like
// the kubelet's.
func (b *bench) kubeletContainer(c *runtimeapi.ContainerConfig, pod *runtimeapi.PodSandboxConfig) {
	md := pod.GetMetadata()
	c.Labels = map[string]string{
		labelRun:                       b.runID,
		"io.kubernetes.container.name": c.GetMetadata().GetName(),
		"io.kubernetes.pod.name":       md.GetName(),
		"io.kubernetes.pod.namespace":  md.GetNamespace(),
		"io.kubernetes.pod.uid":        md.GetUid(),
	}
	c.Annotations = map[string]string{
		"io.kubernetes.container.hash":                     "1b3d5f7a",
		"io.kubernetes.container.restartCount":             strconv.Itoa(int(c.GetMetadata().GetAttempt())),
		"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
		"io.kubernetes.container.terminationMessagePolicy": "File",
		"io.kubernetes.pod.terminationGracePeriod":         "30",
	}
	c.Image.UserSpecifiedImage = c.GetImage().GetImage()
	c.Envs = []*runtimeapi.KeyValue{
		{Key: "KUBERNETES_SERVICE_HOST", Value: []byte("10.96.0.1")},
		{Key: "KUBERNETES_SERVICE_PORT", Value: []byte("443")},
		{Key: "KUBERNETES_PORT", Value: []byte("tcp://10.96.0.1:443")},
	}
	c.Linux = &runtimeapi.LinuxContainerConfig{
		Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod:          100000,
			CpuShares:          benchCPUShares,
			MemoryLimitInBytes: benchMemoryLimit,
			OomScoreAdj:        benchOOMScoreAdj,
		},
		SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: kubeletNamespaces(),
			Seccomp:          runtimeDefault(),
			MaskedPaths:      kubeletMaskedPaths,
			ReadonlyPaths:    kubeletReadonlyPaths,
		},
	}
}

// kubeletLogDir is the kubelet's name of a pod's log directory.
func kubeletLogDir(namespace, name, uid string) string {
	return namespace + "_" + name + "_" + uid
}

// preparePod creates the pod's log directory before RunPodSandbox, as the
// kubelet does (with -kubelet only).
func (b *bench) preparePod(cfg *runtimeapi.PodSandboxConfig) error {
	if !b.opts.kubelet || cfg.GetLogDirectory() == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.GetLogDirectory(), 0o755); err != nil {
		return fmt.Errorf("create the pod's log directory: %w", err)
	}
	return nil
}

// prepareContainer creates the container's log directory in the pod's
// before CreateContainer, as the kubelet does (with -kubelet only).
func (b *bench) prepareContainer(c *runtimeapi.ContainerConfig, pod *runtimeapi.PodSandboxConfig) error {
	if !b.opts.kubelet || pod.GetLogDirectory() == "" {
		return nil
	}
	dir := filepath.Dir(filepath.Join(pod.GetLogDirectory(), c.GetLogPath()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the container's log directory: %w", err)
	}
	return nil
}
