package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/store"
	"github.com/podbay/podbay/internal/systemd"
)

// The container RPCs on the fakes, as any user.

func containerConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sleep", "1000"},
		Labels:   map[string]string{"ctr": name},
	}
}

// podWithImage runs a pod and makes image "busybox" present.
func (e *testEnv) podWithImage(t *testing.T, name string) string {
	t.Helper()
	id := e.mustRun(t, podConfig(name))
	if _, err := e.img.ImportFromFiles(context.Background(), "busybox", nil, image.ImageConfig{StopSignal: "SIGINT"}); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *testEnv) create(podID string, cfg *runtimeapi.ContainerConfig) (string, error) {
	resp, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg})
	return resp.GetContainerId(), err
}

func (e *testEnv) mustCreate(t *testing.T, podID string, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id, err := e.create(podID, cfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	return id
}

func (e *testEnv) containerStatus(t *testing.T, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := call(e.srv, "ContainerStatus", e.srv.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	return resp.Status
}

func (e *testEnv) stopContainer(id string) error {
	_, err := call(e.srv, "StopContainer", e.srv.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: id})
	return err
}

func (e *testEnv) removeContainer(id string) error {
	_, err := call(e.srv, "RemoveContainer", e.srv.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: id})
	if err == nil {
		// RemoveContainer finishes in the background; the tests check
		// the settled state (TestRemoveContainerAsync the unsettled one).
		err = e.srv.removals.wait(context.Background(), "")
	}
	return err
}

// waitContainerState polls until container id is in state want.
func (e *testEnv) waitContainerState(t *testing.T, id string, want runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.containerStatus(t, id)
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("container is %v, want %v", st.State, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// assertNoContainers checks that no container is left: none listed, no
// record, no directory, no runtime container, no root filesystem but the
// pods'.
func (e *testEnv) assertNoContainers(t *testing.T) {
	t.Helper()
	list, err := call(e.srv, "ListContainers", e.srv.ListContainers, &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 0 {
		t.Errorf("ListContainers = %v, %v; want none", list, err)
	}
	var n int
	if _, err := e.db.ForEach(containerBucket, func(store.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d container records left", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.cfg.Root, "containers")); len(entries) != 0 {
		t.Errorf("%d container dirs left", len(entries))
	}
	pods, _ := call(e.srv, "ListPodSandbox", e.srv.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{})
	if n := e.rt.count(); n != len(pods.Items) {
		t.Errorf("%d runtime containers for %d pods", n, len(pods.Items))
	}
	if n := e.img.count(); n != len(pods.Items) {
		t.Errorf("%d root filesystems for %d pods", n, len(pods.Items))
	}
}

// lastCreated is the ID of the runtime container made last.
func (e *testEnv) lastCreated() string {
	e.rt.mu.Lock()
	defer e.rt.mu.Unlock()
	for i := len(e.rt.calls) - 1; i >= 0; i-- {
		if id, ok := strings.CutPrefix(e.rt.calls[i], "create "); ok {
			return id
		}
	}
	return ""
}

func TestCreateContainerRefusals(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	stopped := e.podWithImage(t, "stopped")
	if err := e.stopPod(stopped); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(t, pod, containerConfig("taken"))
	mod := func(f func(c *runtimeapi.ContainerConfig)) *runtimeapi.ContainerConfig {
		c := containerConfig("c")
		f(c)
		return c
	}
	for _, tc := range []struct {
		name string
		pod  string
		cfg  *runtimeapi.ContainerConfig
		want codes.Code
	}{
		{"nil config", pod, nil, codes.InvalidArgument},
		{"no metadata", pod, mod(func(c *runtimeapi.ContainerConfig) { c.Metadata = nil }), codes.InvalidArgument},
		{"slash in name", pod, mod(func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "a/b" }), codes.InvalidArgument},
		{"no image", pod, mod(func(c *runtimeapi.ContainerConfig) { c.Image = nil }), codes.InvalidArgument},
		{"absolute log path", pod, mod(func(c *runtimeapi.ContainerConfig) { c.LogPath = "/etc/passwd" }), codes.InvalidArgument},
		{"log path up", pod, mod(func(c *runtimeapi.ContainerConfig) { c.LogPath = "../x.log" }), codes.InvalidArgument},
		{"log path dir", pod, mod(func(c *runtimeapi.ContainerConfig) { c.LogPath = "c/" }), codes.InvalidArgument},
		{"group without user", pod, mod(func(c *runtimeapi.ContainerConfig) {
			c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: &runtimeapi.Int64Value{Value: 5}}}
		}), codes.InvalidArgument},
		{"relative working dir", pod, mod(func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "work" }), codes.InvalidArgument},
		{"program not in the image", pod, mod(func(c *runtimeapi.ContainerConfig) { c.Command = []string{"/nonexistent"} }), codes.InvalidArgument},
		{"no command, none in the image", pod, mod(func(c *runtimeapi.ContainerConfig) { c.Command = nil }), codes.InvalidArgument},
		{"mount over /proc not from a procfs", pod, mod(func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/proc", HostPath: "/dev/null"}}
		}), codes.InvalidArgument},
		{"mount over /dev without a null device", pod, mod(func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/dev", HostPath: t.TempDir()}}
		}), codes.InvalidArgument},
		{"image absent", pod, mod(func(c *runtimeapi.ContainerConfig) { c.Image.Image = "nginx" }), codes.NotFound},
		{"unknown pod", "0123456789abcdef", containerConfig("c"), codes.NotFound},
		{"pod not ready", stopped, containerConfig("c"), codes.FailedPrecondition},
		{"name taken", pod, containerConfig("taken"), codes.AlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.rt.count()
			_, err := e.create(tc.pod, tc.cfg)
			wantStatus(t, "CreateContainer", err, tc.want)
			if e.rt.count() != before {
				t.Errorf("runtime containers %d, was %d", e.rt.count(), before)
			}
		})
	}
}

