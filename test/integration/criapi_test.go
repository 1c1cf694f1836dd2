package integration

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIAPIStopSignal: ContainerConfig.stop_signal overrides the image's
// stop signal; StopContainer sends it, ContainerStatus reports it.
func TestCRIAPIStopSignal(t *testing.T) {
	e, images := newContainerEnv(t, "busybox", "config")
	pod := e.runTestPod(t, "stopsig")
	const trap = "trap 'echo got USR1; exit 3' USR1; trap 'echo got INT; exit 5' INT; trap 'echo got TERM; exit 4' TERM; echo ready; while true; do sleep 0.1; done"
	for _, tc := range []struct {
		name, image string
		sig         runtimeapi.Signal
		report      runtimeapi.Signal
		exit        int32
	}{
		// busybox declares no stop signal: the config's SIGUSR1.
		{"usr1", "busybox", runtimeapi.Signal_SIGNAL_SIGUSR1, runtimeapi.Signal_SIGNAL_SIGUSR1, 3},
		// The config image declares SIGUSR1; the config's SIGINT wins.
		{"int-over-image", "config", runtimeapi.Signal_SIGNAL_SIGINT, runtimeapi.Signal_SIGNAL_SIGINT, 5},
		// No config signal: the image's SIGUSR1, reported as such.
		{"image", "config", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, runtimeapi.Signal_SIGNAL_SIGUSR1, 3},
		// Neither: SIGTERM.
		{"default", "busybox", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, runtimeapi.Signal_SIGNAL_SIGTERM, 4},
	} {
		cfg := containerConfig("stop-"+tc.name, images.ref(tc.image), ctrShell(trap))
		cfg.StopSignal = tc.sig
		id, _ := e.runContainer(t, pod, cfg)
		st, _ := e.containerStatus(t, id)
		if st.StopSignal != tc.report {
			t.Errorf("%s: ContainerStatus.stop_signal = %s, want %s", tc.name, st.StopSignal, tc.report)
		}
		waitLogLine(t, st.LogPath, "stdout", "ready", 10*time.Second)
		e.stopContainer(t, id, 20)
		st = e.waitContainerState(t, id, runtimeapi.ContainerState_CONTAINER_EXITED, containerExitTimeout)
		if st.ExitCode != tc.exit {
			t.Errorf("%s: stopped with exit code %d, want %d (trap of %s)\n%s", tc.name, st.ExitCode, tc.exit, tc.report, e.containerLogTail(st))
		}
		if st.StopSignal != tc.report {
			t.Errorf("%s: exited ContainerStatus.stop_signal = %s, want %s", tc.name, st.StopSignal, tc.report)
		}
		e.removeContainer(t, id)
	}

	// An enum value outside the API is refused before anything is made.
	bad := containerConfig("stop-bad", images.ref("busybox"), ctrShell(trap))
	bad.StopSignal = runtimeapi.Signal(999)
	if _, err := e.tryCreateContainer(rpcCtx(t), pod, bad); code(err) != codes.InvalidArgument {
		t.Errorf("CreateContainer with stop_signal 999: %v, want InvalidArgument", err)
	}
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// TestCRIAPIImageIDs: the image's ID is one value everywhere the newest
// API text says so (PullImageResponse.image_ref, Image.id,
// Container.image_id, ContainerStatus.image_id, ImageSpec.image_ref), and
// an environment value arrives as bytes.
func TestCRIAPIImageIDs(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	pulled := images.ids["busybox"]
	pod := e.runTestPod(t, "imageids")
	cfg := containerConfig("ids", images.ref("busybox"), ctrShell("echo \"v=$BYTES\"; sleep 1000"), ctrEnv("BYTES", "é=ü"))
	id, _ := e.runContainer(t, pod, cfg)

	st, _ := e.containerStatus(t, id)
	if st.ImageId != pulled || st.GetImage().GetImageRef() != pulled {
		t.Errorf("ContainerStatus: image_id %q image.image_ref %q, want the pulled %q", st.ImageId, st.GetImage().GetImageRef(), pulled)
	}
	waitLogLine(t, st.LogPath, "stdout", "v=é=ü", 10*time.Second)
	cs := e.listContainers(t, &runtimeapi.ContainerFilter{Id: id})
	if len(cs) != 1 || cs[0].ImageId != pulled || cs[0].GetImage().GetImageRef() != pulled {
		t.Errorf("ListContainers: %v, want image_id and image.image_ref %q", cs, pulled)
	}
	is, err := e.img.ImageStatus(rpcCtx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: images.ref("busybox")}})
	if err != nil || is.GetImage().GetId() != pulled {
		t.Errorf("ImageStatus: %v %v, want id %q", is, err, pulled)
	}
	// An environment value that is not UTF-8 cannot reach the OCI config.
	bad := containerConfig("env-bytes", images.ref("busybox"), ctrShell("true"))
	bad.Envs = []*runtimeapi.KeyValue{{Key: "B", Value: []byte{0xff, 0xfe}}}
	if _, err := e.tryCreateContainer(rpcCtx(t), pod, bad); code(err) != codes.InvalidArgument {
		t.Errorf("CreateContainer with a non-UTF-8 env value: %v, want InvalidArgument", err)
	}
	e.removeContainer(t, id)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}

