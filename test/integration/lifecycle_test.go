package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestSandboxLifecycle runs a pod with the default network order through
// run, status, list, stop and remove, checking the host at each step.
func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")

	// web keeps its pause process (pid: POD), db has none.
	web := e.runPod(t, e.podConfig("web", withPause()), "")
	db := e.runPod(t, e.podConfig("db", withLabel("tier", "backend")), "")
	key := e.netnsPath(web)

	// The sandbox key is a pinned network namespace.
	if _, err := os.Stat(key); err != nil {
		t.Fatalf("sandbox key: %v", err)
	}
	if !isMounted(t, key) {
		t.Fatalf("%s is not a mount point", key)
	}

	st, info := e.status(t, web)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("state %v, want READY", st.State)
	}
	if st.GetMetadata().GetName() != "web" || st.GetMetadata().GetNamespace() != testNamespace || st.GetMetadata().GetUid() != "uid-web" {
		t.Errorf("status metadata %v", st.GetMetadata())
	}
	ip := e.requireIPInSubnet(t, podIP(st))

	// Verbose info carries the persisted network settings.
	ns := info.NetworkSettings
	if info.ID != web {
		t.Errorf("info id %q, want %q", info.ID, web)
	}
	if info.NetworkMode != "cni" {
		t.Errorf("networkMode %q, want cni", info.NetworkMode)
	}
	if info.NetworkOrder != "before" {
		t.Errorf("networkOrder %q, want before (the default)", info.NetworkOrder)
	}
	if info.NetworkStopped {
		t.Error("networkStopped is true for a ready pod")
	}
	if ns.SandboxKey != key {
		t.Errorf("SandboxKey %q, want %q", ns.SandboxKey, key)
	}
	if ns.IPAddress != ip.String() {
		t.Errorf("IPAddress %q, want %q", ns.IPAddress, ip)
	}
	if ns.IPPrefixLen != 24 {
		t.Errorf("IPPrefixLen %d, want 24", ns.IPPrefixLen)
	}
	gw := make(net.IP, 4)
	copy(gw, e.subnet.IP.To4())
	gw[3] = 1
	if ns.Gateway != gw.String() {
		t.Errorf("Gateway %q, want %s (the bridge)", ns.Gateway, gw)
	}
	if _, err := net.ParseMAC(ns.MacAddress); err != nil {
		t.Errorf("MacAddress %q: %v", ns.MacAddress, err)
	}

	// The pause process runs in exactly that namespace, and the bundle says
	// so.
	if !pidAlive(info.Pid) {
		t.Fatalf("pause pid %d from verbose info is not running", info.Pid)
	}
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", info.Pid)), nsInode(t, key); got != want {
		t.Errorf("pause process is in network namespace %d, the sandbox key is %d", got, want)
	}
	if !strings.Contains(string(info.RuntimeSpec), fmt.Sprintf("%q", key)) {
		t.Errorf("runtime spec does not name the sandbox key %s:\n%s", key, info.RuntimeSpec)
	}
	rec := e.sandboxCreateRecord(t, web)
	if rec.NetNSPath != key {
		t.Errorf("bundle handed to the runtime has network namespace path %q, want %q", rec.NetNSPath, key)
	}

	requirePing(t, ip.String())

	// Positive control for the leak checker: with the pods not exempt, it
	// must see every kind of resource they hold; with them exempt, none.
	e.requireLeakCheckerSees(t, web, db)

	// List filters.
	if got := e.listPods(t, &runtimeapi.PodSandboxFilter{Id: web}); len(got) != 1 || got[0].Id != web {
		t.Errorf("List by id: %v", podIDs(got))
	}
	if got := e.listPods(t, &runtimeapi.PodSandboxFilter{Id: web[:12]}); len(got) != 1 || got[0].Id != web {
		t.Errorf("List by id prefix %s: %v", web[:12], podIDs(got))
	}
	ready := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}
	notReady := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}
	if got := e.listPods(t, ready); len(got) != 2 {
		t.Errorf("List READY: %v, want both pods", podIDs(got))
	}
	if got := e.listPods(t, notReady); len(got) != 0 {
		t.Errorf("List NOTREADY: %v, want none", podIDs(got))
	}
	if got := e.listPods(t, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}}); len(got) != 1 || got[0].Id != web {
		t.Errorf("List app=web: %v", podIDs(got))
	}
	if got := e.listPods(t, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"tier": "backend"}}); len(got) != 1 || got[0].Id != db {
		t.Errorf("List tier=backend: %v", podIDs(got))
	}
	if got := e.listPods(t, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web", "tier": "backend"}}); len(got) != 0 {
		t.Errorf("List app=web,tier=backend: %v, want none", podIDs(got))
	}

	// Stop: network torn down, namespace unmounted, file kept.
	e.stopPod(t, web)
	st, info = e.status(t, web)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("state after stop %v, want NOTREADY", st.State)
	}
	if !info.NetworkStopped {
		t.Error("networkStopped is false after stop")
	}
	if _, err := os.Stat(key); err != nil {
		t.Errorf("sandbox key after stop: %v (the file must be kept until remove)", err)
	}
	if isMounted(t, key) {
		t.Errorf("%s is still mounted after stop", key)
	}
	if info.Pid > 0 && pidAlive(info.Pid) {
		waitGone(t, info.Pid, 10*time.Second)
	}
	if got := e.listPods(t, notReady); len(got) != 1 || got[0].Id != web {
		t.Errorf("List NOTREADY after stop: %v", podIDs(got))
	}
	if got := e.listPods(t, ready); len(got) != 1 || got[0].Id != db {
		t.Errorf("List READY after stop: %v", podIDs(got))
	}
	// What CNI and the runtime took is given back at stop; only the
	// namespace file and the record remain.
	if owners := e.ipamOwners(); owners[web] {
		t.Errorf("IP of %s still reserved after stop", short(web))
	}
	requireSettled(t, settleTime, func() []leak {
		leaks := e.findLeaksOf(keepSet([]string{db}), "process", "iptables")
		if ports := bridgePorts(e.bridge); len(ports) != 1 {
			leaks = append(leaks, leak{kind: "veth", what: fmt.Sprintf("bridge ports after stopping one of two pods: %v, want 1", ports)})
		}
		return leaks
	})

	// Stop is idempotent.
	e.stopPod(t, web)

	// Remove deletes the file and the record.
	e.removePod(t, web)
	if _, err := os.Stat(key); !os.IsNotExist(err) {
		t.Errorf("sandbox key after remove: %v, want it gone", err)
	}
	if _, err := e.rt.PodSandboxStatus(rpcCtx(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: web}); code(err) != codes.NotFound {
		t.Errorf("status after remove: %v, want NotFound", err)
	}
	e.removePod(t, web)
	e.stopPod(t, web)
	if got := e.listPods(t, nil); len(got) != 1 || got[0].Id != db {
		t.Errorf("List after removing web: %v", podIDs(got))
	}

	e.stopAndRemove(t, db)
	e.assertNoLeaks(t)

	// Per-phase latency of all three operations is exported.
	metrics := fetchMetrics(t, e.metricsAddr)
	for _, op := range []string{"run", "stop", "remove"} {
		if !strings.Contains(metrics, fmt.Sprintf(`operation="%s"`, op)) || !hasMetricLine(metrics, "podbay_sandbox_phase_duration_seconds", fmt.Sprintf(`operation="%s"`, op)) {
			t.Errorf("metrics: no podbay_sandbox_phase_duration_seconds sample with operation=%q", op)
		}
	}
	if !strings.Contains(metrics, "# TYPE podbay_sandbox_phase_duration_seconds summary") {
		t.Errorf("metrics: podbay_sandbox_phase_duration_seconds is not declared a summary")
	}
}

