package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	testNamespace = "pbtest"
	// rpcTimeout bounds one CRI call in the tests.
	rpcTimeout = 90 * time.Second
	// Annotations that choose the network order.
	isuladNetworkAnnotation = "cri.sandbox.network.setup.v2"
	podbayOrderAnnotation   = "podbay.io/network-order"
)

func rpcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

// podMod changes a pod configuration.
type podMod func(*runtimeapi.PodSandboxConfig)

// podConfig is a pod as kubelet would send it: name, namespace pbtest, uid
// uid-<name>, label app=<name>, its own network namespace.
func (e *env) podConfig(name string, mods ...podMod) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: testNamespace, Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: filepath.Join(e.podLogDir, name),
		Labels:       map[string]string{"app": name, "podbay-test": "true"},
		Annotations:  map[string]string{},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
	for _, m := range mods {
		m(cfg)
	}
	return cfg
}

func withHostNetwork() podMod {
	return func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	}
}

func withAnnotation(k, v string) podMod {
	return func(c *runtimeapi.PodSandboxConfig) { c.Annotations[k] = v }
}

func withLabel(k, v string) podMod {
	return func(c *runtimeapi.PodSandboxConfig) { c.Labels[k] = v }
}

func withPortMapping(hostPort, containerPort int32) podMod {
	return func(c *runtimeapi.PodSandboxConfig) {
		c.PortMappings = append(c.PortMappings, &runtimeapi.PortMapping{
			Protocol: runtimeapi.Protocol_TCP, ContainerPort: containerPort, HostPort: hostPort,
		})
	}
}

func withDNS(servers, searches, options []string) podMod {
	return func(c *runtimeapi.PodSandboxConfig) {
		c.DnsConfig = &runtimeapi.DNSConfig{Servers: servers, Searches: searches, Options: options}
	}
}

func withHostname(h string) podMod {
	return func(c *runtimeapi.PodSandboxConfig) { c.Hostname = h }
}

func withSysctls(s map[string]string) podMod {
	return func(c *runtimeapi.PodSandboxConfig) { c.Linux.Sysctls = s }
}

func withNamespaces(pid, ipc runtimeapi.NamespaceMode) podMod {
	return func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext.NamespaceOptions.Pid = pid
		c.Linux.SecurityContext.NamespaceOptions.Ipc = ipc
	}
}

// withPause makes the pod share one PID namespace (pid: POD), so that it
// keeps its pause process (with the default sandbox_process = "auto", a
// pod with pid: CONTAINER has none): for tests whose subject is that
// process.
func withPause() podMod {
	return func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	}
}

// podNSPath is the path of the pod's namespace of kind (net, ipc, uts)
// that its containers join: its pause process's, or for a pod without one
// its pinned namespace.
func podNSPath(info sandboxInfo, kind string) string {
	if info.Pid > 0 {
		return fmt.Sprintf("/proc/%d/ns/%s", info.Pid, kind)
	}
	switch kind {
	case "net":
		return info.NetworkSettings.SandboxKey
	case "ipc":
		return info.Pins.IPC
	case "uts":
		return info.Pins.UTS
	}
	return ""
}

func withCgroupParent(p string) podMod {
	return func(c *runtimeapi.PodSandboxConfig) { c.Linux.CgroupParent = p }
}

// runPod runs a pod sandbox and fails the test if that fails.
func (e *env) runPod(t *testing.T, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	t.Helper()
	resp, err := e.rt.RunPodSandbox(rpcCtx(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", cfg.GetMetadata().GetName(), err)
	}
	if resp.PodSandboxId == "" {
		t.Fatalf("RunPodSandbox %s: empty sandbox ID", cfg.GetMetadata().GetName())
	}
	e.noteIDs(resp.PodSandboxId)
	return resp.PodSandboxId
}

// tryRunPod runs a pod sandbox and returns the error.
func (e *env) tryRunPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	resp, err := e.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		return "", err
	}
	e.noteIDs(resp.PodSandboxId)
	return resp.PodSandboxId, nil
}