// recvAll reads a list stream to its end; every response must hold at
// least one item.
func recvAll[R any, T any](t *testing.T, name string, recv func() (R, error), items func(R) []T) ([]T, error) {
	t.Helper()
	var out []T
	for {
		r, err := recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		its := items(r)
		if len(its) == 0 {
			t.Errorf("%s: a response with no items", name)
		}
		out = append(out, its...)
	}
}

func sortedIDs[T any](items []T, id func(T) string) []string {
	var ids []string
	for _, it := range items {
		ids = append(ids, id(it))
	}
	slices.Sort(ids)
	return ids
}

// TestCRIAPIListStreaming: the KEP-5825 Stream* RPCs return exactly what
// their List* return, filters included.
func TestCRIAPIListStreaming(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ctx := rpcCtx(t)
	pod1 := e.runTestPod(t, "lsa")
	pod2 := e.runTestPod(t, "lsb")
	var ctrs []string
	for i, p := range []testPod{pod1, pod1, pod2} {
		id, _ := e.runContainer(t, p, containerConfig(fmt.Sprintf("c%d", i), images.ref("busybox"), ctrCommand("sleep", "1000")))
		ctrs = append(ctrs, id)
	}

	sbStream, err := e.rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sbs, err := recvAll(t, "StreamPodSandboxes", sbStream.Recv, (*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes)
	if err != nil {
		t.Fatalf("StreamPodSandboxes: %v", err)
	}
	list, err := e.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	podID := (*runtimeapi.PodSandbox).GetId
	if got, want := sortedIDs(sbs, podID), sortedIDs(list.Items, podID); !slices.Equal(got, want) || len(got) != 2 {
		t.Errorf("StreamPodSandboxes %v, ListPodSandbox %v (want the 2 pods)", got, want)
	}

	cStream, err := e.rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod1.id}})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := recvAll(t, "StreamContainers", cStream.Recv, (*runtimeapi.StreamContainersResponse).GetContainers)
	ctrID := (*runtimeapi.Container).GetId
	if want := sortedIDs(ctrs[:2], func(s string) string { return s }); err != nil || !slices.Equal(sortedIDs(cs, ctrID), want) {
		t.Errorf("StreamContainers of pod 1: %v %v, want %v", sortedIDs(cs, ctrID), err, want)
	}

	csStream, err := e.rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stats, err := recvAll(t, "StreamContainerStats", csStream.Recv, (*runtimeapi.StreamContainerStatsResponse).GetContainerStats)
	statID := func(s *runtimeapi.ContainerStats) string { return s.GetAttributes().GetId() }
	if want := sortedIDs(ctrs, func(s string) string { return s }); err != nil || !slices.Equal(sortedIDs(stats, statID), want) {
		t.Errorf("StreamContainerStats: %v %v, want %v", sortedIDs(stats, statID), err, want)
	}

	psStream, err := e.rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: pod2.id}})
	if err != nil {
		t.Fatal(err)
	}
	pstats, err := recvAll(t, "StreamPodSandboxStats", psStream.Recv, (*runtimeapi.StreamPodSandboxStatsResponse).GetPodSandboxStats)
	if err != nil || len(pstats) != 1 || pstats[0].GetAttributes().GetId() != pod2.id {
		t.Errorf("StreamPodSandboxStats of pod 2: %v %v", pstats, err)
	}

	iStream, err := e.img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := recvAll(t, "StreamImages", iStream.Recv, (*runtimeapi.StreamImagesResponse).GetImages)
	ilist, lerr := e.img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	imgID := (*runtimeapi.Image).GetId
	if err != nil || lerr != nil || !slices.Equal(sortedIDs(imgs, imgID), sortedIDs(ilist.GetImages(), imgID)) || !slices.Contains(sortedIDs(imgs, imgID), images.ids["busybox"]) {
		t.Errorf("StreamImages %v (%v), ListImages %v (%v)", sortedIDs(imgs, imgID), err, sortedIDs(ilist.GetImages(), imgID), lerr)
	}

	// A filter naming nothing: the stream ends with no response.
	none, err := e.rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "nonexistent"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := none.Recv(); err != io.EOF {
		t.Errorf("StreamContainers of no container: %v %v, want EOF", r, err)
	}

	// StreamPodSandboxMetrics answers as ListPodSandboxMetrics does.
	_, lerr = e.rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	mStream, err := e.rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
	if err == nil {
		_, err = recvAll(t, "StreamPodSandboxMetrics", mStream.Recv, (*runtimeapi.StreamPodSandboxMetricsResponse).GetPodSandboxMetrics)
	}
	if code(err) != code(lerr) {
		t.Errorf("StreamPodSandboxMetrics: %v; ListPodSandboxMetrics: %v", err, lerr)
	}

	// The pod checkpoint RPCs of cri-api v0.37 answer (TestCheckpointPod
	// covers them): a restore without a pod config is refused.
	if _, err := e.rt.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: t.TempDir()}); code(err) != codes.InvalidArgument {
		t.Errorf("RestorePod: %v, want InvalidArgument", err)
	}

	for _, id := range ctrs {
		e.removeContainer(t, id)
	}
	e.stopAndRemove(t, pod1.id, pod2.id)
	e.assertNoLeaks(t)
}

