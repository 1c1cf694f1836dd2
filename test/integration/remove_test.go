package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRemoveMeansGone: when RemoveContainer or RemovePodSandbox returns,
// the monitors of what was removed (conmon, or the pod's shim) have
// exited; nothing of the pod runs on. Checked at once, not polled: the
// kubelet, or an operator's script, may check the node right after.
func TestRemoveMeansGone(t *testing.T) {
	e, ti := newContainerEnv(t, "busybox")
	sleeper := containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "3600"))

	// RemoveContainer of a running container.
	pod := e.runTestPod(t, "gone")
	id, pid := e.runContainer(t, pod, sleeper)
	gone := []int{pid}
	if suiteRuntimeType == "oci" {
		// A vm handler's monitor is the pod's shim, which stays.
		gone = append(gone, e.monitorsOf(id)...)
	}
	if len(gone) < 2 && suiteRuntimeType == "oci" {
		t.Fatalf("container %s has no monitor to check", short(id))
	}
	e.removeContainer(t, id)
	requireExited(t, "after RemoveContainer, process of "+short(id), gone)

	// RemovePodSandbox of a ready pod with a running container: no Stop
	// before it.
	id, pid = e.runContainer(t, pod, containerConfig("sleeper2", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	_, info := e.status(t, pod.id)
	gone = append(append([]int{pid, info.Pid}, e.monitorsOf(id)...), e.monitorsOf(pod.id)...)
	if len(gone) < 3 {
		t.Fatalf("pod %s: no monitor to check (%v)", short(pod.id), gone)
	}
	if _, err := e.rt.RemovePodSandbox(rpcCtx(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	requireExited(t, "after RemovePodSandbox, process or monitor", gone)

	// As the kubelet does it: StopPodSandbox first, then remove.
	pod = e.runTestPod(t, "gone-stopped")
	id, pid = e.runContainer(t, pod, sleeper)
	_, info = e.status(t, pod.id)
	gone = append(append([]int{pid, info.Pid}, e.monitorsOf(id)...), e.monitorsOf(pod.id)...)
	e.stopPod(t, pod.id)
	e.removePod(t, pod.id)
	requireExited(t, "after StopPodSandbox and RemovePodSandbox, process or monitor", gone)
	e.assertNoLeaks(t)
}

// requireExited fails unless every pid has exited (a zombie has: only its
// parent's reaping is left).
func requireExited(t *testing.T, what string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " Z") {
			continue
		}
		t.Errorf("%s: pid %d still running: %s", what, pid, s)
	}
}
