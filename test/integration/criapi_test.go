package integration

import (
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