// A CreateContainer whose step fails leaves no container behind: the
// runtime container is deleted, the root filesystem and directory removed,
// the record deleted, and the name free again.
func TestCreateContainerUndo(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		fps      string
		inject   func(e *testEnv, err error)
		runtimed bool // the runtime container was made and must be deleted
	}{
		{"rootfs", "", func(e *testEnv, err error) { e.img.failOn("createrootfs", err) }, false},
		{"runtime create", "", func(e *testEnv, err error) { e.rt.failOn("create", err) }, true},
		{"after runtime create", "container.create=1*error", func(*testEnv, error) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, tc.fps)
			pod := e.podWithImage(t, "web")
			tc.inject(e, boom)
			if _, err := e.create(pod, containerConfig("c")); err == nil {
				t.Fatal("CreateContainer succeeded with a failing step")
			}
			if tc.runtimed {
				id := e.lastCreated()
				if id == pod || e.rt.called("delete", id) != 1 {
					t.Errorf("runtime container %s made but not deleted (calls %v)", id, e.rt.calls)
				}
			}
			e.assertNoContainers(t)
			tc.inject(e, nil)
			id := e.mustCreate(t, pod, containerConfig("c"))
			if st := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
				t.Errorf("retried container is %v", st.State)
			}
		})
	}
}

