package integration

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodSandboxMetrics: ListMetricDescriptors describes every metric
// ListPodSandboxMetrics sends (the kubelet drops the others), and a pod
// with a busy container reports CPU, memory, processes and the network
// traffic of its eth0 — in the oci suite from host cgroups and /proc, in
// the vm suite (PODBAY_TEST_RUNTIME_TYPE=vm) from the shim.
func TestPodSandboxMetrics(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "metrics")
	idle := e.runTestPod(t, "metrics-idle")
	// Two background processes, 4 MB held in a shell variable, then a
	// short busy loop.
	busy := `sleep 1000 & sleep 1000 & x=$(head -c 4000000 /dev/zero | tr '\0' a); ` +
		`i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; wait`
	worker, _ := e.runContainer(t, pod, containerConfig("worker", ref, ctrShell(busy)))

	dresp, err := e.rt.ListMetricDescriptors(rpcCtx(t), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatalf("ListMetricDescriptors: %v", err)
	}
	descs := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range dresp.GetDescriptors() {
		if _, dup := descs[d.Name]; dup || d.Help == "" || len(d.LabelKeys) == 0 {
			t.Errorf("descriptor %v: duplicate, or no help or labels", d)
		}
		descs[d.Name] = d
	}
	if len(descs) == 0 {
		t.Fatal("ListMetricDescriptors: no descriptors")
	}

	// The gateway answers a ping from the pod: eth0 counts the bytes.
	_, info := e.status(t, pod.id)
	gw := info.NetworkSettings.Gateway
	if err := eventually(10*time.Second, func() error {
		if r := e.execSync(t, worker, 10, "ping", "-c2", "-W2", gw); r.ExitCode != 0 {
			return fmt.Errorf("exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
		}
		return nil
	}); err != nil {
		t.Fatalf("ping the gateway %s: %v", gw, err)
	}

	type sample struct {
		pod, ctr map[string]uint64
		ctrs     []string
	}
	// values keys a metric by name and its own labels, and checks that
	// the kubelet can turn it into a Prometheus sample.
	values := func(ms []*runtimeapi.Metric, container, id string) map[string]uint64 {
		out := map[string]uint64{}
		for _, m := range ms {
			d := descs[m.Name]
			switch {
			case d == nil:
				t.Errorf("metric %s has no descriptor", m.Name)
				continue
			case len(m.LabelValues) != len(d.LabelKeys):
				t.Errorf("metric %s: labels %v for keys %v", m.Name, m.LabelValues, d.LabelKeys)
				continue
			case m.Timestamp <= 0 || m.Value == nil:
				t.Errorf("metric %s: timestamp %d value %v", m.Name, m.Timestamp, m.Value)
			}
			labels := map[string]string{}
			for i, k := range d.LabelKeys {
				labels[k] = m.LabelValues[i]
			}
			if labels["pod"] != "metrics" || labels["container"] != container || labels["id"] != id {
				t.Errorf("metric %s labels %v, want pod metrics, container %q, id %s", m.Name, labels, container, short(id))
			}
			key := m.Name
			if extra := m.LabelValues[5:]; len(extra) > 0 {
				key += "{" + strings.Join(extra, ",") + "}"
			}
			out[key] = m.GetValue().GetValue()
		}
		return out
	}
	read := func() sample {
		resp, err := e.rt.ListPodSandboxMetrics(rpcCtx(t), &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatalf("ListPodSandboxMetrics: %v", err)
		}
		var s sample
		var pods []string
		for _, pm := range resp.GetPodMetrics() {
			pods = append(pods, pm.PodSandboxId)
			if pm.PodSandboxId != pod.id {
				continue
			}
			s.pod = values(pm.Metrics, "", pod.id)
			for _, cm := range pm.ContainerMetrics {
				s.ctrs = append(s.ctrs, cm.ContainerId)
				if cm.ContainerId == worker {
					s.ctr = values(cm.Metrics, "worker", worker)
				}
			}
		}
		slices.Sort(pods)
		want := []string{pod.id, idle.id}
		slices.Sort(want)
		if !slices.Equal(pods, want) {
			t.Errorf("ListPodSandboxMetrics pods %v, want %v", pods, want)
		}
		return s
	}

	var s sample
	if err := eventually(30*time.Second, func() error {
		s = read()
		switch {
		case !slices.Equal(s.ctrs, []string{worker}):
			return fmt.Errorf("containers %v, want [%s]", s.ctrs, short(worker))
		case s.ctr["container_memory_working_set_bytes"] < 4000000:
			return fmt.Errorf("working set %d, want the 4 MB the shell holds", s.ctr["container_memory_working_set_bytes"])
		case s.ctr["container_processes"] < 3:
			return fmt.Errorf("container_processes %d, want sh and two sleeps", s.ctr["container_processes"])
		case s.pod["container_network_receive_bytes_total{eth0}"] == 0 || s.pod["container_network_transmit_packets_total{eth0}"] < 2:
			return fmt.Errorf("eth0 rx %d bytes, tx %d packets after a ping", s.pod["container_network_receive_bytes_total{eth0}"],
				s.pod["container_network_transmit_packets_total{eth0}"])
		}
		return nil
	}); err != nil {
		t.Fatalf("ListPodSandboxMetrics: %v\ncontainer %v\npod %v", err, s.ctr, s.pod)
	}
	t.Logf("%s suite: container metrics %v\npod metrics %v", suiteRuntimeType, s.ctr, s.pod)
	for _, k := range []string{
		"container_cpu_usage_seconds_total{total}", "container_cpu_user_seconds_total", "container_memory_usage_bytes",
		"container_memory_rss", "container_memory_cache", "container_threads", "container_oom_events_total",
		"container_last_seen", "container_start_time_seconds", "container_fs_usage_bytes{" + e.storageRoot + "}",
	} {
		if _, ok := s.ctr[k]; !ok {
			t.Errorf("container metric %s missing", k)
		}
	}
	// CPU time is sent in whole seconds (the CRI has integers only): the
	// loop is too short to show there, the nanosecond counter is not.
	cs, err := e.rt.ContainerStats(rpcCtx(t), &runtimeapi.ContainerStatsRequest{ContainerId: worker})
	if err != nil || cs.GetStats().GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Errorf("ContainerStats cpu %v, err %v: want usage", cs.GetStats().GetCpu(), err)
	}
	if now := uint64(time.Now().Unix()); s.ctr["container_last_seen"] > now || s.ctr["container_last_seen"] < now-60 {
		t.Errorf("container_last_seen %d, now %d", s.ctr["container_last_seen"], now)
	}
	if s.pod["container_memory_usage_bytes"] < s.ctr["container_memory_usage_bytes"] {
		t.Errorf("pod memory %d below its container's %d", s.pod["container_memory_usage_bytes"], s.ctr["container_memory_usage_bytes"])
	}
	if suiteRuntimeType == "oci" {
		// Host processes: their descriptors are counted (sh's stdio at
		// least).
		if s.ctr["container_file_descriptors"] < 3 {
			t.Errorf("container_file_descriptors %d, want sh's stdio at least", s.ctr["container_file_descriptors"])
		}
	}
	// The vm suite's shim reads the host's cgroups too, but sends PSI
	// only from a v2 host.
	if _, ok := s.ctr["container_pressure_cpu_waiting_seconds_total"]; !ok && suiteRuntimeType == "oci" && cgroupPSI() {
		t.Errorf("no container_pressure_* on a host with PSI: %v", s.ctr)
	}

	// Burn over a second of CPU (5 s of wall time on a shared host): the
	// seconds counter moves.
	e.execOutput(t, worker, "sh", "-c", `end=$(($(date +%s)+5)); while [ $(date +%s) -lt $end ]; do :; done`)
	if err := eventually(10*time.Second, func() error {
		if v := read().ctr["container_cpu_usage_seconds_total{total}"]; v < 1 {
			return fmt.Errorf("container_cpu_usage_seconds_total %d after 2 s of busy loop", v)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	e.stopAndRemove(t, pod.id, idle.id)
	if resp, err := e.rt.ListPodSandboxMetrics(rpcCtx(t), &runtimeapi.ListPodSandboxMetricsRequest{}); err != nil || len(resp.GetPodMetrics()) != 0 {
		t.Errorf("ListPodSandboxMetrics after removal: %v, %v", resp.GetPodMetrics(), err)
	}
	e.assertNoLeaks(t)
}

// cgroupPSI reports whether this host's cgroups have pressure files: PSI
// in the kernel, and a cgroup2 hierarchy (unified, or hybrid at
// /sys/fs/cgroup/unified).
func cgroupPSI() bool {
	if _, err := os.ReadFile("/proc/pressure/cpu"); err != nil {
		return false
	}
	for _, p := range []string{"/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/unified/cgroup.controllers"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
