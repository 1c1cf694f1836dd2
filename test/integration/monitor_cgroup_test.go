package integration

import (
	"fmt"
	"path"
	"strings"
	"testing"
)

// TestMonitorCgroup: under the cgroupfs driver every monitor (conmon, or
// a vm handler's shim) is in the monitor cgroup, <default_cgroup_parent>/
// conmon, in every hierarchy, v1 and v2: out of the daemon's cgroup, so
// that a service manager stopping podbayd does not take the pods'
// monitors with it. conmon is born there (no move: cgroups.Spawner); the
// daemon's own process stays where it was.
func TestMonitorCgroup(t *testing.T) {
	e, ti := newContainerEnv(t, "busybox")
	if e.systemdCgroup {
		t.Skip("under the systemd driver each monitor has a scope of its own (TestSystemdCgroupDriver)")
	}
	daemonBefore := readHostFile(t, fmt.Sprintf("/proc/%d/cgroup", e.daemonPid()))
	pod := e.runTestPod(t, "monitor")
	id, _ := e.runContainer(t, pod, containerConfig("sleeper", ti.ref("busybox"), ctrCommand("sleep", "3600")))

	want := path.Join(e.cgroupRootDir(), "conmon")
	monitors := append(e.monitorsOf(pod.id), e.monitorsOf(id)...)
	if len(monitors) == 0 {
		t.Fatal("no monitor found")
	}
	for _, pid := range monitors {
		cg := readHostFile(t, fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, line := range strings.Split(strings.TrimSpace(cg), "\n") {
			// hierarchy-ID:controllers:path
			if f := strings.SplitN(line, ":", 3); len(f) != 3 || f[2] != want {
				t.Errorf("monitor %d is not in %s in every hierarchy:\n%s", pid, want, cg)
				break
			}
		}
	}
	if after := readHostFile(t, fmt.Sprintf("/proc/%d/cgroup", e.daemonPid())); after != daemonBefore {
		t.Errorf("the daemon's cgroups changed:\nbefore %s\nafter %s", daemonBefore, after)
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