// A container through its life: created, started, stopped (with the
// image's stop signal), removed; Stop and Remove of a gone container
// succeed.
func TestContainerLifecycle(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	st := e.containerStatus(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Metadata.Name != "c" || st.Image.Image != "busybox" ||
		st.StartedAt != 0 || st.User.GetLinux() == nil {
		t.Errorf("created: %v", st)
	}
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id[:10]}); err != nil {
		t.Fatal(err)
	}
	st = e.containerStatus(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
		t.Errorf("started: %v", st)
	}
	_, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id})
	wantStatus(t, "second StartContainer", err, codes.FailedPrecondition)

	for i := 0; i < 2; i++ {
		if err := e.stopContainer(id); err != nil {
			t.Fatalf("stop #%d: %v", i, err)
		}
	}
	if n := e.rt.called("stop", id); n != 1 {
		t.Errorf("runtime Stop called %d times, want 1", n)
	}
	st = e.containerStatus(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 || st.Reason != "Error" || st.FinishedAt < st.StartedAt {
		t.Errorf("stopped: %v", st)
	}
	for i := 0; i < 2; i++ {
		if err := e.removeContainer(id); err != nil {
			t.Fatalf("remove #%d: %v", i, err)
		}
	}
	if e.rt.called("delete", id) != 1 {
		t.Errorf("runtime Delete called %d times, want 1", e.rt.called("delete", id))
	}
	_, err = call(e.srv, "ContainerStatus", e.srv.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	wantStatus(t, "ContainerStatus after remove", err, codes.NotFound)
	e.assertNoContainers(t)
}

// Removing a created or running container stops it first.
func TestRemoveContainerStopsIt(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	created := e.mustCreate(t, pod, containerConfig("created"))
	running := e.mustCreate(t, pod, containerConfig("running"))
	e.startFakeContainer(t, running)
	for _, id := range []string{created, running} {
		if err := e.removeContainer(id); err != nil {
			t.Fatal(err)
		}
		if e.rt.called("stop", id) != 1 || e.rt.called("delete", id) != 1 {
			t.Errorf("remove of %s: runtime calls %v", id, e.rt.calls)
		}
	}
	e.assertNoContainers(t)
}

// A failed runtime Start leaves the container exited with the error, as
// containerd reports it.
func TestStartContainerFailure(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	e.rt.failOn("start", errors.New("exec: no such file"))
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil {
		t.Fatal("StartContainer succeeded")
	}
	e.rt.failOn("start", nil)
	st := e.containerStatus(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 128 || st.Reason != "Error" || !strings.Contains(st.Message, "no such file") {
		t.Errorf("after failed start: %v", st)
	}
}

// An exit the runtime reports is recorded, with OOMKilled when the
// cgroup says so.
func TestContainerExitRecorded(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	plain := e.mustCreate(t, pod, containerConfig("plain"))
	oom := e.mustCreate(t, pod, containerConfig("oom"))
	for _, id := range []string{plain, oom} {
		e.startFakeContainer(t, id)
	}
	e.cg.mu.Lock()
	e.cg.oom[e.cfg.DefaultCgroupParent+"/podbay-"+oom] = 1
	e.cg.mu.Unlock()
	for id, reason := range map[string]string{plain: "Error", oom: "OOMKilled"} {
		e.rt.exit(id)
		st := e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED)
		if st.ExitCode != 137 || st.Reason != reason {
			t.Errorf("exit of %s: code %d reason %q, want 137 %q", id, st.ExitCode, st.Reason, reason)
		}
	}
}

// Under the systemd driver a scope's cgroup is gone by the time its exit is
// recorded; a SIGKILL exit is an OOM kill when the pod's cgroup counted one
// since the container started, unless podbay's own stop killed it.
func TestContainerExitOOMFromParentCgroup(t *testing.T) {
	e := newTestEnv(t, "")
	e.srv.cfg.CgroupDriver = systemd.DriverSystemd
	e.srv.cfg.DefaultCgroupParent = "podbay.slice"
	// The cgroup driver is made from the configuration New is given.
	e.srv.cg = newCgroupDriver(Options{Config: e.srv.cfg, Cgroups: e.srv.cgroups, Host: e.srv.host})
	cfg := podConfig("web")
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "kubepods-podweb.slice"}
	pod := e.mustRun(t, cfg)
	if _, err := e.img.ImportFromFiles(context.Background(), "busybox", nil, image.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	parent := "/kubepods.slice/kubepods-podweb.slice"
	setKills := func(n uint64) {
		e.cg.mu.Lock()
		e.cg.oom[parent] = n
		e.cg.mu.Unlock()
	}
	setKills(2) // kills before these containers ran
	ids := map[string]string{}
	for _, name := range []string{"before", "oom", "stopped"} {
		ids[name] = e.mustCreate(t, pod, containerConfig(name))
	}
	e.startFakeContainer(t, ids["before"])
	e.rt.exit(ids["before"]) // SIGKILL, count unchanged
	if st := e.waitContainerState(t, ids["before"], runtimeapi.ContainerState_CONTAINER_EXITED); st.Reason != "Error" {
		t.Errorf("SIGKILL with no new kill in the pod: reason %q, want Error", st.Reason)
	}
	for _, name := range []string{"oom", "stopped"} {
		e.startFakeContainer(t, ids[name])
	}
	setKills(3)
	e.rt.exit(ids["oom"])
	if st := e.waitContainerState(t, ids["oom"], runtimeapi.ContainerState_CONTAINER_EXITED); st.Reason != "OOMKilled" {
		t.Errorf("SIGKILL after the pod counted a kill: reason %q, want OOMKilled", st.Reason)
	}
	if _, err := call(e.srv, "StopContainer", e.srv.StopContainer, &runtimeapi.StopContainerRequest{ContainerId: ids["stopped"]}); err != nil {
		t.Fatal(err)
	}
	if st := e.waitContainerState(t, ids["stopped"], runtimeapi.ContainerState_CONTAINER_EXITED); st.Reason == "OOMKilled" {
		t.Errorf("container stopped by podbay: reason %q", st.Reason)
	}
}

// Every RPC that names a container answers NotFound for an unknown one and
// InvalidArgument for an empty ID, except Stop and Remove, for which an
// unknown container is already stopped and removed (CRI spec).
func TestContainerRPCsUnknownAndEmptyID(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	e.mustCreate(t, pod, containerConfig("other"))
	rpcs := map[string]func(id string) error{
		"ContainerStatus": func(id string) error {
			_, err := call(e.srv, "ContainerStatus", e.srv.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		},
		"StartContainer": func(id string) error {
			_, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		},
		"UpdateContainerResources": func(id string) error {
			_, err := call(e.srv, "UpdateContainerResources", e.srv.UpdateContainerResources, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id})
			return err
		},
		"ReopenContainerLog": func(id string) error {
			_, err := call(e.srv, "ReopenContainerLog", e.srv.ReopenContainerLog, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
			return err
		},
		"ExecSync": func(id string) error {
			_, err := call(e.srv, "ExecSync", e.srv.ExecSync, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
			return err
		},
		"Exec": func(id string) error {
			_, err := call(e.srv, "Exec", e.srv.Exec, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
			return err
		},
		"Attach": func(id string) error {
			_, err := call(e.srv, "Attach", e.srv.Attach, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true})
			return err
		},
		"ContainerStats": func(id string) error {
			_, err := call(e.srv, "ContainerStats", e.srv.ContainerStats, &runtimeapi.ContainerStatsRequest{ContainerId: id})
			return err
		},
		"StopContainer":   e.stopContainer,
		"RemoveContainer": e.removeContainer,
	}
	for name, rpc := range rpcs {
		t.Run(name, func(t *testing.T) {
			want := codes.NotFound
			if name == "StopContainer" || name == "RemoveContainer" {
				want = codes.OK
			}
			wantStatus(t, "unknown container", rpc("0123456789abcdef"), want)
			wantStatus(t, "empty container ID", rpc(""), codes.InvalidArgument)
		})
	}
}

func TestListContainers(t *testing.T) {
	e := newTestEnv(t, "")
	web := e.podWithImage(t, "web")
	db := e.podWithImage(t, "db")
	a := e.mustCreate(t, web, containerConfig("a"))
	b := e.mustCreate(t, web, containerConfig("b"))
	c := e.mustCreate(t, db, containerConfig("c"))
	e.startFakeContainer(t, b)
	running := &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"all", nil, []string{a, b, c}},
		{"by id prefix", &runtimeapi.ContainerFilter{Id: a[:10]}, []string{a}},
		{"by pod", &runtimeapi.ContainerFilter{PodSandboxId: web}, []string{a, b}},
		{"by pod prefix", &runtimeapi.ContainerFilter{PodSandboxId: db[:10]}, []string{c}},
		{"running", &runtimeapi.ContainerFilter{State: running}, []string{b}},
		{"label", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"ctr": "c"}}, []string{c}},
		{"pod and label mismatch", &runtimeapi.ContainerFilter{PodSandboxId: web, LabelSelector: map[string]string{"ctr": "c"}}, nil},
		{"unknown id", &runtimeapi.ContainerFilter{Id: "0123456789abcdef"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := call(e.srv, "ListContainers", e.srv.ListContainers, &runtimeapi.ListContainersRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range resp.Containers {
				got = append(got, c.Id)
			}
			if !sameSet(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContainerStatusVerbose(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	logDir := filepath.Join(t.TempDir(), "pods", "web")
	cfg := containerConfig("c")
	cfg.LogPath = "c/0.log"
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true}}
	sbCfg := podConfig("web")
	sbCfg.LogDirectory = logDir
	resp, err := call(e.srv, "CreateContainer", e.srv.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	st, err := call(e.srv, "ContainerStatus", e.srv.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.LogPath != filepath.Join(logDir, "c/0.log") || len(st.Status.Mounts) != 1 || !st.Status.Mounts[0].Readonly ||
		!strings.HasPrefix(st.Status.ImageRef, "sha256:") {
		t.Errorf("status %v", st.Status)
	}
	var info struct {
		Pid         int             `json:"pid"`
		SandboxID   string          `json:"sandboxID"`
		RuntimeSpec json.RawMessage `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		t.Fatal(err)
	}
	if info.Pid != 4242 || info.SandboxID != pod || len(info.RuntimeSpec) == 0 {
		t.Errorf("verbose info %s", st.Info["info"])
	}
}

func TestUpdateContainerResources(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	update := func(linux *runtimeapi.LinuxContainerResources) error {
		_, err := call(e.srv, "UpdateContainerResources", e.srv.UpdateContainerResources,
			&runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: linux})
		return err
	}
	if err := update(nil); err != nil || e.rt.called("update", id) != 0 {
		t.Errorf("update without resources: %v, runtime calls %v", err, e.rt.calls)
	}
	if err := update(&runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 1 << 26}); err != nil {
		t.Fatal(err)
	}
	e.rt.mu.Lock()
	res := e.rt.updates[id]
	e.rt.mu.Unlock()
	if res == nil || res.Memory == nil || *res.Memory.Limit != 1<<26 || res.CPU == nil || *res.CPU.Shares != 512 {
		t.Errorf("runtime got resources %+v", res)
	}
	e.rt.failOn("update", errors.New("cgroup write failed"))
	if err := update(&runtimeapi.LinuxContainerResources{CpuShares: 256}); err == nil {
		t.Error("update succeeded while the runtime failed")
	}
	e.rt.failOn("update", nil)
	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "update of an exited container", update(&runtimeapi.LinuxContainerResources{CpuShares: 256}), codes.FailedPrecondition)
}

func TestReopenContainerLog(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	reopen := func() error {
		_, err := call(e.srv, "ReopenContainerLog", e.srv.ReopenContainerLog, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
		return err
	}
	wantStatus(t, "reopen in a created container", reopen(), codes.FailedPrecondition)
	e.startFakeContainer(t, id)
	if err := reopen(); err != nil || e.rt.called("reopenlog", id) != 1 {
		t.Errorf("reopen: %v, runtime calls %v", err, e.rt.calls)
	}
	e.rt.failOn("reopenlog", errors.New("conmon gone"))
	if err := reopen(); err == nil {
		t.Error("reopen succeeded while the runtime failed")
	}
}

func TestExecSync(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	execSync := func(req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
		return call(e.srv, "ExecSync", e.srv.ExecSync, req)
	}
	_, err := execSync(&runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
	wantStatus(t, "ExecSync in a created container", err, codes.FailedPrecondition)
	e.startFakeContainer(t, id)
	for _, tc := range []struct {
		name string
		req  *runtimeapi.ExecSyncRequest
	}{
		{"no command", &runtimeapi.ExecSyncRequest{ContainerId: id}},
		{"negative timeout", &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: -1}},
		{"empty program name", &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"", "x"}}},
		{"NUL in an arg", &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"echo", "a\x00b"}}},
	} {
		_, err := execSync(tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument)
	}
	resp, err := execSync(&runtimeapi.ExecSyncRequest{ContainerId: id[:10], Cmd: []string{"true"}})
	if err != nil || string(resp.Stdout) != "ok\n" || resp.ExitCode != 0 {
		t.Errorf("ExecSync: %v, %v", resp, err)
	}
	e.rt.mu.Lock()
	e.rt.execResult = &runtime.ExecResult{Stdout: []byte("partial"), ExitCode: -1, TimedOut: true}
	e.rt.mu.Unlock()
	resp, err = execSync(&runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "9"}, Timeout: 2})
	if err != nil || resp.ExitCode != -1 || string(resp.Stderr) != "command timed out after 2s\n" {
		t.Errorf("timed out ExecSync: %v, %v", resp, err)
	}
	e.rt.failOn("execsync", errors.New("runtime exec failed"))
	if _, err := execSync(&runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}}); err == nil {
		t.Error("ExecSync succeeded while the runtime failed")
	}
}

func TestAttachRefusals(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	e.startFakeContainer(t, id)
	for _, tc := range []struct {
		name string
		req  *runtimeapi.AttachRequest
	}{
		{"no stream", &runtimeapi.AttachRequest{ContainerId: id}},
		{"tty and stderr", &runtimeapi.AttachRequest{ContainerId: id, Tty: true, Stdout: true, Stderr: true}},
	} {
		_, err := call(e.srv, "Attach", e.srv.Attach, tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument)
	}
}

// A running container's statistics come from its cgroup, with a CPU rate
// from the second sample on; an exited one reports attributes and its
// writable layer only.
func TestContainerStats(t *testing.T) {
	e := newTestEnv(t, "")
	web := e.podWithImage(t, "web")
	db := e.podWithImage(t, "db")
	id := e.mustCreate(t, web, containerConfig("c"))
	other := e.mustCreate(t, db, containerConfig("other"))
	e.startFakeContainer(t, id)
	cgroup := e.cfg.DefaultCgroupParent + "/podbay-" + id
	stats := func() *runtimeapi.ContainerStats {
		t.Helper()
		resp, err := call(e.srv, "ContainerStats", e.srv.ContainerStats, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Stats
	}
	if st := stats(); st.Cpu != nil || st.WritableLayer == nil {
		t.Errorf("stats without a cgroup: %v", st)
	}
	e.cg.set(cgroup, 1e9, 1<<20)
	st := stats()
	if st.Attributes.Id != id || st.Cpu.UsageCoreNanoSeconds.Value != 1e9 || st.Cpu.UsageNanoCores.Value != 0 ||
		st.Memory.WorkingSetBytes.Value != 1<<20 || st.WritableLayer.UsedBytes.Value != 4096 {
		t.Errorf("first sample: %v", st)
	}
	e.cg.mu.Lock()
	e.cg.stats[cgroup].Timestamp = e.cg.stats[cgroup].Timestamp.Add(time.Second)
	e.cg.stats[cgroup].CPU.UsageNanos = 1.5e9
	e.cg.mu.Unlock()
	if st := stats(); st.Cpu.UsageNanoCores.Value != 5e8 {
		t.Errorf("CPU rate %d nanocores, want 5e8", st.Cpu.UsageNanoCores.Value)
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"all", nil, []string{id, other}},
		{"by id prefix", &runtimeapi.ContainerStatsFilter{Id: id[:10]}, []string{id}},
		{"by pod", &runtimeapi.ContainerStatsFilter{PodSandboxId: db}, []string{other}},
		{"label", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"ctr": "c"}}, []string{id}},
	} {
		resp, err := call(e.srv, "ListContainerStats", e.srv.ListContainerStats, &runtimeapi.ListContainerStatsRequest{Filter: tc.filter})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range resp.Stats {
			got = append(got, s.Attributes.Id)
		}
		if !sameSet(got, tc.want) {
			t.Errorf("ListContainerStats %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	if st := stats(); st.Cpu != nil || st.Memory != nil || st.WritableLayer == nil {
		t.Errorf("stats of an exited container: %v", st)
	}
}

// Removing a pod removes its containers, running or not.
func TestRemovePodSandboxRemovesContainers(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	created := e.mustCreate(t, pod, containerConfig("created"))
	running := e.mustCreate(t, pod, containerConfig("running"))
	e.startFakeContainer(t, running)
	if err := e.stopPod(pod); err != nil {
		t.Fatal(err)
	}
	if st := e.containerStatus(t, running); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("container in a stopped pod is %v", st.State)
	}
	if err := e.removePod(pod); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{created, running} {
		if e.rt.called("delete", id) != 1 {
			t.Errorf("container %s not deleted in the runtime", id)
		}
	}
	e.assertNoContainers(t)
	e.assertNothingHeld(t)
}

// At a restart, a running container keeps running; one that exited while
// the daemon was down is recorded exited; one the runtime no longer knows
// (a reboot) is exited with code 255.
func TestRecoverContainers(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	keep := e.mustCreate(t, pod, containerConfig("keep"))
	exited := e.mustCreate(t, pod, containerConfig("exited"))
	lost := e.mustCreate(t, pod, containerConfig("lost"))
	for _, id := range []string{keep, exited, lost} {
		e.startFakeContainer(t, id)
	}
	e.srv.Shutdown(context.Background())
	e.rt.exit(exited)
	e.rt.mu.Lock()
	delete(e.rt.containers, lost)
	e.rt.mu.Unlock()
	e.srv = e.newServer(t, nil)

	if st := e.containerStatus(t, keep); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("running container is %v after restart", st.State)
	}
	if st := e.containerStatus(t, exited); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 {
		t.Errorf("container that exited while down: %v", st)
	}
	if st := e.containerStatus(t, lost); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 255 || st.Message == "" {
		t.Errorf("container lost at reboot: %v", st)
	}
	// The one still running is watched again.
	e.rt.exit(keep)
	e.waitContainerState(t, keep, runtimeapi.ContainerState_CONTAINER_EXITED)
}

// A container record a crash left in state creating, or removing, is
// finished at the next start: nothing of it is left.
func TestRecoverUnfinishedContainers(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *container.Record)
	}{
		{"creating", func(r *container.Record) { r.State = container.StateCreating }},
		{"removing", func(r *container.Record) { r.Removing = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, "")
			pod := e.podWithImage(t, "web")
			id := e.mustCreate(t, pod, containerConfig("c"))
			e.startFakeContainer(t, id)
			var rec container.Record
			if _, err := e.db.Get(containerBucket, id, &rec); err != nil {
				t.Fatal(err)
			}
			tc.edit(&rec)
			if err := e.db.Put(containerBucket, id, container.RecordVersion, rec); err != nil {
				t.Fatal(err)
			}
			e.srv.Shutdown(context.Background())
			e.srv = e.newServer(t, nil)
			if e.rt.called("delete", id) != 1 {
				t.Errorf("runtime container not deleted: %v", e.rt.calls)
			}
			e.assertNoContainers(t)
		})
	}
}

// Without a streaming server, the streaming RPCs are Unavailable.
func TestStreamingRPCsWithoutStreamingServer(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("c"))
	e.startFakeContainer(t, id)
	e.srv.Shutdown(context.Background())
	srv, err := New(Options{Config: e.cfg, DB: e.db, Network: e.net, NetNS: e.ns, Runtimes: map[string]runtime.Runtime{"runc": e.rt}, Images: e.img})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-srv.Recovered()
	e.srv = srv
	_, err = call(srv, "Exec", srv.Exec, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Stdout: true})
	wantStatus(t, "Exec", err, codes.Unavailable)
	_, err = call(srv, "Attach", srv.Attach, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true})
	wantStatus(t, "Attach", err, codes.Unavailable)
	_, err = call(srv, "PortForward", srv.PortForward, &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{80}})
	wantStatus(t, "PortForward", err, codes.Unavailable)
}
