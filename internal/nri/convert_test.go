package nri

import (
	"slices"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/network"
	"github.com/podbay/podbay/internal/sandbox"
)

func TestNewPod(t *testing.T) {
	rec := sandbox.Record{
		ID:             "pod1",
		Metadata:       sandbox.Metadata{Name: "web", Namespace: "default", UID: "uid-1"},
		RuntimeHandler: "kata",
		Labels:         map[string]string{"app": "web"},
		Annotations:    map[string]string{"a": "b"},
		CgroupParent:   "/kubepods/pod1",
		Pid:            42,
		NetworkSettings: network.Settings{
			SandboxKey: "/var/run/netns/podbay-pod1", IPAddress: "10.88.0.5", GlobalIPv6Address: "fd00::5",
		},
	}
	shares := uint64(512)
	res := PodResources{Resources: &rspec.LinuxResources{CPU: &rspec.LinuxCPU{Shares: &shares}}}

	pod := NewPod(rec, nil, res)
	if pod.Id != "pod1" || pod.Name != "web" || pod.Namespace != "default" || pod.Uid != "uid-1" ||
		pod.RuntimeHandler != "kata" || pod.Pid != 42 || pod.Labels["app"] != "web" || pod.Annotations["a"] != "b" {
		t.Errorf("pod = %+v", pod)
	}
	if !slices.Equal(pod.Ips, []string{"10.88.0.5", "fd00::5"}) {
		t.Errorf("IPs = %v", pod.Ips)
	}
	if l := pod.Linux; l.CgroupParent != "/kubepods/pod1" || l.CgroupsPath != "/kubepods/pod1/podbay-pod1" {
		t.Errorf("cgroups = %q, %q", l.CgroupParent, l.CgroupsPath)
	}
	if ns := pod.Linux.Namespaces; len(ns) != 1 || ns[0].Type != "network" || ns[0].Path != rec.NetworkSettings.SandboxKey {
		t.Errorf("namespaces without a spec = %v", ns)
	}
	if got := pod.Linux.PodResources.GetCpu().GetShares().GetValue(); got != 512 {
		t.Errorf("pod resources cpu shares = %d", got)
	}
	if pod.Linux.PodOverhead != nil {
		t.Errorf("overhead = %v, want none", pod.Linux.PodOverhead)
	}
	// The record's maps are not shared with NRI's objects.
	pod.Labels["app"] = "changed"
	if rec.Labels["app"] != "web" {
		t.Error("NewPod shares the record's labels")
	}

	spec := &rspec.Spec{Linux: &rspec.Linux{
		CgroupsPath: "/kubepods/pod1/podbay-pod1",
		Namespaces: []rspec.LinuxNamespace{
			{Type: rspec.NetworkNamespace, Path: "/var/run/netns/podbay-pod1"}, {Type: rspec.IPCNamespace}, {Type: rspec.UTSNamespace},
		},
	}}
	if ns := NewPod(rec, spec, PodResources{}).Linux.Namespaces; len(ns) != 3 || ns[1].Type != "ipc" {
		t.Errorf("namespaces from the spec = %v", ns)
	}
	// A pod without a sandbox process: pid 0, its pinned namespaces.
	pinned := rec
	pinned.Pid = 0
	pinned.Pins = sandbox.Pins{IPC: "/run/podbay/pinns/pod1/ipc", UTS: "/run/podbay/pinns/pod1/uts"}
	pp := NewPod(pinned, spec, PodResources{})
	if ns := pp.Linux.Namespaces; pp.Pid != 0 || len(ns) != 3 || ns[1].Path != pinned.Pins.IPC || ns[2].Path != pinned.Pins.UTS {
		t.Errorf("pinned pod: pid %d, namespaces %v", pp.Pid, ns)
	}
}

