package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCheckpointPod checkpoints a pod of two counting containers (the
// count lives in a shell variable, their memory) and restores it as a new
// pod whose containers count on from where they were. Where CRIU cannot
// checkpoint, it checks that CheckpointPod and RestorePod say so
// (FailedPrecondition with criu's reason), write nothing, leave the
// containers running and make no pod, and skips the rest with that reason.
func TestCheckpointPod(t *testing.T) {
	e, images := newContainerEnv(t, "busybox")
	t.Cleanup(e.removeAllPods)
	ref := images.ref("busybox")
	pod := e.runTestPod(t, "podcp")
	out := t.TempDir()
	counter := "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.2; done"
	a, _ := e.runContainer(t, pod, containerConfig("a", ref, ctrShell(counter)))
	b, _ := e.runContainer(t, pod, containerConfig("b", ref, ctrShell(counter)))
	idle := e.createContainer(t, pod, containerConfig("idle", ref, ctrShell("sleep 1000")))

	checkpointPod := func(ids ...string) error {
		_, err := e.rt.CheckpointPod(rpcCtx(t), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod.id, OutputPath: out, ContainerIds: ids})
		return err
	}
	if err := checkpointPod(a, idle); code(err) != codes.FailedPrecondition {
		t.Errorf("pod checkpoint with a created container: %v, want FailedPrecondition", err)
	}
	if err := checkpointPod(); code(err) != codes.InvalidArgument {
		t.Errorf("pod checkpoint of no container: %v, want InvalidArgument", err)
	}
	if _, err := e.rt.CheckpointPod(rpcCtx(t), &runtimeapi.CheckpointPodRequest{PodSandboxId: "0123456789ab", OutputPath: out, ContainerIds: []string{a}}); code(err) != codes.NotFound {
		t.Errorf("checkpoint of an unknown pod: %v, want NotFound", err)
	}
	if err := eventually(10*time.Second, func() error {
		if n := e.readCount(t, a); n < 20 {
			return fmt.Errorf("count %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	beforeA, beforeB := e.readCount(t, a), e.readCount(t, b)
	err := checkpointPod(a, b)
	if suiteRuntimeType == "vm" {
		if code(err) != codes.Unimplemented {
			t.Fatalf("pod checkpoint with a vm handler: %v, want Unimplemented", err)
		}
		t.Skipf("vm handlers do not checkpoint: %v", err)
	}
	// Both count on: resumed (or never paused).
	running := func(what string) {
		t.Helper()
		for _, id := range []string{a, b} {
			if st, _ := e.containerStatus(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("%s after %s: %v", short(id), what, st.State)
			}
			n := e.readCount(t, id)
			if err := eventually(5*time.Second, func() error {
				if m := e.readCount(t, id); m <= n {
					return fmt.Errorf("%s: count stays at %d after %s: frozen", short(id), m, what)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}
	}
	if reason := criuCheck(); reason != nil {
		if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "CRIU cannot checkpoint on this host") {
			t.Fatalf("pod checkpoint where %v: %v, want FailedPrecondition with criu's reason", reason, err)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("a refused pod checkpoint left %v", ents)
		}
		running("a refused pod checkpoint")

		// RestorePod of a well-formed checkpoint: refused the same way,
		// with no pod made.
		fake := t.TempDir()
		if err := os.WriteFile(filepath.Join(fake, "a.tar"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(fake, "pod.json"), []byte(`{"version":1,"id":"x","containers":[{"name":"a","id":"x","archive":"a.tar"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, rerr := e.rt.RestorePod(rpcCtx(t), &runtimeapi.RestorePodRequest{CheckpointPath: fake, Config: e.podConfig("podcp-restored"),
			ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a", ref)}})
		if code(rerr) != codes.FailedPrecondition || !strings.Contains(rerr.Error(), "CRIU cannot checkpoint on this host") {
			t.Errorf("pod restore where %v: %v, want FailedPrecondition", reason, rerr)
		}
		if pods, err := e.rt.ListPodSandbox(rpcCtx(t), &runtimeapi.ListPodSandboxRequest{}); err != nil || len(pods.Items) != 1 {
			t.Errorf("pods after a refused restore: %v %v", pods, err)
		}
		t.Skipf("CRIU cannot checkpoint on this host; podbayd answered %v", err)
	}
	if err != nil {
		t.Fatalf("CheckpointPod: %v", err)
	}
	running("the pod checkpoint")
	for _, f := range []string{"pod.json", "a.tar", "b.tar"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	ents := archiveEntries(t, filepath.Join(out, "a.tar"))
	if _, ok := ents["checkpoint/inventory.img"]; !ok {
		t.Errorf("a.tar holds no CRIU images")
	}
	e.stopContainer(t, a, 0)
	e.stopContainer(t, b, 0)

	// Restore: a new pod, its containers created, not started.
	cfg := e.podConfig("podcp-restored")
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	resp, err := e.rt.RestorePod(rpcCtx(t), &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: cfg,
		ContainerConfigs: []*runtimeapi.ContainerConfig{
			containerConfig("a", ref, ctrShell(counter)), containerConfig("b", ref, ctrShell(counter)),
		}})
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	e.noteIDs(resp.PodSandboxId)
	if len(resp.RestoredContainers) != 2 {
		t.Fatalf("RestorePod: %v", resp)
	}
	for i, rc := range resp.RestoredContainers {
		e.noteIDs(rc.ContainerId)
		if st, _ := e.containerStatus(t, rc.ContainerId); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("restored %s: %v", rc.Name, st.State)
		}
		e.startContainer(t, rc.ContainerId)
		e.waitContainerState(t, rc.ContainerId, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStateTimeout)
		before := []int{beforeA, beforeB}[i]
		first := e.readCount(t, rc.ContainerId)
		time.Sleep(time.Second)
		later := e.readCount(t, rc.ContainerId)
		t.Logf("%s: at least %d before the checkpoint; restored %d, a second later %d", rc.Name, before, first, later)
		if first < before || later <= first {
			t.Errorf("restored %s counts %d then %d; it was at least %d before the checkpoint", rc.Name, first, later, before)
		}
	}
}