func fetchMetrics(t *testing.T, addr string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", resp.Status, err)
	}
	return string(body)
}

// hasMetricLine reports whether a sample of metric carries label.
func hasMetricLine(body, metric, label string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, metric) && strings.Contains(line, label) && strings.Contains(line, "phase=") {
			return true
		}
	}
	return false
}

// requireLeakCheckerSees proves the leak checker recognises what live cni
// pods hold, so that its silence elsewhere means something.
func (e *env) requireLeakCheckerSees(t *testing.T, ids ...string) {
	t.Helper()
	kinds := map[string]int{}
	pids := map[int]bool{}
	for _, l := range e.findLeaks(nil) {
		kinds[l.kind]++
		if l.kind == "process" {
			pids[l.pid] = true
		}
	}
	// A pod without a pause process has no process, cgroup or root
	// filesystem of its own; its pinned namespaces are mounts.
	paused := 0
	for _, id := range ids {
		_, info := e.status(t, id)
		if info.Pid <= 0 {
			continue
		}
		paused++
		if !pids[info.Pid] {
			t.Errorf("leak checker control: pause process %d of %s not recognised", info.Pid, short(id))
		}
	}
	for _, k := range []string{"netns", "mount", "veth", "ipam", "cni-cache", "process", "iptables", "cgroup", "storage"} {
		want := len(ids)
		if k == "process" || k == "cgroup" || k == "storage" {
			want = paused
		}
		if kinds[k] < want {
			t.Errorf("leak checker control: %d %s resources seen for %d live pods, want at least %d", kinds[k], k, len(ids), want)
		}
	}
	for _, l := range e.findLeaks(keepSet(ids)) {
		t.Errorf("leak checker control: reported although its pod is live: %s", l)
	}
}

// TestRemoveWithoutStop: RemovePodSandbox of a ready pod stops it first
// (docs/design.md, "RemovePodSandbox", step 2).
func TestRemoveWithoutStop(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start("")
	id := e.runPod(t, e.podConfig("impatient", withPortMapping(int32(freePort(t)), 80)), "")
	_, info := e.status(t, id)
	e.removePod(t, id)
	waitGone(t, info.Pid, 10*time.Second)
	if _, err := os.Stat(e.netnsPath(id)); !os.IsNotExist(err) {
		t.Errorf("sandbox key after remove: %v, want it gone", err)
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("pods left: %v", podIDs(pods))
	}
	e.assertNoLeaks(t)
}