// TestCRIAPIMountOptions: Mount.mount_options reach the bind mount
// (noexec stops a program on it), ContainerStatus reports them, an
// option podbay does not take is refused, and RuntimeFeatures says so.
func TestCRIAPIMountOptions(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	ctx := rpcCtx(t)
	st, err := e.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil || !st.GetFeatures().GetMountOptions() {
		t.Errorf("Status: features %v (%v), want mount_options", st.GetFeatures(), err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pod := e.runTestPod(t, "mntopts")
	mount := func(opts ...string) ctrMod {
		return func(c *runtimeapi.ContainerConfig) {
			c.Mounts = append(c.Mounts, &runtimeapi.Mount{HostPath: dir, ContainerPath: "/m", MountOptions: opts})
		}
	}
	plain, _ := e.runContainer(t, pod, containerConfig("plain", images.ref("busybox"), ctrCommand("sleep", "1000"), mount()))
	if out := e.execOutput(t, plain, "/m/run.sh"); !strings.Contains(out, "ran") {
		t.Errorf("without options, /m/run.sh: %q, want it to run", out)
	}
	noexec, _ := e.runContainer(t, pod, containerConfig("noexec", images.ref("busybox"), ctrCommand("sleep", "1000"), mount("noexec", "nodev", "nosuid")))
	if r := e.execSync(t, noexec, 10, "sh", "-c", "/m/run.sh"); r.ExitCode != 126 {
		t.Errorf("with noexec, /m/run.sh: exit %d %q, want 126 (not executable)", r.ExitCode, r.Stdout)
	}
	mi := e.execOutput(t, noexec, "cat", "/proc/self/mountinfo")
	var line string
	for _, l := range strings.Split(mi, "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == "/m" {
			line = l
		}
	}
	for _, o := range []string{"noexec", "nodev", "nosuid"} {
		if !strings.Contains(line, o) {
			t.Errorf("mountinfo of /m %q lacks %s", line, o)
		}
	}
	cs, _ := e.containerStatus(t, noexec)
	if len(cs.Mounts) != 1 || !slices.Equal(cs.Mounts[0].MountOptions, []string{"noexec", "nodev", "nosuid"}) {
		t.Errorf("ContainerStatus mounts %v, want mount_options noexec nodev nosuid", cs.Mounts)
	}
	bad := containerConfig("bad", images.ref("busybox"), ctrCommand("sleep", "1000"), mount("rw", "exec"))
	if _, err := e.tryCreateContainer(ctx, pod, bad); code(err) != codes.InvalidArgument {
		t.Errorf("mount_options rw,exec: %v, want InvalidArgument", err)
	}
	e.removeContainer(t, plain)
	e.removeContainer(t, noexec)
	e.stopAndRemove(t, pod.id)
	e.assertNoLeaks(t)
}
