package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodSandboxMetricsBlockIO: a container that writes 1 MiB with
// O_DIRECT shows it in ListPodSandboxMetrics as cAdvisor's
// container_fs_writes_bytes_total and container_blkio_device_usage_total
// of the device under the image store, read from its cgroup. On cgroup v1
// the kernel counts only I/O that goes through blk-throttle, so the test
// first sets a throttle limit far above the disk's speed in the
// container's own blkio cgroup (removed with it); an operator's node
// counts nothing on v1 without one.
func TestPodSandboxMetricsBlockIO(t *testing.T) {
	if suiteRuntimeType != "oci" {
		t.Skip("the vm suite's shim reports no block I/O")
	}
	e, images := newContainerEnv(t, "busybox")
	pod := e.runTestPod(t, "metrics-io")
	ctr, pid := e.runContainer(t, pod, containerConfig("writer", images.ref("busybox"), ctrCommand("sleep", "1000")))

	var st unix.Stat_t
	if err := unix.Stat(e.storageRoot, &st); err != nil {
		t.Fatal(err)
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	dev := fmt.Sprintf("%d:%d", major, minor)
	if dir, ok := blkioCgroupDir(t, pid); ok {
		limit := []byte(dev + " 1099511627776\n") // 1 TiB/s
		if err := os.WriteFile(filepath.Join(dir, "blkio.throttle.write_bps_device"), limit, 0o644); err != nil {
			t.Skipf("cannot set a blk-throttle limit on %s (the storage's device), so this v1 host counts no block I/O: %v", dev, err)
		}
	}
	if r := e.execSync(t, ctr, 30, "dd", "if=/dev/zero", "of=/io-test", "bs=65536", "count=16", "oflag=direct"); r.ExitCode != 0 {
		t.Fatalf("dd: exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
	}

	wantName := "container_fs_writes_bytes_total"
	var got map[string]uint64
	if err := eventually(30*time.Second, func() error {
		resp, err := e.rt.ListPodSandboxMetrics(rpcCtx(t), &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			return err
		}
		got = map[string]uint64{}
		for _, pm := range resp.GetPodMetrics() {
			for _, cm := range pm.GetContainerMetrics() {
				if cm.ContainerId != ctr {
					continue
				}
				for _, m := range cm.Metrics {
					if strings.HasPrefix(m.Name, "container_fs_") || strings.HasPrefix(m.Name, "container_blkio_") {
						got[m.Name+"{"+strings.Join(m.LabelValues[5:], ",")+"}"] = m.GetValue().GetValue()
					}
				}
			}
		}
		for k, v := range got {
			if strings.HasPrefix(k, wantName+"{") && v >= 1<<20 {
				return nil
			}
		}
		return fmt.Errorf("no %s of 1 MiB or more on device %s after dd", wantName, dev)
	}); err != nil {
		t.Fatalf("%v\nI/O metrics: %v", err, got)
	}
	var usage bool
	for k, v := range got {
		// device label, major, minor, operation
		if strings.HasPrefix(k, "container_blkio_device_usage_total{") && strings.HasSuffix(k, fmt.Sprintf(",%d,%d,Write}", major, minor)) && v >= 1<<20 {
			usage = true
		}
	}
	if !usage {
		t.Errorf("no container_blkio_device_usage_total Write of 1 MiB on %s: %v", dev, got)
	}
	t.Logf("I/O metrics: %v", got)

	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// blkioCgroupDir is the host directory of pid's cgroup v1 blkio cgroup;
// false on a cgroup v2 host (which counts I/O without throttling).
func blkioCgroupDir(t *testing.T, pid int) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("cgroups of pid %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "blkio" {
				return filepath.Join("/sys/fs/cgroup", parts[1], parts[2]), true
			}
		}
	}
	return "", false
}