func TestNewContainer(t *testing.T) {
	created := time.Unix(100, 5)
	rec := container.Record{
		ID: "c1", SandboxID: "pod1", MetaName: "app", State: container.StateRunning,
		ImageRef: "busybox:latest", CreatedAt: created, StartedAt: created.Add(time.Second),
		Labels: map[string]string{"l": "v"}, Annotations: map[string]string{"user.annotation": "x"},
		CgroupPath: "/kubepods/pod1/podbay-c1", Pid: 77,
		User: &container.User{UID: 1000, GID: 100, Groups: []uint32{10}},
	}
	oom := 500
	limit := int64(64 << 20)
	spec := &rspec.Spec{
		Annotations: map[string]string{"io.kubernetes.cri.container-type": "container"},
		Process: &rspec.Process{
			Args: []string{"sleep", "1"}, Env: []string{"A=1"}, OOMScoreAdj: &oom,
			Rlimits: []rspec.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 512}},
		},
		Mounts: []rspec.Mount{{Destination: "/data", Source: "/host/data", Type: "bind", Options: []string{"rbind", "ro"}}},
		Hooks:  &rspec.Hooks{Poststart: []rspec.Hook{{Path: "/bin/true"}}},
		Linux: &rspec.Linux{
			CgroupsPath: "/kubepods/pod1/podbay-c1",
			Devices:     []rspec.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}},
			Resources:   &rspec.LinuxResources{Memory: &rspec.LinuxMemory{Limit: &limit}},
			Sysctl:      map[string]string{"net.ipv4.ip_forward": "1"},
			Namespaces:  []rspec.LinuxNamespace{{Type: rspec.NetworkNamespace, Path: "/var/run/netns/podbay-pod1"}},
		},
	}
	c := NewContainer(rec, spec)
	if c.Id != "c1" || c.PodSandboxId != "pod1" || c.Name != "app" || c.State != api.ContainerState_CONTAINER_RUNNING ||
		c.Pid != 77 || c.CreatedAt != created.UnixNano() || c.StartedAt != created.Add(time.Second).UnixNano() ||
		c.FinishedAt != 0 || c.GetImage().GetName() != "busybox:latest" {
		t.Errorf("container = %+v", c)
	}
	if c.Annotations["user.annotation"] != "x" || c.Annotations["io.kubernetes.cri.container-type"] != "container" {
		t.Errorf("annotations = %v, want the record's and the spec's", c.Annotations)
	}
	if !slices.Equal(c.Args, spec.Process.Args) || !slices.Equal(c.Env, spec.Process.Env) {
		t.Errorf("args %v env %v", c.Args, c.Env)
	}
	if len(c.Mounts) != 1 || c.Mounts[0].Destination != "/data" || c.Mounts[0].Source != "/host/data" {
		t.Errorf("mounts = %v", c.Mounts)
	}
	if len(c.GetHooks().GetPoststart()) != 1 {
		t.Errorf("hooks = %v", c.Hooks)
	}
	if len(c.Rlimits) != 1 || c.Rlimits[0].Type != "RLIMIT_NOFILE" || c.Rlimits[0].Soft != 512 {
		t.Errorf("rlimits = %v", c.Rlimits)
	}
	if u := c.User; u.Uid != 1000 || u.Gid != 100 || !slices.Equal(u.AdditionalGids, []uint32{10}) {
		t.Errorf("user = %v", u)
	}
	l := c.Linux
	if l.CgroupsPath != "/kubepods/pod1/podbay-c1" || l.GetOomScoreAdj().GetValue() != 500 ||
		len(l.Devices) != 1 || l.Devices[0].Path != "/dev/fuse" || l.Sysctl["net.ipv4.ip_forward"] != "1" ||
		l.GetResources().GetMemory().GetLimit().GetValue() != limit || len(l.Namespaces) != 1 || l.SeccompPolicy != nil {
		t.Errorf("linux = %+v", l)
	}

	// Without a spec (the bundle is gone): what the record has.
	rec.State = container.StateExited
	rec.ExitCode, rec.Reason, rec.FinishedAt = 137, container.ReasonError, created.Add(2*time.Second)
	c = NewContainer(rec, nil)
	if c.State != api.ContainerState_CONTAINER_STOPPED || c.ExitCode != 137 || c.StatusReason != "Error" ||
		c.FinishedAt == 0 || c.Linux.CgroupsPath != rec.CgroupPath || c.Args != nil {
		t.Errorf("container without spec = %+v", c)
	}
}

func TestState(t *testing.T) {
	for s, want := range map[container.State]api.ContainerState{
		container.StateCreating: api.ContainerState_CONTAINER_CREATED,
		container.StateCreated:  api.ContainerState_CONTAINER_CREATED,
		container.StateRunning:  api.ContainerState_CONTAINER_RUNNING,
		container.StateExited:   api.ContainerState_CONTAINER_STOPPED,
		"odd":                   api.ContainerState_CONTAINER_UNKNOWN,
	} {
		if got := State(s); got != want {
			t.Errorf("State(%s) = %v, want %v", s, got, want)
		}
	}
}