func (e *env) stopPod(t *testing.T, id string) {
	t.Helper()
	if _, err := e.rt.StopPodSandbox(rpcCtx(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox %s: %v", id, err)
	}
}

func (e *env) removePod(t *testing.T, id string) {
	t.Helper()
	if _, err := e.rt.RemovePodSandbox(rpcCtx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox %s: %v", id, err)
	}
}

// stopAndRemove stops and removes pods, then checks that List is empty.
func (e *env) stopAndRemove(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		e.stopPod(t, id)
		e.removePod(t, id)
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("after removing every pod, List returns %d: %v", len(pods), podIDs(pods))
	}
}

// sandboxInfo is the JSON in verbose PodSandboxStatus Info["info"].
type sandboxInfo struct {
	ID              string                    `json:"id"`
	Name            string                    `json:"name"`
	Pid             int                       `json:"pid"`
	SandboxKind     string                    `json:"sandboxKind"`
	Pins            struct{ IPC, UTS string } `json:"pins"`
	ShmPath         string                    `json:"shmPath"`
	State           string                    `json:"state"`
	RuntimeHandler  string                    `json:"runtimeHandler"`
	NetworkMode     string                    `json:"networkMode"`
	NetworkOrder    string                    `json:"networkOrder"`
	NetworkStopped  bool                      `json:"networkStopped"`
	NetworkSettings networkSettings           `json:"networkSettings"`
	Bundle          string                    `json:"bundle"`
	Config          json.RawMessage           `json:"config"`
	RuntimeSpec     json.RawMessage           `json:"runtimeSpec"`
}

type networkSettings struct {
	SandboxKey        string          `json:"SandboxKey"`
	IPAddress         string          `json:"IPAddress"`
	IPPrefixLen       int             `json:"IPPrefixLen"`
	Gateway           string          `json:"Gateway"`
	MacAddress        string          `json:"MacAddress"`
	GlobalIPv6Address string          `json:"GlobalIPv6Address"`
	Networks          json.RawMessage `json:"Networks"`
}

// status returns the verbose PodSandboxStatus and its decoded info.
func (e *env) status(t *testing.T, id string) (*runtimeapi.PodSandboxStatus, sandboxInfo) {
	t.Helper()
	resp, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	if resp.Status == nil {
		t.Fatalf("PodSandboxStatus %s: no status", id)
	}
	raw, ok := resp.Info["info"]
	if !ok {
		t.Fatalf("PodSandboxStatus %s verbose: no info[\"info\"]; keys %v", id, sortedKeys(resp.Info))
	}
	var info sandboxInfo
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatalf("PodSandboxStatus %s: decode info: %v\n%s", id, err, raw)
	}
	return resp.Status, info
}

func (e *env) listPods(t *testing.T, filter *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	t.Helper()
	resp, err := e.rt.ListPodSandbox(rpcCtx(t), &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	for _, p := range resp.Items {
		e.noteIDs(p.Id)
	}
	return resp.Items
}

func podIDs(pods []*runtimeapi.PodSandbox) []string {
	var ids []string
	for _, p := range pods {
		ids = append(ids, fmt.Sprintf("%s(%s,%s)", short(p.Id), p.GetMetadata().GetName(), p.State))
	}
	return ids
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// netnsPath is pod id's sandbox key: its namespace in the env's netns dir.
func (e *env) netnsPath(id string) string { return filepath.Join(e.netnsDir, "podbay-"+id) }

// podIP returns the pod's primary IP from PodSandboxStatus.
func podIP(st *runtimeapi.PodSandboxStatus) string { return st.GetNetwork().GetIp() }

// requireIPInSubnet fails unless ip is an address of the env's subnet.
func (e *env) requireIPInSubnet(t *testing.T, ip string) net.IP {
	t.Helper()
	parsed := net.ParseIP(ip)
	if parsed == nil || !e.subnet.Contains(parsed) {
		t.Fatalf("pod IP %q is not in the env's subnet %s", ip, e.subnet)
	}
	return parsed
}

func code(err error) codes.Code { return status.Code(err) }

// eventually polls fn until it returns nil or timeout passes, and returns
// the last error.
func eventually(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
